"""What pinned numerics cost, and what each kernel library changes (issue 63): JSON on stdout.

    python benchmarks/numerics.py [--steps 30] [--repeats 3] [--out benchmarks/results/numerics/cost_<cpu>.json]

For the second edition's two sizes (d1 and d2: vocabulary 1,024, 256 tokens, 32 sequences a step, fp32, one
thread, the platform's AdamW) a step's time under native and under pinned numerics, measured side by side:
each repeat runs both, alternating which goes first, each in a fresh process (the pins must be in place before
a process's first kernel), and the ratio is of the medians. Then, for each library pinned alone, whether the
30-step training's final weights differ from native's: which library's code this CPU changes."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from slm.artifacts import atomic_write_json
from slm.runtime import cpu_flags, cpu_model
from slm.train.numerics import PINNED_ENV, pinned_environment

ROOT = Path(__file__).resolve().parents[1]

STEP = """
import hashlib, json, sys, time
import numpy as np, torch
from slm.models.gpt import GPT, GPTConfig
from slm.train.config import OptimConfig
from slm.train.numerics import kernel_probe
from slm.train.strategies import make_optimizer
depth, steps = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
torch.manual_seed(0)
model = GPT(GPTConfig.from_depth(depth, vocab_size=1024, seq_len=256))
opt, schedule = make_optimizer(model, OptimConfig(lr=1e-2, warmup_steps=5, schedule="wsd"), steps, fused=True)
tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 1024, size=(steps + 2, 32, 257)))
times = []
for i, batch in enumerate(tokens):
    start = time.perf_counter()
    loss = model(batch[:, :-1], batch[:, 1:]).loss
    opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); schedule.step()
    if i >= 2:  # the first steps allocate
        times.append(time.perf_counter() - start)
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
print(json.dumps({"s_per_step": sorted(times)[len(times) // 2], "weights": digest, "probe": kernel_probe(),
                  "aten": torch.backends.cpu.get_cpu_capability()}))
"""


def measure(depth: int, steps: int, env: dict[str, str]) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in PINNED_ENV}
    proc = subprocess.run([sys.executable, "-c", STEP, str(depth), str(steps)], capture_output=True, text=True,
                          check=True, cwd=ROOT, env={**clean, **env})
    return json.loads(proc.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = {"machine": {"cpu": cpu_model(), "flags": sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16",
                                                                            "amx_bf16"})},
              "steps": args.steps, "repeats": args.repeats, "sizes": {}}
    pinned = pinned_environment()
    for depth in (1, 2):
        runs: dict[str, list[dict]] = {"native": [], "pinned": []}
        for repeat in range(args.repeats):
            order = ("native", "pinned") if repeat % 2 == 0 else ("pinned", "native")
            for mode in order:
                runs[mode].append(measure(depth, args.steps, pinned if mode == "pinned" else {}))
        native = statistics.median(r["s_per_step"] for r in runs["native"])
        pin = statistics.median(r["s_per_step"] for r in runs["pinned"])
        result["sizes"][f"d{depth}"] = {
            "native_s_per_step": round(native, 4), "pinned_s_per_step": round(pin, 4),
            "pinned_over_native": round(pin / native, 3),
            "native_runs_alike": len({r["weights"] for r in runs["native"]}) == 1,
            "pinned_runs_alike": len({r["weights"] for r in runs["pinned"]}) == 1,
            "native_weights": runs["native"][0]["weights"], "pinned_weights": runs["pinned"][0]["weights"],
            "native_probe": runs["native"][0]["probe"], "pinned_probe": runs["pinned"][0]["probe"],
            "native_aten": runs["native"][0]["aten"]}
    native_weights = result["sizes"]["d1"]["native_weights"]
    result["one_library_pinned"] = {
        f"{k}={v}": {"changes_the_weights": measure(1, args.steps, {k: v})["weights"] != native_weights}
        for k, v in PINNED_ENV.items()}
    if args.out:
        atomic_write_json(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
