"""Training benchmarks (issue 5): Ray Train's overhead over a plain PyTorch loop, DeepSpeed ZeRO-2 vs DDP.

    python benchmarks/train.py [--run-dir runs/quickstart] [--out benchmarks/results/train.json]

Needs a run directory with a tokenizer and `packed/generic` (the quickstart job makes them).
Prints one JSON object:

- ``ray_train_overhead``: the steady-state step time of our loop on Ray Train (1 worker with the
  machine's 2 threads; sampler, memory-mapped rows, callbacks, a metrics.jsonl/TensorBoard line every
  10 steps, ``ray.train.report`` every 50) ÷ a plain PyTorch loop on the same model, batch, optimizer and
  threads (random rows of the same memory map), run in its own process before and after the Ray run
  (the mean of the two). Step times are medians over the steady window (the first steps warm up).
- ``zero2_vs_ddp``: 2 CPU workers × 1 thread, the same model and batch: median step time and peak
  resident memory per worker under DDP and DeepSpeed ZeRO-2.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def plain_loop(arrays: Path, gpt_cfg, batch: int, steps: int, threads: int) -> list[float]:
    from slm.config import OptimConfig
    from slm.models.gpt import GPT
    from slm.train.data import PackedArrays
    from slm.train.strategies import make_optimizer

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GPT(gpt_cfg)
    opt, sched = make_optimizer(model, OptimConfig(), steps, fused=True)  # as DDPStrategy
    data = PackedArrays.open(arrays)
    rng = np.random.default_rng(0)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        tokens, _ = data.take(rng.integers(0, len(data), batch))
        tokens = torch.from_numpy(tokens)
        loss = model(tokens[:, :-1], tokens[:, 1:]).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        times.append(time.perf_counter() - t)
    return times


def ray_loop(run_dir: Path, overrides: list[str], name: str) -> tuple[list[float], dict]:
    """Our pretrain stage on Ray Train; step times from the wall clock logged with every step."""
    from slm.config import load_job
    from slm.train.trainer import pretrain

    cfg = load_job(None, [f"run.root={run_dir.parent}", f"run.name={run_dir.name}", f"pretrain.name={name}",
                          f"pretrain.train.log_every={LOG_EVERY}", "pretrain.train.checkpoint_every=0",
                          "pretrain.train.eval_tokens=256", "ray.include_dashboard=false", *overrides])
    out = run_dir / "checkpoints" / name
    shutil.rmtree(out, ignore_errors=True)  # Ray Train's checkpoints with it: a fresh run
    summary = pretrain(cfg, run_dir)
    rows = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    wall = [r["wall_time"] for r in rows]  # every LOG_EVERY steps: per-step time over each interval
    return list(np.diff(wall) / LOG_EVERY), summary


LOG_EVERY = 10  # the default logging interval: a metrics.jsonl line and TensorBoard scalars


def steady(times: list[float], skip: int) -> float:
    return statistics.median(times[skip:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", default="runs/quickstart")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out", default="")
    ap.add_argument("--plain-only", help=argparse.SUPPRESS)  # internal: the plain loop, in its own process
    args = ap.parse_args()
    if args.plain_only:
        from slm.models.gpt import GPTConfig

        spec = json.loads(args.plain_only)
        times = plain_loop(Path(spec["arrays"]), GPTConfig(**spec["gpt"]), args.batch, args.steps, threads=2)
        print(json.dumps(times))
        return

    import ray

    from slm.config import ModelConfig, load_job
    from slm.models.gpt import GPTConfig
    from slm.train.trainer import gpt_config, packed, vocab_size

    source = Path(args.run_dir).expanduser().resolve()
    work = Path(tempfile.mkdtemp(prefix="slm-bench-train-")) / source.name
    work.mkdir(parents=True)
    for part in ("tokenizer", "packed", "clusters", "histograms"):  # read-only inputs, linked
        if (source / part).exists():
            (work / part).symlink_to(source / part)
    cfg = load_job(None, [f"run.root={work.parent}", f"run.name={work.name}"])
    arrays = packed(work, cfg, "generic")
    seq_len = int(np.load(arrays / "tokens.npy", mmap_mode="r").shape[1]) - 1
    gpt: GPTConfig = gpt_config(ModelConfig(depth=args.depth), vocab_size(work, cfg), seq_len)
    skip = 10  # steps; Ray's intervals are LOG_EVERY steps long
    common = [f"pretrain.model.depth={args.depth}", f"pretrain.train.batch_size={args.batch}",
              f"pretrain.train.budget.steps={args.steps}"]

    def plain_in_own_process() -> list[float]:
        import dataclasses
        import subprocess
        import sys

        spec = json.dumps({"arrays": str(arrays), "gpt": dataclasses.asdict(gpt)})
        out = subprocess.run([sys.executable, __file__, "--plain-only", spec, f"--steps={args.steps}",
                              f"--batch={args.batch}"], check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    # 1. the plain loop (its own process, no Ray in it), then Ray Train with one worker holding both
    #    threads, then the plain loop again: the ratio uses the mean of the two plain medians
    plain_before = plain_in_own_process()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        ray_times, _ = ray_loop(work, [*common, "pretrain.train.num_workers=1", "pretrain.train.cpus_per_worker=2",
                                       "pretrain.train.torch_threads=2"], "bench-ray-1w")
        ray.shutdown()
        plain_after = plain_in_own_process()
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        ray_step = steady(ray_times, skip // LOG_EVERY)
        plain_step = (steady(plain_before, skip) + steady(plain_after, skip)) / 2
        # 2. DDP vs ZeRO-2 on two workers of one thread
        two = [*common, "pretrain.train.num_workers=2", "pretrain.train.torch_threads=1"]
        ddp_times, ddp = ray_loop(work, [*two, "pretrain.train.strategy=ddp"], "bench-ddp")
        z2_times, z2 = ray_loop(work, [*two, "pretrain.train.strategy=deepspeed", "pretrain.train.zero_stage=2"],
                                "bench-zero2")
    finally:
        ray.shutdown()
    result = {
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version()},
        "model": {"depth": args.depth, "d_model": gpt.d_model, "seq_len": seq_len, "vocab": gpt.vocab_size,
                  "batch_per_worker": args.batch, "steps": args.steps, "steady_from_step": skip},
        "ray_train_overhead": round(ray_step / plain_step, 3),
        "ray_train_step_s": round(ray_step, 4),
        "plain_step_s": round(plain_step, 4),
        "plain_step_s_before_after": [round(steady(plain_before, skip), 4), round(steady(plain_after, skip), 4)],
        "zero2_vs_ddp": {
            "ddp_step_s": round(steady(ddp_times, skip // LOG_EVERY), 4),
            "zero2_step_s": round(steady(z2_times, skip // LOG_EVERY), 4),
            "zero2_step_ratio": round(steady(z2_times, skip // LOG_EVERY) / steady(ddp_times, skip // LOG_EVERY), 3),
            "ddp_peak_rss_mb_per_worker": ddp["peak_rss_mb"],
            "zero2_peak_rss_mb_per_worker": z2["peak_rss_mb"],
            "final_loss": {"ddp": ddp["final_loss"], "zero2": z2["final_loss"]},
        },
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    shutil.rmtree(work.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
