"""How close `slm sweep --dry-run --probe` comes to a sweep that ran (issue 29: within ±25%).

    python benchmarks/estimate_check.py SPEC RUN_DIR [--out benchmarks/results/estimate_check.json] [key=value ...]

Probes this machine, estimates SPEC's sweep, and sets it beside what the finished sweep under RUN_DIR took
(read from its own records): the sweep stage's seconds (``stage_resources.json``), its trials' span (the
first trial's start in ``trials.log`` to the last trial's ``result.json``), and pretraining as the rest
(planning and the arrays included). Run it on the machine kind the sweep ran on, with nothing else running.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from slm.artifacts import atomic_write_json
from slm.job import load_job
from slm.runtime import cpu_flags, cpu_model
from slm.tune.estimate import probe_and_estimate
from slm.tune.sweep import plan_sweep


def actual(run_dir: Path, sweep: str) -> dict:
    folder = run_dir / "sweeps" / sweep
    total = json.loads((run_dir / "stage_resources.json").read_text())["sweep"]["seconds"]
    starts = [json.loads(line)["started"] for line in (folder / "trials.log").read_text().splitlines()]
    ends = [p.stat().st_mtime for p in (folder / "tune").glob("*/*/result.json")]
    trials = max(ends) - min(starts)
    return {"total_s": total, "trials_s": trials, "pretrain_s": total - trials}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("run_dir")
    parser.add_argument("--out", default="benchmarks/results/estimate_check.json")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    cfg = load_job(args.spec, args.overrides)
    estimate = probe_and_estimate(cfg, plan_sweep(cfg, check_data=False))
    ran = actual(Path(args.run_dir), cfg.sweep.name)
    result = {"spec": args.spec, "run_dir": args.run_dir,
              "machine": {"cpu": cpu_model(), "flags": sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_bf16"})},
              "estimate": {k: round(estimate[k], 1) for k in ("pretrain_s", "trials_s", "total_s", "mean_trial_s")},
              "actual": {k: round(v, 1) for k, v in ran.items()},
              "estimate_over_actual": {k: round(estimate[k] / ran[k], 3) for k in ran},
              "rates": estimate["rates"], "tune": estimate["tune"], "probe_s": round(estimate["probe_s"], 1)}
    atomic_write_json(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
