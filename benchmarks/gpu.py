"""The GPU check (issue 15): does training run on the GPU, in bf16, compiled, at a sane MFU?

    python benchmarks/gpu.py [--steps 300] [--only ddp,zero2] [--out benchmarks/results/gpu.json]

On a machine without CUDA it prints ``{"skipped": ...}`` and exits 0. On a CUDA machine it prints one
JSON object:

- ``ddp``: ``slm-126m`` pretrained by our real stage (``slm.train.trainer.pretrain``: Ray Train, one GPU
  worker, DDP strategy, the defaults ``precision: auto`` and ``compile: auto``) for ``--steps`` steps:
  steady tokens/s, MFU against the GPU's bf16 peak, peak GPU memory, where the parameters lived, the
  precision and compile choice the worker made, and the loss at the first and last logged step;
- ``zero2``: the same under DeepSpeed ZeRO-2;
- ``soup_vs_dense``: in one process, a Soup-of-Experts step (n = 8 experts, the batch's h from the prior)
  ÷ a dense step of the same model and batch, both bf16 autocast + compiled, medians of interleaved steps;
- ``study_sizes``: the study's own models (``jobs/sweeps/study.yaml``: d1 and d2, a 1,024-token vocabulary,
  32 × 256 tokens a step) timed a step at a time on the GPU, eager, in fp32 (what the study pins) and bf16
  autocast, and what the study's pretraining steps (``benchmarks/results/study/plan.json``) would take one
  run at a time at those rates.

Each section runs on its own: one that fails records its error and the others still run, and the JSON is
rewritten after each section (``--out``), so one call on a lent GPU returns all that worked.

The data is synthetic but learnable, made here so the check needs nothing but this repository: token
sequences from a fixed random Markov chain over the 32,768-token vocabulary with 4 successors per token
(entropy ln 4 ≈ 1.39 nats), so the loss must fall from ln 32768 ≈ 10.4 towards 1.39. The check fails
(exit 1, ``"ok": false``) if a section failed, the parameters were not on CUDA or the loss did not fall.
Measured on an H200: docs/training.md; `benchmarks/gpu_carry.sh` packs the packages its image lacks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from timing import interleaved  # this folder's module (a script's folder is on sys.path)

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

VOCAB, SEQ_LEN, SUCCESSORS = 32768, 1024, 4


def markov_sequences(rows: int, seed: int = 0) -> np.ndarray:
    """``rows`` sequences of SEQ_LEN + 1 tokens from a fixed random chain with SUCCESSORS next tokens each."""
    rng = np.random.default_rng(seed)
    table = rng.integers(0, VOCAB, size=(VOCAB, SUCCESSORS), dtype=np.int64)
    out = np.empty((rows, SEQ_LEN + 1), dtype=np.int64)
    out[:, 0] = rng.integers(0, VOCAB, rows)
    choices = rng.integers(0, SUCCESSORS, size=(rows, SEQ_LEN))
    for t in range(SEQ_LEN):
        out[:, t + 1] = table[out[:, t], choices[:, t]]
    return out.astype(np.uint16)


def write_run(root: Path, rows: int) -> Path:
    """A run directory holding what the pretrain stage reads: a tokenizer of VOCAB tokens and a packed set."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from slm.artifacts import write_manifest

    run = root / "gpu-check"
    (run / "tokenizer").mkdir(parents=True)
    Tokenizer(WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0")).save(str(run / "tokenizer" / "tokenizer.json"))
    tokens = markov_sequences(rows)
    data = run / "packed" / "generic" / "data"
    data.mkdir(parents=True)
    flat = pa.array(tokens.reshape(-1), pa.uint16())
    table = pa.table({"tokens": pa.FixedSizeListArray.from_arrays(flat, SEQ_LEN + 1),
                      "coarse": pa.array(np.zeros(rows, np.int32)), "leaf": pa.array(np.zeros(rows, np.int32))})
    pq.write_table(table, data / "part-0.parquet")
    write_manifest(data.parent, {"stage": "pack", "seq_len": SEQ_LEN, "sequences": rows,  # as the pack stage does
                                 "tokens": rows * (SEQ_LEN + 1)})
    return run


def train_run(run: Path, name: str, steps: int, batch: int, extra: list[str]) -> dict:
    from slm.job import load_job
    from slm.train.trainer import pretrain

    cfg = load_job(None, [f"run.root={run.parent}", f"run.name={run.name}", "corpus.domains=[]",
                          f"pretrain.name={name}", "pretrain.model.preset=slm-126m",
                          f"pretrain.data={run / 'packed' / 'generic'}", "pretrain.train.use_gpu=true",
                          "pretrain.train.num_workers=1", f"pretrain.train.batch_size={batch}",
                          f"pretrain.train.budget.steps={steps}", "pretrain.train.log_every=10",
                          "pretrain.train.checkpoint_every=0", "pretrain.train.report_every=0",
                          "ray.include_dashboard=false", *extra])
    summary = pretrain(cfg)
    rows = [json.loads(line) for line in (run / "checkpoints" / name / "logs" / "metrics.jsonl").read_text().splitlines()]
    steady = [r for r in rows if r["step"] > 50 and "tokens_per_s" in r]  # after compile and warm-up
    return {
        "param_device": summary["param_device"], "precision": summary["precision"],
        "compiled": summary["compiled"], "compile_reason": summary["compile_reason"],
        "peak_flops": summary["peak_flops"], "peak_flops_source": summary["peak_flops_source"],
        "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in steady), 1),
        "mfu": round(statistics.median(r["mfu"] for r in steady), 4),
        "peak_device_mb": summary.get("peak_device_mb"), "steps": summary["steps"],
        "first_loss": rows[0]["loss"], "final_loss": rows[-1]["loss"], "wall_seconds": summary["wall_seconds"],
    }


def soup_vs_dense(batch: int, n_experts: int, reps: int = 20) -> dict:
    from slm.models import GPT, SoupOfExperts, preset
    from slm.models.soup import DomainPrior
    from slm.train.hardware import autocast

    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = preset("slm-126m")
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len), device=device)
    y = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len), device=device)
    prior = DomainPrior(16, 2)

    def make(model, soup: bool):
        model.to(device).compile()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

        def step() -> float:
            torch.cuda.synchronize()
            t = time.perf_counter()
            with autocast("bf16", "cuda"):
                loss = (model(x, prior.sample().to(device), y) if soup else model(x, y)).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            return time.perf_counter() - t

        return step

    steps = {"dense": make(GPT(cfg), False),
             "soup": make(SoupOfExperts(cfg, n_experts=n_experts, n_domains=16, expert_init_std=0.02), True)}
    med = interleaved(steps, reps, warmup=3)  # the warm-up compiles, then warms the allocator
    return {"n_experts": n_experts, "batch": batch, "dense_step_s": round(med["dense"], 4),
            "soup_step_s": round(med["soup"], 4), "ratio": round(med["soup"] / med["dense"], 3)}


