"""How often do the fitted curves' 95% intervals cover what was measured at a budget they did not see?

    python benchmarks/curve_coverage.py --ladder benchmarks/results/pilot_wsd --ladder benchmarks/results/ladder_ci \
        --sweep benchmarks/results/quickstart_wsd --out benchmarks/results/curve_coverage.json

For every curve with at least four budgets: fit it on all but the largest budget (``slm.analysis.curves``, the
rules the report and ``slm advise`` use), read the curve's 95% interval at the largest, and compare it with
the mean measured there over the same seeds. Curves come from

- ``--ladder DIR``: a pilot's parts (``seed<N>.json``, ``benchmarks/pilot.py``): each domain's valid loss
  and their mean, against the steps;
- ``--sweep DIR``: a sweep's results table (``slm.analysis.ladder``): each family's specialized
  log-perplexity, against the pretraining FLOPs.

Held-out points are the same seeds' (the seeds' offsets are in both the fit and the measured mean): the
curve's interval (``Fit.loss``) is the one that claims to cover them. ``tests/analysis/test_curves.py``
measures on a known curve that it does, at 95%; this script measures it on our runs, where the curve's
form may be wrong. It prints and writes JSON: every check, and the coverage per source.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def ladder_curves(folder: Path) -> dict[str, list]:
    from slm.analysis import curves

    parts = [json.loads(p.read_text()) for p in sorted(folder.glob("seed*.json"))]
    if not parts:
        raise SystemExit(f"curve_coverage: no seed<N>.json in {folder}")
    out: dict[str, list] = {"mean over domains": []}
    for part in parts:
        for c in part["curve"]:
            out["mean over domains"].append(curves.Point(c["steps"], c["valid_loss"], part["seed"]))
            for domain, loss in c["per_domain_loss"].items():
                out.setdefault(domain, []).append(curves.Point(c["steps"], loss, part["seed"]))
    return out


def sweep_curves(folder: Path) -> dict[str, list]:
    from slm.analysis import ladder
    from slm.records.table import read_table

    return {f.name: list(f.fit.points) for f in ladder.families(read_table(folder))}


def held_out(name: str, points: list) -> dict | None:
    from slm.analysis import curves

    budgets = sorted({p.x for p in points})
    if len(budgets) < 4:
        return None
    top = budgets[-1]
    fit = curves.fit([p for p in points if p.x < top])
    interval = fit.loss(top)
    measured = statistics.fmean(p.y for p in points if p.x == top)
    return {"curve": name, "fitted_on": budgets[:-1], "held_out": top, "form": fit.form, "why": fit.why,
            "seeds": len(fit.per_seed), "predicted": interval.value, "low": interval.low, "high": interval.high,
            "measured_mean": measured, "error": measured - interval.value,
            "covered": interval.low <= measured <= interval.high}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ladder", action="append", default=[], help="a pilot's parts folder (seed<N>.json)")
    ap.add_argument("--sweep", action="append", default=[], help="a sweep folder (results.parquet)")
    ap.add_argument("--out")
    args = ap.parse_args()
    sources = [(str(f), ladder_curves(Path(f))) for f in args.ladder] + [(str(f), sweep_curves(Path(f)))
                                                                          for f in args.sweep]
    result = {"level": 0.95, "sources": []}
    for where, found in sources:
        checks = [c for name, points in sorted(found.items()) if (c := held_out(name, points)) is not None]
        covered = sum(c["covered"] for c in checks)
        result["sources"].append({"source": where, "checks": checks, "covered": covered, "of": len(checks),
                                  "coverage": covered / len(checks) if checks else None})
        print(f"{where}: {covered} of {len(checks)} held-out budgets inside the curve's 95% interval", flush=True)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
