"""How long each part of the study takes on this machine (issue 29), before it runs: one probe of every
model a seed trains (``slm.tune.estimate``: the real loop on random tokens, two processes at once as the
sweep runs them, and Tune's overhead per trial), then each part of jobs/study/parts.yaml replayed on it.

    .venv/bin/python benchmarks/study_parts_estimate.py > benchmarks/results/study/parts_estimate_<cpu>.json

~10 minutes on 2 cores. The data stages are not included (minutes: docs/results.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))

from slm.job import load_job  # noqa: E402
from slm.runtime import cpu_flags, cpu_model, init_ray  # noqa: E402
from slm.tune.estimate import estimate, probe, tune_overhead  # noqa: E402
from slm.tune.sweep import plan_sweep  # noqa: E402


def main() -> None:
    spec = ROOT / "jobs" / "sweeps" / "study.yaml"
    parts = yaml.safe_load((ROOT / "jobs" / "study" / "parts.yaml").read_text())["parts"]
    cfg = load_job(spec, ["sweep.seeds=[0]", "ray.include_dashboard=false"])
    whole = plan_sweep(cfg, check_data=False)
    slots = max(1, int((os.cpu_count() or 1) // max(cfg.pretrain.train.cpus_per_worker, 1)))
    rates = probe(cfg, whole, slots)
    with contextlib.redirect_stdout(sys.stderr):  # stdout is the JSON
        init_ray(cfg.ray)
        tune = tune_overhead(slots, cfg.specialize.train.cpus_per_worker)
    out = {"machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                       "flags": sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_bf16"})},
           "rates": {k: vars(v) for k, v in rates.items()}, "tune": tune, "parts": {}}
    for name, runs in parts.items():
        piece = load_job(spec, ["sweep.seeds=[0]", f"sweep.part=[{', '.join(runs)}]"])
        e = estimate(piece, plan_sweep(piece, check_data=False), rates, tune, slots)
        out["parts"][name] = {"runs": runs, "pretrain_min": round(e["pretrain_s"] / 60, 1),
                              "trials_min": round(e["trials_s"] / 60, 1), "total_min": round(e["total_s"] / 60, 1)}
        print(f"[estimate] part {name}: {out['parts'][name]}", file=sys.stderr, flush=True)
    whole_e = estimate(cfg, whole, rates, tune, slots)
    out["seed_total_min"] = round(whole_e["total_s"] / 60, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
