"""Training benchmarks (issues 5 and 15): the speed of precision and compilation choices, Ray Train's
overhead, DeepSpeed ZeRO-2 vs DDP.

    python benchmarks/train.py [--run-dir runs/quickstart] [--out benchmarks/results/train.json]

Needs a run directory with a tokenizer and `packed/generic` (the quickstart job makes them).
Prints one JSON object; every ratio is measured side by side in this one run:

- ``defaults``: what ``precision: auto`` and ``compile: auto`` resolve to on this machine, and why.
- ``train_speedup``: for ``cpu-small``, ``d2`` and the soup (n = 8, 32 sequences per worker), 2 CPU
  workers of one thread, our pretrain stage on Ray Train: steady tokens/s of each configuration ÷ tokens/s
  of fp32 eager (the training path before issue 15), which runs first and again last: its tokens/s is the
  mean of the two, ``drift`` their relative difference (the noise floor of these ratios). Configurations:
  ``defaults``, ``fp32_compiled`` and ``bf16_compiled``; a configuration this machine refuses (bf16 on a
  CPU without native bf16) is reported with the reason instead of a number.
- ``loss_agreement``: the d2 runs are 200 steps from the same seed: each configuration's final training
  loss and valid perplexity against fp32 eager's (relative difference), beside fp32 eager from seed 1
  (``fp32_eager_seed1``): what changing only the seed moves them by, the scale to read the others against.
- ``compile_warmup``: one process, d2 under the defaults' precision: the seconds the first compiled steps
  take beyond the steady step with an empty Inductor cache (a machine's first compile) and, in a new
  process, with that cache filled; and the compiled ÷ eager steady step.
- ``bf16_emulation``: where bf16 is not native, a one-process d2 step in bf16 autocast ÷ in fp32 (why
  ``auto`` stays in fp32 there and an explicit ``bf16`` is refused).
- ``dense_train_mfu``: the d2 defaults run's MFU, against the peak of the precision in use that the run
  itself used (``train.peak_flops: auto``: this machine's cached probe), with ``peak_1_thread_flops``
  probed afresh in this run beside it.
- ``ray_train_overhead``: the steady step time of our loop on Ray Train under the defaults (1 worker with
  the machine's 2 threads; sampler, memory-mapped rows, callbacks, a metrics.jsonl/TensorBoard line every
  10 steps, ``ray.train.report`` every 50) ÷ a plain PyTorch loop with the same model, batch, optimizer,
  threads, precision and compile choice (random rows of the same memory map), run in its own process
  before and after the Ray run (the mean of the two); ``ray_run_cores_in_use``: the cores the training
  worker and every other process (Ray's daemons and actors, the driver) used in the Ray run's steady window.
- ``zero2_vs_ddp``: 2 CPU workers × 1 thread, the same model and batch: median step time and peak
  resident memory per worker under DDP and DeepSpeed ZeRO-2.
Step times are medians over the steady window (the first steps warm up and, compiled, compile).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
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
from timing import interleaved  # this folder's module (a script's folder is on sys.path)

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

LOG_EVERY = 10  # the default logging interval: a metrics.jsonl line and TensorBoard scalars
SKIP_STEPS = 20  # steady window starts here: compiled runs compile (and recompile once) before it


def plain_loop(arrays: Path, gpt_cfg, batch: int, steps: int, threads: int, precision: str,
               compiled: bool) -> list[float]:
    from slm.models.gpt import GPT
    from slm.train.config import OptimConfig
    from slm.train.data import PackedArrays
    from slm.train.hardware import autocast
    from slm.train.strategies import make_optimizer

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GPT(gpt_cfg)
    if compiled:
        model.compile()
    opt, sched = make_optimizer(model, OptimConfig(), steps, fused=True)  # as DDPStrategy
    data = PackedArrays.open(arrays)
    rng = np.random.default_rng(0)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        tokens, _ = data.take(rng.integers(0, len(data), batch))
        tokens = torch.from_numpy(tokens)
        with autocast(precision, "cpu"):
            loss = model(tokens[:, :-1], tokens[:, 1:]).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        times.append(time.perf_counter() - t)
    return times


def ray_loop(run_dir: Path, overrides: list[str], name: str) -> tuple[list[float], dict, list[dict]]:
    """Our pretrain stage on Ray Train; step times from the wall clock logged every LOG_EVERY steps.
    (Imports here: benchmarks/before_after.py runs it with an earlier commit's slm on the path.)"""
    try:
        from slm.job import load_job
    except ImportError:  # a commit from before issue 17, whose loader held the job root
        from slm.config import load_job
    from slm.train.trainer import pretrain

    cfg = load_job(None, [f"run.root={run_dir.parent}", f"run.name={run_dir.name}", f"pretrain.name={name}",
                          f"pretrain.train.log_every={LOG_EVERY}", "pretrain.train.checkpoint_every=0",
                          "pretrain.train.eval_tokens=8192", "ray.include_dashboard=false", *overrides])
    out = run_dir / "checkpoints" / name
    shutil.rmtree(out, ignore_errors=True)  # Ray Train's checkpoints with it: a fresh run
    # a commit from before issue 30 also took the run directory
    summary = pretrain(cfg) if len(inspect.signature(pretrain).parameters) == 1 else pretrain(cfg, run_dir)
    rows = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    wall = [r["wall_time"] for r in rows]
    return list(np.diff(wall) / LOG_EVERY), summary, rows


class CoresInUse:
    """The CPU cores each kind of process on this machine uses while a Ray run in ``out`` is in its steady
    window (logged steps from SKIP_STEPS to ``last_step``): the training worker, and everything else
    (Ray's daemons and actors, this driver) — what a 2-core machine lends away from training."""

    def __init__(self, out: Path, last_step: int):
        import threading

        self.out, self.last_step = out, last_step
        self.cores: dict[str, float] = {}
        self.thread = threading.Thread(target=self._measure, daemon=True)
        self.thread.start()

    @staticmethod
    def _cpu_seconds() -> dict[int, tuple[str, float]]:
        import psutil

        seen = {}
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                seen[proc.pid] = (" ".join(proc.info["cmdline"] or []), t.user + t.system)
        return seen

    def _logged_step(self) -> int:
        log = self.out / "logs" / "metrics.jsonl"
        lines = log.read_text().splitlines() if log.exists() else []
        return json.loads(lines[-1])["step"] if lines else 0

    def _wait_for(self, step: int) -> None:
        while self._logged_step() < step:
            time.sleep(0.2)

    def _measure(self) -> None:
        self._wait_for(SKIP_STEPS)
        first, t0 = self._cpu_seconds(), time.time()
        self._wait_for(self.last_step)
        last, seconds = self._cpu_seconds(), time.time() - t0
        worker = other = 0.0
        for pid, (cmd, cpu) in last.items():
            used = (cpu - first[pid][1]) / seconds if pid in first else 0.0
            if "RayTrainWorker" in cmd:
                worker += used
            else:
                other += used
        self.cores = {"train_worker": round(worker, 3), "everything_else": round(other, 3)}


def steady(times: list[float], skip: int) -> float:
    return statistics.median(times[skip:])


CONFIGS = {  # name → overrides; fp32_eager is the training path before issue 15
    "fp32_eager": ["pretrain.train.precision=fp32", "pretrain.train.compile=never"],
    "defaults": [],
    "fp32_compiled": ["pretrain.train.precision=fp32", "pretrain.train.compile=always"],
    "bf16_compiled": ["pretrain.train.precision=bf16", "pretrain.train.compile=always"],
}


def speedup_rows(work: Path, model: list[str], label: str, steps: int, batch: int,
                 same_as_fp32_eager: bool, seed_noise: bool = False) -> dict:
    """Each configuration of CONFIGS on 2 workers × 1 thread, the same model, batch, seed and steps
    (``seed_noise``: also fp32 eager from another seed, the scale a precision's difference is read against)."""
    from slm.config import ConfigError

    two = [*model, "pretrain.train.num_workers=2", "pretrain.train.torch_threads=1",
           f"pretrain.train.batch_size={batch}", f"pretrain.train.budget.steps={steps}"]
    out: dict = {}
    extra = [("fp32_eager_seed1", [*CONFIGS["fp32_eager"], "pretrain.train.seed=1"])] if seed_noise else []
    # fp32 eager runs first and again last: the base is the mean of the two, and their difference is the
    # machine's drift over the comparison (a ratio smaller than that is not a measured difference).
    for name, overrides in [*CONFIGS.items(), *extra, ("fp32_eager_repeat", CONFIGS["fp32_eager"])]:
        if name == "defaults" and same_as_fp32_eager:
            out[name] = {"same_as": "fp32_eager", "why": "the defaults resolve to fp32 eager on this machine"}
            continue
        try:
            times, summary, rows = ray_loop(work, [*two, *overrides], f"bench-{label}-{name}")
        except ConfigError as err:
            out[name] = {"not_run": str(err)}
            continue
        tokens_per_step = summary["tokens"] / summary["steps"]
        step_s = steady(times, SKIP_STEPS // LOG_EVERY)
        out[name] = {"precision": summary["precision"], "compiled": summary["compiled"],
                     "compile_reason": summary["compile_reason"], "step_s": round(step_s, 4),
                     "tokens_per_s": round(tokens_per_step / step_s, 1),
                     "mfu": round(statistics.median(r["mfu"] for r in rows[SKIP_STEPS // LOG_EVERY:]), 4),
                     "peak_flops": summary["peak_flops"], "peak_flops_source": summary["peak_flops_source"],
                     "final_loss": summary["final_loss"],
                     "valid_ppl": (summary.get("eval") or {}).get("macro", {}).get("perplexity"),
                     "wall_seconds": summary["wall_seconds"], "peak_rss_mb": summary["peak_rss_mb"]}
    first, last = out["fp32_eager"]["tokens_per_s"], out.pop("fp32_eager_repeat")["tokens_per_s"]
    base = (first + last) / 2
    out["fp32_eager"]["tokens_per_s_first_last"] = [first, last]
    out["fp32_eager"]["drift"] = round(abs(first - last) / base, 3)
    for row in out.values():
        if "tokens_per_s" in row:
            row["speedup_vs_fp32_eager"] = round(row["tokens_per_s"] / base, 3)
    if same_as_fp32_eager:
        out["defaults"] = {**out["fp32_eager"], **out["defaults"]}
    return out


def bf16_emulation(gpt_cfg, batch: int, reps: int = 3) -> dict:
    """One process, this machine's threads: a bf16-autocast eager step ÷ an fp32 eager step (interleaved)."""
    from slm.models.gpt import GPT
    from slm.train.hardware import autocast

    torch.manual_seed(0)
    x = torch.randint(0, gpt_cfg.vocab_size, (batch, gpt_cfg.seq_len))
    steps = {}
    for precision in ("fp32", "bf16"):
        model = GPT(gpt_cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

        def step(model=model, opt=opt, precision=precision) -> float:
            t = time.perf_counter()
            with autocast(precision, "cpu"):
                loss = model(x[:, :-1], x[:, 1:]).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return time.perf_counter() - t

        steps[precision] = step
    med = interleaved(steps, reps)
    return {"fp32_step_s": round(med["fp32"], 3), "bf16_step_s": round(med["bf16"], 3),
            "bf16_over_fp32": round(med["bf16"] / med["fp32"], 2), "threads": torch.get_num_threads()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", default="runs/quickstart")
    ap.add_argument("--steps", type=int, default=100, help="the overhead and ZeRO runs")
    ap.add_argument("--agreement-steps", type=int, default=200, help="the d2 speedup runs")
    ap.add_argument("--small-steps", type=int, default=40, help="the cpu-small and soup speedup runs")
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--only", default="", help="comma-separated parts: defaults,warmup,speedup,overhead,zero2")
    ap.add_argument("--out", default="")
    ap.add_argument("--plain-only", help=argparse.SUPPRESS)  # internal: the plain loop, in its own process
    args = ap.parse_args()
    if args.plain_only:
        from slm.models.gpt import GPTConfig

        spec = json.loads(args.plain_only)
        times = plain_loop(Path(spec["arrays"]), GPTConfig(**spec["gpt"]), args.batch, args.steps, threads=2,
                           precision=spec["precision"], compiled=spec["compiled"])
        print(json.dumps(times))
        return

    import ray

    from slm.job import load_job
    from slm.layout import RunLayout
    from slm.models.config import ModelConfig
    from slm.models.gpt import GPTConfig
    from slm.runtime import cpu_model, native_bf16
    from slm.train import hardware
    from slm.train.config import TrainConfig
    from slm.train.data import packed_arrays
    from slm.train.trainer import gpt_config

    parts = set(args.only.split(",")) if args.only else {"defaults", "warmup", "speedup", "overhead", "zero2"}
    source = Path(args.run_dir).expanduser().resolve()
    work = Path(tempfile.mkdtemp(prefix="slm-bench-train-")) / source.name
    work.mkdir(parents=True)
    for part in ("tokenizer", "packed", "clusters", "histograms"):  # read-only inputs, linked
        if (source / part).exists():
            (work / part).symlink_to(source / part)
    cfg = load_job(None, [f"run.root={work.parent}", f"run.name={work.name}"])
    arrays = packed_arrays(RunLayout.of(cfg), "generic")
    seq_len = int(np.load(arrays / "tokens.npy", mmap_mode="r").shape[1]) - 1
    gpt: GPTConfig = gpt_config(ModelConfig(depth=args.depth), RunLayout.of(cfg).vocab_size(), seq_len)

    defaults = TrainConfig()
    precision = hardware.worker_precision(defaults, "cpu", "pretrain.train.precision")
    choice = hardware.resolve_compile(defaults.compile, "cpu", precision, args.steps, None)
    result: dict = {
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version(),
                    "processor": cpu_model(),
                    "native_bf16": native_bf16("cpu")},
        "defaults": {"precision": precision, "compiled": choice.enabled, "compile_reason": choice.reason},
        "model": {"depth": args.depth, "d_model": gpt.d_model, "seq_len": seq_len, "vocab": gpt.vocab_size,
                  "batch_per_worker": args.batch, "steady_from_step": SKIP_STEPS},
    }
    if "defaults" in parts:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        peaks = {"fp32": hardware.matmul_flops(torch.device("cpu"), torch.float32)}
        if native_bf16("cpu"):
            peaks["bf16"] = hardware.matmul_flops(torch.device("cpu"), torch.bfloat16)
        torch.set_num_threads(threads)
        result["peak_1_thread_flops"] = {k: round(v / 1e9, 1) * 1e9 for k, v in peaks.items()}
        if not native_bf16("cpu"):
            result["bf16_emulation"] = bf16_emulation(gpt, args.batch)

    def plain_in_own_process(steps: int, compiled: bool = choice.enabled, cache: str | None = None) -> list[float]:
        import dataclasses
        import subprocess
        import sys

        spec = json.dumps({"arrays": str(arrays), "gpt": dataclasses.asdict(gpt), "precision": precision,
                           "compiled": compiled})
        env = {**os.environ, **({"TORCHINDUCTOR_CACHE_DIR": cache} if cache else {})}
        out = subprocess.run([sys.executable, __file__, "--plain-only", spec, f"--steps={steps}",
                              f"--batch={args.batch}"], check=True, capture_output=True, text=True, env=env).stdout
        return json.loads(out.strip().splitlines()[-1])

    if "warmup" in parts:
        # The compile warm-up of one process (the first steps' time beyond the steady step): with an empty
        # Inductor cache (a machine's first compile), then again in a new process with that cache filled.
        cache = tempfile.mkdtemp(prefix="slm-bench-inductor-")
        try:
            cold, warm, eager = (plain_in_own_process(30, True, cache), plain_in_own_process(30, True, cache),
                                 plain_in_own_process(30, False))
        finally:
            shutil.rmtree(cache, ignore_errors=True)

        def warmup_s(times: list[float]) -> float:
            return round(sum(times[:3]) - 3 * steady(times, 10), 2)  # a recompile may land on step 2

        result["compile_warmup"] = {
            "precision": precision, "threads": 2, "cold_cache_s": warmup_s(cold), "warm_cache_s": warmup_s(warm),
            "compiled_step_s": round(steady(warm, 10), 4), "eager_step_s": round(steady(eager, 10), 4),
            "compiled_over_eager_step": round(steady(warm, 10) / steady(eager, 10), 3)}

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        if "speedup" in parts:
            same = precision == "fp32" and not choice.enabled  # measured once, reported for both names
            speed = {
                f"d{args.depth}": speedup_rows(work, [f"pretrain.model.depth={args.depth}"], f"d{args.depth}",
                                               args.agreement_steps, args.batch, same, seed_noise=True),
                "cpu-small": speedup_rows(work, ["pretrain.model.preset=cpu-small"], "cpu-small",
                                          args.small_steps, args.batch, same),
                "soup_n8_b32": speedup_rows(work, [f"pretrain.model.depth={args.depth}", "pretrain.method=soup",
                                                   "pretrain.model.soup.experts=8"], "soup", args.small_steps, 32, same),
            }
            result["train_speedup"] = {k: {**{c: r.get("speedup_vs_fp32_eager", r.get("not_run")) for c, r in v.items()
                                              if c in CONFIGS},
                                           "fp32_eager_drift": v["fp32_eager"]["drift"]}
                                       for k, v in speed.items()}
            result["train_speedup_rows"] = speed
            base = speed[f"d{args.depth}"]["fp32_eager"]
            result["loss_agreement"] = {
                "steps": args.agreement_steps,
                **{name: ({"final_loss": row["final_loss"], "valid_ppl": row["valid_ppl"],
                           "loss_rel_diff": float(f"{row['final_loss'] / base['final_loss'] - 1:.2g}"),
                           "ppl_rel_diff": float(f"{row['valid_ppl'] / base['valid_ppl'] - 1:.2g}")}
                          if "final_loss" in row else row)
                   for name, row in speed[f"d{args.depth}"].items()}}
            d = speed[f"d{args.depth}"]["defaults"]
            result["dense_train_mfu"] = {"mfu": d["mfu"], "against_flops": d["peak_flops"],
                                         "precision": d["precision"], "peak_source": d["peak_flops_source"]}
        if "overhead" in parts:
            ray.shutdown()
            plain_before = plain_in_own_process(args.steps)
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
            cores = CoresInUse(work / "checkpoints" / "bench-ray-1w", last_step=args.steps - LOG_EVERY)
            ray_times, _, _ = ray_loop(work, [f"pretrain.model.depth={args.depth}", f"pretrain.train.batch_size={args.batch}",
                                              f"pretrain.train.budget.steps={args.steps}", "pretrain.train.num_workers=1",
                                              "pretrain.train.cpus_per_worker=2", "pretrain.train.torch_threads=2"],
                                       "bench-ray-1w")
            ray.shutdown()
            plain_after = plain_in_own_process(args.steps)
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
            ray_step = steady(ray_times, SKIP_STEPS // LOG_EVERY)
            plain_step = (steady(plain_before, SKIP_STEPS) + steady(plain_after, SKIP_STEPS)) / 2
            result.update({
                "ray_train_overhead": round(ray_step / plain_step, 3), "ray_train_step_s": round(ray_step, 4),
                "plain_step_s": round(plain_step, 4),
                "plain_step_s_before_after": [round(steady(plain_before, SKIP_STEPS), 4),
                                              round(steady(plain_after, SKIP_STEPS), 4)],
                "ray_run_cores_in_use": cores.cores})
        if "zero2" in parts:
            two = [f"pretrain.model.depth={args.depth}", f"pretrain.train.batch_size={args.batch}",
                   f"pretrain.train.budget.steps={args.steps}", "pretrain.train.num_workers=2",
                   "pretrain.train.torch_threads=1"]
            ddp_times, ddp, _ = ray_loop(work, [*two, "pretrain.train.strategy=ddp"], "bench-ddp")
            z2_times, z2, _ = ray_loop(work, [*two, "pretrain.train.strategy=deepspeed", "pretrain.train.zero_stage=2"],
                                       "bench-zero2")
            ddp_s, z2_s = steady(ddp_times, SKIP_STEPS // LOG_EVERY), steady(z2_times, SKIP_STEPS // LOG_EVERY)
            result["zero2_vs_ddp"] = {
                "ddp_step_s": round(ddp_s, 4), "zero2_step_s": round(z2_s, 4), "zero2_step_ratio": round(z2_s / ddp_s, 3),
                "ddp_peak_rss_mb_per_worker": ddp["peak_rss_mb"], "zero2_peak_rss_mb_per_worker": z2["peak_rss_mb"],
                "final_loss": {"ddp": ddp["final_loss"], "zero2": z2["final_loss"]},
                "precision": {"ddp": ddp["precision"], "zero2": z2["precision"]}}
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    shutil.rmtree(work.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