def study_sizes(reps: int = 30) -> dict:
    """Seconds a step of the study's d1 and d2 models on the GPU, and the study's pretraining at that rate."""
    from slm.job import load_job
    from slm.models import GPT, GPTConfig
    from slm.train.hardware import autocast

    device = torch.device("cuda")
    here = Path(__file__).resolve().parent
    study = load_job(here.parent / "jobs" / "sweeps" / "study.yaml", [])
    batch, seq_len, vocab = study.pretrain.train.batch_size, study.pack.seq_len, study.tokenizer.vocab_size
    plan = json.loads((here / "results" / "study" / "plan.json").read_text())
    steps_by_size: dict[str, int] = {}
    for run in plan["runs"]:
        steps_by_size[run["size"]] = steps_by_size.get(run["size"], 0) + int(run["steps"])
    out: dict = {"batch": batch, "seq_len": seq_len, "vocab": vocab, "plan_steps": steps_by_size}
    for size in sorted(steps_by_size):
        depth = int(size.removeprefix("d"))
        model = GPT(GPTConfig.from_depth(depth, vocab_size=vocab, seq_len=seq_len)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        x = torch.randint(0, vocab, (batch, seq_len), device=device)

        def step(precision: str, model=model, opt=opt, x=x) -> float:
            torch.cuda.synchronize()
            t = time.perf_counter()
            with autocast(precision, "cuda"):
                loss = model(x, x).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            return time.perf_counter() - t

        med = interleaved({p: (lambda p=p: step(p)) for p in ("fp32", "bf16")}, reps, warmup=3)
        out[size] = {p: {"step_s": round(v, 5), "tokens_per_s": round(batch * seq_len / v)} for p, v in med.items()}
        out[size]["plan_minutes_fp32_one_at_a_time"] = round(steps_by_size[size] * med["fp32"] / 60, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out", default="")
    ap.add_argument("--only", default="study_sizes,ddp,zero2,soup_vs_dense",
                    help="the sections to run, comma-separated (default: all)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": f"no CUDA device here (torch {torch.__version__}, CUDA build "
                                     f"{torch.version.cuda}): run this check on a GPU machine"}))
        return 0
    import ray

    result: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "ray": ray.__version__,
                    "model": "slm-126m", "seq_len": SEQ_LEN, "batch": args.batch, "steps": args.steps}

    def section(name: str, fn, *a, **kw) -> None:
        if name not in only:
            return
        started = time.perf_counter()
        try:
            result[name] = fn(*a, **kw)
        except Exception as e:  # noqa: BLE001 - one section's failure is recorded; the others still run
            import traceback

            result[name] = {"error": f"{type(e).__name__}: {e}"[:2000],
                            "traceback": traceback.format_exc()[-4000:]}
        result[name]["section_s"] = round(time.perf_counter() - started, 1)
        print(f"[gpu] {name}: {'failed' if 'error' in result[name] else 'done'} in "
              f"{result[name]['section_s']} s", flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")

    section("study_sizes", study_sizes)
    if only & {"ddp", "zero2"}:
        root = Path(tempfile.mkdtemp(prefix="slm-gpu-check-"))
        try:
            run = write_run(root, rows=max(512, args.steps * args.batch // 4))
            ray.init(address="local", include_dashboard=False, log_to_driver=True)
            section("ddp", train_run, run, "ddp", args.steps, args.batch, ["pretrain.train.strategy=ddp"])
            section("zero2", train_run, run, "zero2", args.steps, args.batch,
                    ["pretrain.train.strategy=deepspeed", "pretrain.train.zero_stage=2"])
            ray.shutdown()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    section("soup_vs_dense", soup_vs_dense, batch=args.batch, n_experts=8)
    checks = {}
    for k in ("ddp", "zero2"):
        if k in result:
            ran = "error" not in result[k]
            checks[f"{k}_ran"] = ran
            checks[f"{k}_on_cuda"] = ran and result[k]["param_device"].startswith("cuda")
            checks[f"{k}_loss_fell"] = ran and result[k]["final_loss"] < result[k]["first_loss"] - 1.0
    for k in ("soup_vs_dense", "study_sizes"):
        if k in result:
            checks[f"{k}_ran"] = "error" not in result[k]
    result["checks"], result["ok"] = checks, all(checks.values())
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
