"""Do the second edition's rows reproduce under pinned numerics? The like-with-like rule of issue 63, applied.

    python benchmarks/like_with_like.py [--out benchmarks/results/study2_pinned/like_with_like.json]

The protocol (docs/results.md, "Like with like", committed in 5967366 before the part ran): seed 0's part c of
the second edition rerun unchanged but with ``numerics=pinned`` (``benchmarks/results/study2_pinned/seed0-c/``) is
held against the committed native part (``benchmarks/results/study2/seed0-c/``). The rows **reproduce** when every
trial's |pinned − native| perplexity is below its setting's seed standard deviation in the second edition (its
five seeds, ``benchmarks/results/study2_report/results.csv``). The trunks' valid-loss curves are set side by side.

C5's pinned d2 baselines are the same check for the large model, read once C5's parts are in: each seed's final
valid loss (the baseline run's last evaluation, ``benchmarks/results/c5/seed<S>/curves.parquet``) against the
committed native one (``benchmarks/results/study2/seed<S>-a/curves.parquet``, ``generic-d2-seed<S>``), within the
standard deviation of the five native values. Seeds whose C5 part is not committed yet are listed as missing.

Writes a JSON of every number (and prints it); the verdict is ``reproduces`` true/false per check.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import pandas as pd

from slm.artifacts import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks/results"


def part_c(native_dir: Path, pinned_dir: Path, report_csv: Path) -> dict:
    """Every trial of the part, pinned against native, beside its setting's seed SD; the trunks' curves."""
    native = pd.read_parquet(native_dir / "results.parquet").set_index("trial")
    pinned = pd.read_parquet(pinned_dir / "results.parquet").set_index("trial")
    if set(native.index) != set(pinned.index):
        raise SystemExit(f"{pinned_dir}: its trials are not the native part's: "
                         f"missing {sorted(set(native.index) - set(pinned.index))}, "
                         f"extra {sorted(set(pinned.index) - set(native.index))}")
    five = pd.read_csv(report_csv)
    seed_sd = five.groupby("setting")["perplexity"].agg(lambda v: statistics.stdev(v) if len(v) > 1 else float("nan"))
    trials = []
    for trial in sorted(native.index):
        n, p = float(native.at[trial, "perplexity"]), float(pinned.at[trial, "perplexity"])
        setting = native.at[trial, "setting"]
        sd = float(seed_sd[setting])
        trials.append({"trial": trial, "setting": setting, "native": n, "pinned": p, "difference": p - n,
                       "seed_sd": sd, "within": abs(p - n) < sd})
    curves = []
    native_c, pinned_c = pd.read_parquet(native_dir / "curves.parquet"), pd.read_parquet(pinned_dir / "curves.parquet")
    trunks = sorted(r for r in native_c["run"].unique() if "@" not in r)
    for run in trunks:
        a = native_c[native_c.run == run].set_index("step")["loss"]
        b = pinned_c[pinned_c.run == run].set_index("step")["loss"]
        for step in sorted(set(a.index) & set(b.index)):
            curves.append({"run": run, "step": int(step), "native": float(a[step]), "pinned": float(b[step]),
                           "difference": float(b[step] - a[step])})
    worst = max(trials, key=lambda t: abs(t["difference"]) / t["seed_sd"])
    return {"native": str(native_dir.relative_to(ROOT)), "pinned": str(pinned_dir.relative_to(ROOT)),
            "trials": trials, "within": sum(t["within"] for t in trials), "of": len(trials),
            "reproduces": all(t["within"] for t in trials),
            "largest_share_of_seed_sd": {"trial": worst["trial"], "share": abs(worst["difference"]) / worst["seed_sd"]},
            "trunk_curves": curves}


def c5_baselines() -> dict:
    """Each committed C5 seed's pinned d2 baseline against the second edition's native d2, by final valid loss."""
    native = {}
    for seed in range(5):
        c = pd.read_parquet(RESULTS / f"study2/seed{seed}-a/curves.parquet")
        run = c[c.run == f"generic-d2-seed{seed}"].sort_values("step")
        native[seed] = float(run["loss"].iloc[-1])
    sd = statistics.stdev(native.values())
    seeds, missing = [], []
    for seed in range(5):
        path = RESULTS / f"c5/seed{seed}/curves.parquet"
        if not path.exists():
            missing.append(seed)
            continue
        c = pd.read_parquet(path)
        run = c[c.run == f"generic-d2-seed{seed}"].sort_values("step")
        if run.empty:
            raise SystemExit(f"{path}: no run generic-d2-seed{seed} (the C5 baseline)")
        pinned = float(run["loss"].iloc[-1])
        seeds.append({"seed": seed, "native": native[seed], "pinned": pinned, "difference": pinned - native[seed],
                      "within": abs(pinned - native[seed]) < sd})
    return {"native_seed_sd": sd, "seeds": seeds, "missing": missing,
            "reproduces": all(s["within"] for s in seeds) if seeds and not missing else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "study2_pinned/like_with_like.json")
    args = parser.parse_args()
    result = {"rule": "docs/results.md, 'Like with like' (committed in 5967366, before the part ran)",
              "part_c": part_c(RESULTS / "study2/seed0-c", RESULTS / "study2_pinned/seed0-c",
                               RESULTS / "study2_report/results.csv"),
              "c5_baselines": c5_baselines()}
    atomic_write_json(args.out, result)
    print(json.dumps({k: v for k, v in result["part_c"].items() if k not in ("trials", "trunk_curves")}, indent=1))
    print(json.dumps(result["c5_baselines"], indent=1))


if __name__ == "__main__":
    main()
