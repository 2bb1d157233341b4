"""The pilot: where does the generic small model saturate on the whole bundled corpus?

    python benchmarks/pilot.py --seeds 0 1 --out-dir benchmarks/results/pilot_wsd      # one part: two seeds
    python benchmarks/pilot.py --seeds 2 --out-dir benchmarks/results/pilot_wsd         # the next part
    python benchmarks/pilot.py --probe --seeds 0 1 2                                    # its wall time, first
    python benchmarks/pilot.py --combine benchmarks/results/pilot_wsd                   # the fit, from the parts
    python benchmarks/pilot.py --schedule cosine --steps 250 500 1000 2000 4000 --out F   # the 2026 pilots

The papers' crossovers need a regime where the small generic model has saturated: its valid loss changes
by < 1% over the last doubling of its pretraining budget. The protocol, fixed here before any run:

- **data**: every generic document of the corpus, packed from the text (generic pretraining needs no
  embedding); the valid loss is the mean over the bundled domains' valid splits of the log-perplexity,
  each domain's *whole* split (``eval_tokens: 0``: no sampling error in the measure);
- **budgets** (``--schedule wsd``, the default): a doubling ladder of fully trained budgets, one
  warmup–stable–decay trunk per seed to the largest with a cooldown branch to each smaller one (issue 43;
  a branch is bit for bit the separate run of its budget), decay over the last ``--decay-fraction`` of
  each budget, 1-sqrt, to 0; ``--schedule cosine`` is the earlier pilots' protocol (a fresh cosine run per
  budget, one seed, ``--seed``);
- **model and optimizer**: the study's d1 (``--sizes``), 1,024-token BPE, 32 × 256 tokens a step,
  lr 1e-2, 200 warm-up steps, in float32 (``--precision``: the study's, the same numbers on every CPU);
- **seeds**: each seed (training init and data order) is a part, run and committed on its own
  (``--out-dir``/seed<N>.json); ``--combine`` fits L(steps) = E + A·steps^−α through every part's
  budgets (``slm.analysis.curves``: seeds are the replication unit, bootstrap over them) and writes the
  saturation read from the fit: the change over the last doubling with its interval, and the budget
  where it would fall under 1%.

Each seed's trunk trains in its own process without Ray Train (``pretrain.train.num_workers=0``), as a Ray
task of ``--threads`` threads, as many at once as the machine's cores allow (``--in-process``: one after
another in this process, without Ray, beside a pilot already running). Finished runs and branches are
read back, not retrained; an interrupted one resumes from its checkpoint.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

LADDER = [500, 1000, 2000, 4000, 8000, 16000]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="data/corpus")
    ap.add_argument("--run-dir", default="runs/pilot")
    ap.add_argument("--schedule", choices=["wsd", "cosine"], default="wsd")
    ap.add_argument("--sizes", nargs="+", default=["d1"])
    ap.add_argument("--steps", nargs="+", type=int, default=LADDER)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--warmup", type=int, default=200, help="warm-up steps (cosine: max(10, steps // 20))")
    ap.add_argument("--decay-fraction", type=float, default=0.2)
    ap.add_argument("--precision", choices=["fp32", "bf16", "auto"], default="fp32")
    ap.add_argument("--eval-tokens", type=int, default=0, help="per domain; 0: the whole valid split")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run (runs go in parallel)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0], help="wsd: one trunk per seed")
    ap.add_argument("--seed", type=int, default=0, help="cosine: the runs' training seed")
    ap.add_argument("--out-dir", help="wsd: seed<N>.json per seed, written as each finishes")
    ap.add_argument("--out", help="cosine: the JSON of the whole pilot")
    ap.add_argument("--probe", action="store_true", help="time the real steps and evaluation; train nothing")
    ap.add_argument("--in-process", action="store_true",
                    help="no Ray: train the runs one after another here (the data made by an earlier invocation)")
    ap.add_argument("--combine", metavar="DIR", help="fit the committed seed<N>.json of DIR; train nothing")
    args = ap.parse_args()
    if args.combine:
        combine(Path(args.combine))
        return

    import ray

    from slm.corpus.layout import corpus_files
    from slm.data.pack import pack
    from slm.job import load_job
    from slm.stages import STAGES

    run_dir = Path(args.run_dir).resolve()
    common = [f"run.root={run_dir.parent}", f"run.name={run_dir.name}", f"corpus.dir={args.corpus}",
              f"tokenizer.vocab_size={args.vocab}", "tokenizer.max_chars=20000000", f"pack.seq_len={args.seq_len}",
              "pack.sets=[valid]"]
    cfg = load_job(None, common)
    started = time.perf_counter()
    text = run_dir / "packed" / "generic-text"
    if args.in_process:
        missing = [p for p in (run_dir / "tokenizer" / "tokenizer.json", text / "manifest.json",
                               run_dir / "packed" / "valid") if not p.exists()]
        if missing:
            raise SystemExit(f"pilot --in-process: {missing[0]} is not made; run the pilot once without it")
    else:
        ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        STAGES.get("tokenizer")(cfg, run_dir)  # skipped when complete and current
        if not (text / "manifest.json").exists():
            pack(corpus_files(args.corpus)["all"], run_dir / "tokenizer" / "tokenizer.json", args.seq_len, text)
        if not (run_dir / "packed" / "valid").exists():
            STAGES.get("pack")(cfg, run_dir)
    data_seconds = time.perf_counter() - started
    generic = json.loads((text / "manifest.json").read_text())

    def train(size: str, steps: int, name: str, seed: int, *extra: str) -> list[str]:
        warmup = args.warmup if args.schedule == "wsd" else max(10, steps // 20)
        return common + [
            f"pretrain.name={name}", f"pretrain.data={text}", f"pretrain.model.depth={int(size[1:])}",
            "pretrain.train.num_workers=0", f"pretrain.train.torch_threads={args.threads}",
            f"pretrain.train.batch_size={args.batch}", f"pretrain.train.budget.steps={steps}",
            f"pretrain.train.seed={seed}", f"pretrain.train.precision={args.precision}",
            f"pretrain.train.optim.lr={args.lr}", f"pretrain.train.optim.warmup_steps={warmup}",
            f"pretrain.train.optim.schedule={args.schedule}",
            *([f"pretrain.train.optim.decay_fraction={args.decay_fraction}", "pretrain.train.optim.min_lr_ratio=0.0"]
              if args.schedule == "wsd" else []),
            f"pretrain.train.log_every={max(10, steps // 20)}", "pretrain.train.checkpoint_every=1000",
            f"pretrain.train.eval_tokens={args.eval_tokens}", *extra]

    protocol = {
        "data": "every generic document of the corpus, packed from the text", "sequences": generic["sequences"],
        "tokens": generic["tokens"], "vocab": args.vocab, "seq_len": args.seq_len, "batch": args.batch,
        "lr": args.lr, "precision": args.precision, "schedule": args.schedule,
        "valid_loss": "mean over the domains' valid splits of log perplexity",
        "eval_tokens_per_domain": args.eval_tokens or "the whole valid split",
        "threads_per_run": args.threads, "runs_at_once": max(1, (os.cpu_count() or 1) // args.threads)}
    if args.schedule == "wsd":
        protocol |= {"runs": "one WSD trunk per seed to the largest budget, a cooldown branch to each smaller one",
                     "warmup_steps": args.warmup, "decay_fraction": args.decay_fraction, "decay_shape": "1-sqrt",
                     "min_lr_ratio": 0.0}
        ladder = "" if (args.batch, max(args.steps)) == (32, max(LADDER)) else f"-b{args.batch}-s{max(args.steps)}"
        jobs = {(size, seed): load_job(None, train(size, max(args.steps), f"pilot-{size}-wsd{ladder}-seed{seed}", seed,
                                                   f"pretrain.snapshot_steps={sorted(args.steps)}"))
                for size in args.sizes for seed in args.seeds}
    else:
        protocol |= {"runs": "one per budget, warm-up then cosine decay over it", "seed": args.seed}
        jobs = {(size, steps): load_job(None, train(size, steps, cosine_name(args, size, steps), args.seed))
                for size in args.sizes for steps in sorted(args.steps)}
    if args.probe:
        print(json.dumps(probe(args, jobs, run_dir), indent=2))
        return

    # Longest first: the last runs to start are the short ones, so the cores stay busy to the end.
    order = sorted(jobs, key=lambda key: -jobs[key].pretrain.train.budget.steps)
    if args.in_process:  # one after another in this process, beside a pilot already running on this machine
        for key in order:
            STAGES.get("pretrain")(jobs[key], run_dir)
            if args.schedule == "wsd" and args.out_dir:
                write_seed(Path(args.out_dir), key, jobs[key], run_dir, protocol, data_seconds)
        return
    task = ray.remote(STAGES.get("pretrain").run).options(num_cpus=args.threads, max_retries=0)
    refs = {task.remote(jobs[key], run_dir): key for key in order}
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        ray.get(done[0])  # raises the run's error here
        key = refs[done[0]]
        if args.schedule == "wsd" and args.out_dir:  # a part's seed, committed as soon as it finishes
            write_seed(Path(args.out_dir), key, jobs[key], run_dir, protocol, data_seconds)
    ray.shutdown()
    if args.schedule == "cosine":
        write_cosine(args, run_dir, protocol, generic, data_seconds)


def cosine_name(args, size: str, steps: int) -> str:
    return (f"pilot-{size}-s{steps}" if args.batch == 8 else f"pilot-{size}-b{args.batch}-s{steps}") \
        + (f"-seed{args.seed}" if args.seed else "")


def valid_loss(summary: dict) -> tuple[float, dict[str, float]]:
    """The pilot's measure: the mean over domains of the log-perplexity (the trainer's per-domain loss)."""
    domains = {d: v["loss"] for d, v in summary["eval"].items() if d != "macro"}
    return sum(domains.values()) / len(domains), domains


def add_changes(curve: list[dict]) -> None:
    """Each budget after the first gets the relative change of the valid loss since the one before it."""
    for before, after in itertools.pairwise(curve):
        after["change_over_doubling"] = round((after["valid_loss"] - before["valid_loss"]) / before["valid_loss"], 5)


def machine() -> dict:
    flags = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if line.startswith("Model name")), "")
    isa = [f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if f in flags]
    return {"cpus": os.cpu_count(), "cpu": model, "isa": isa, "python": platform.python_version()}


def write_seed(out_dir: Path, key: tuple[str, int], job, run_dir: Path, protocol: dict, data_seconds: float) -> None:
    """One seed's ladder: every budget's fully trained model (the trunk's branches and the trunk), its
    tokens, tokens per parameter, cost and valid loss."""
    from slm.artifacts import atomic_write_json, read_manifest
    from slm.layout import TrainOutput

    size, seed = key
    trunk = TrainOutput(run_dir / "checkpoints" / job.pretrain.run_name)
    manifest = read_manifest(trunk.dir)
    index = json.loads(trunk.snapshot_index.read_text())
    curve = []
    for steps in sorted(int(s) for s in index):
        entry = index[str(steps)]
        summary = json.loads((Path(entry["branch"]) / "summary.json").read_text()) if "branch" in entry else \
            json.loads(trunk.summary.read_text())
        loss, per_domain = valid_loss(summary)
        branch = read_manifest(Path(entry["branch"])) if "branch" in entry else manifest
        curve.append({"steps": steps, "tokens": entry["tokens"],
                      "tokens_per_param": round(entry["tokens"] / manifest["params"], 1),
                      "valid_loss": round(loss, 5), "per_domain_loss": {d: round(v, 5) for d, v in per_domain.items()},
                      "flops": entry["cost"]["flops"], "device_seconds": round(entry["cost"]["device_seconds"], 1),
                      "trained_as": "branch" if "branch" in entry else "trunk",
                      "wall_seconds": branch["wall_seconds"]})
    add_changes(curve)
    result = {"machine": machine(), "protocol": protocol, "size": size, "seed": seed, "params": manifest["params"],
              "data_seconds_this_run": round(data_seconds, 1),
              "wall_seconds": round(manifest["wall_seconds"] + sum(c["wall_seconds"] for c in curve
                                                                  if c["trained_as"] == "branch"), 1),
              "curve": curve}
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / (f"seed{seed}.json" if size == "d1" else f"{size}-seed{seed}.json"), result)
    print(json.dumps({"seed": seed, "size": size, "curve": [(c["steps"], c["valid_loss"]) for c in curve]}), flush=True)


def write_cosine(args, run_dir: Path, protocol: dict, generic: dict, data_seconds: float) -> None:
    """The earlier pilots' JSON: one fresh cosine run per budget."""
    from slm.analysis.report import SATURATED

    result: dict = {"machine": machine(), "protocol": {**protocol, "saturated_below": SATURATED},
                    "data_seconds_this_run": round(data_seconds, 1), "generic_pack_seconds": generic["seconds"],
                    "sizes": {}}
    for size in args.sizes:
        curve = []
        for steps in sorted(args.steps):
            summary = json.loads((run_dir / "checkpoints" / cosine_name(args, size, steps) / "summary.json").read_text())
            loss, _ = valid_loss(summary)
            curve.append({"steps": steps, "tokens": steps * args.batch * args.seq_len, "valid_loss": round(loss, 5),
                          "per_domain_ppl": {d: round(v["perplexity"], 2) for d, v in summary["eval"].items()
                                             if d != "macro"},
                          "tokens_per_s": round(summary["tokens"] / summary["cost"]["device_seconds"], 1)})
        add_changes(curve)
        last = curve[-1].get("change_over_doubling")
        result["sizes"][size] = {"curve": curve, "saturated": last is not None and abs(last) < SATURATED}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


def probe(args, jobs: dict, run_dir: Path) -> dict:
    """The pilot's wall time on this machine, before it runs: ``PROBE_STEPS`` real steps of each size on
    the real data (after a warm-up) and one real evaluation, timed in this process with one thread as a run
    has, then the ladder's steps (trunks and branches) and evaluations at those rates, ``runs_at_once`` in
    parallel. Nothing it trains is kept."""
    import shutil
    from dataclasses import replace

    from slm.train.config import BudgetConfig, decay_steps
    from slm.train.trainer import pretrain

    steps = PROBE_WARMUP + PROBE_STEPS
    rates = {}
    for size in args.sizes:
        job = next(j for (s, _), j in jobs.items() if s == size)
        p = job.pretrain
        probe_job = replace(job, pretrain=replace(p, name=f"probe-{size}", snapshot_steps=[], train=replace(
            p.train, budget=BudgetConfig(steps=steps), log_every=1, checkpoint_every=0, loggers=[])))
        folder = run_dir / "checkpoints" / f"probe-{size}"
        shutil.rmtree(folder, ignore_errors=True)
        started = time.perf_counter()
        m = pretrain(probe_job)
        total = time.perf_counter() - started
        walls = [json.loads(line)["wall_time"] for line in (folder / "logs" / "metrics.jsonl").read_text().splitlines()]
        step_s = (walls[-1] - walls[PROBE_WARMUP - 1]) / PROBE_STEPS
        eval_s = (total - (walls[-1] - walls[0])) / 2  # the evaluation before and after, the set-up and saving
        rates[size] = {"step_s": round(step_s, 4), "eval_and_setup_s": round(eval_s, 1), "params": m["params"]}
        shutil.rmtree(folder, ignore_errors=True)
    longest, budgets = max(args.steps), sorted(args.steps)
    runs = []
    for (size, _), job in jobs.items():
        r = rates[size]
        if args.schedule == "wsd":
            branch = sum(decay_steps(args.decay_fraction, b) for b in budgets if b < longest)
            runs.append(r["step_s"] * (longest + branch) + r["eval_and_setup_s"] * (1 + len(budgets)))
        else:
            runs.append(r["step_s"] * job.pretrain.train.budget.steps + r["eval_and_setup_s"] * 2)
    slots = max(1, (os.cpu_count() or 1) // args.threads)
    lanes = [0.0] * slots
    for seconds in sorted(runs, reverse=True):  # longest first, as the pilot starts them
        lanes[lanes.index(min(lanes))] += seconds
    return {"machine": machine(), "probed_steps": PROBE_STEPS, "rates": rates, "runs": len(runs),
            "runs_at_once": slots, "each_run_s": [round(s) for s in runs], "wall_s": round(max(lanes)),
            "note": "one run probed alone: runs in parallel share the memory bandwidth (the study's parts ran "
                    "1.0-1.4x their probe)"}


PROBE_WARMUP, PROBE_STEPS = 10, 60


def combine(folder: Path) -> None:
    """Fit the seeds' ladders (every seed<N>.json of ``folder``) and write ``saturation.json`` beside them."""
    from slm.analysis import curves
    from slm.analysis.report import SATURATED  # the papers' precondition: < 1% over the last doubling
    from slm.artifacts import atomic_write_json

    parts = [json.loads(p.read_text()) for p in sorted(folder.glob("seed*.json"))]
    if not parts:
        raise SystemExit(f"pilot --combine: no seed<N>.json in {folder}")
    points = [curves.Point(c["steps"], c["valid_loss"], part["seed"]) for part in parts for c in part["curve"]]
    fit = curves.fit(points)
    saturation = curves.saturation(fit, threshold=SATURATED)
    params = parts[0]["params"]
    tokens_per_step = parts[0]["protocol"]["batch"] * parts[0]["protocol"]["seq_len"]
    result = {"seeds": [p["seed"] for p in parts], "budgets": sorted({p.x for p in points}),
              "params": params, "tokens_per_step": tokens_per_step, "fit": fit.to_json(),
              "saturation": saturation.to_json(),
              "tokens_per_param": {"largest_budget": round(max(p.x for p in points) * tokens_per_step / params, 1),
                                   "saturation_budget": ({k: round(getattr(saturation.budget, k) * tokens_per_step
                                                                   / params, 1) for k in ("value", "low", "high")}
                                                         if saturation.budget else None)},
              "measured_last_doubling": {str(p["seed"]): p["curve"][-1].get("change_over_doubling") for p in parts}}
    atomic_write_json(folder / "saturation.json", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
