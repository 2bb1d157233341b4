"""One part of a study (issues 29, 45): its data stages and one seed's sweep, from a clean checkout, then its
small tables committed under ``benchmarks/results/<spec>/seed<S>/`` (a part of it, ``--part P`` from
jobs/<spec>/parts.yaml: ``seed<S>-<P>/``). The first edition's spec is jobs/sweeps/study.yaml (the default),
the second's jobs/sweeps/study2.yaml.

    python benchmarks/study_part.py [--spec jobs/sweeps/study2.yaml] --seed 0 [--part a] [--max-minutes 100] [key=value ...]

``--max-minutes``: first time the part's models on this machine (``slm sweep --dry-run --probe``, a minute or
two) and refuse to start a part whose estimate exceeds it, saying so (a slower machine than the design's).

Runs ``slm run SPEC sweep.seeds=[S] sweep.name=<spec>-seed<S>`` (the pinned clusters make
the data stages the same on every machine; finished stages, runs and trials are kept, so a rerun
resumes), then copies the part's ``results.parquet``/``.csv``, ``curves.parquet``, ``plan.json`` and the
report's ``summary.md`` and ``claims.md`` beside ``part.json``: the wall time of each stage and of the
whole part, the FLOPs the plan trained, the machine (CPU model, flags that decide the precision, cores)
and the commit. ``slm report --tables benchmarks/results/study`` combines the parts. Prints part.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slm.artifacts import atomic_write_json
from slm.records.parts import cuts, part_label, spec_name
from slm.records.table import SWEEP_TABLES
from slm.runtime import cpu_flags, cpu_model

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "jobs" / "sweeps" / "study.yaml"
DATA_STAGES_MIN = 10  # resample + pack from the pinned clusters: 7 min on a 2-core EPYC (study/seed0-a/part.json)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=SPEC, help="the study's sweep spec (default: the first edition's)")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--max-minutes", type=float, default=0,
                        help="refuse to start when the probe's estimate of the part on this machine exceeds it")
    parser.add_argument("--part", help="one part of the seed's share (jobs/study/parts.yaml): its runs and their "
                                       "trials; without it, the whole seed")
    parser.add_argument("--out", help="default: benchmarks/results/<spec's name>")
    parser.add_argument("overrides", nargs="*", help="extra config overrides (e.g. run.root=/scratch/runs)")
    args = parser.parse_args()
    spec = args.spec.resolve()
    study = spec_name(spec)  # study, study2
    args.out = args.out or str(ROOT / "benchmarks" / "results" / study)
    label = part_label(args.seed, args.part)
    name = f"{study}-{label}"
    overrides = [f"sweep.seeds=[{args.seed}]", f"sweep.name={name}", *args.overrides]
    if args.part:
        parts = cuts(ROOT, spec)
        if args.part not in parts:
            raise SystemExit(f"--part {args.part}: not in jobs/{study}/parts.yaml (its parts: {sorted(parts)})")
        overrides.insert(1, f"sweep.part=[{', '.join(parts[args.part])}]")
    slm = str(Path(sys.executable).with_name("slm"))
    config = subprocess.run([slm, "config", str(spec), *overrides], check=True, capture_output=True, text=True,
                            cwd=ROOT).stdout
    run_dir = ROOT / _value(config, "root", "run") / _value(config, "name", "run")
    sweep_name = _value(config, "name", "sweep")  # <study>-seed<S>[-<P>] unless an override names it
    if args.max_minutes:
        minutes = probe_minutes(slm, spec, overrides)
        if minutes > args.max_minutes:
            raise SystemExit(f"{name}: estimated {minutes:.0f} min on this machine ({cpu_model()}), over "
                             f"--max-minutes {args.max_minutes:g}: not started (run it on a faster machine)")
        print(f"[part] {name}: estimated {minutes:.0f} min on this machine, within {args.max_minutes:g}", flush=True)
    started = time.time()
    rc = subprocess.run([slm, "run", str(spec), *overrides], cwd=ROOT, env=os.environ).returncode
    wall = time.time() - started
    sweep = run_dir / "sweeps" / sweep_name
    if rc and not (sweep / "results.parquet").exists():
        raise SystemExit(f"slm run exited {rc} before the sweep wrote its table: nothing to commit (rerun: it resumes)")
    out = Path(args.out) / label
    out.mkdir(parents=True, exist_ok=True)
    for table in SWEEP_TABLES:
        shutil.copy2(sweep / table, out / table)
    # The part's own report is a convenience (the combined one is the study's): if it failed, the tables
    # the sweep wrote are still the part's result, and part.json says the report did not run.
    # A sweep with axes (sweep.axes) reports each combination of values under report/at/: its axes.md is the part's.
    texts = ("axes.md",) if (sweep / "report" / "axes.md").exists() else ("summary.md", "claims.md")
    report_written = not rc and all((sweep / "report" / text).exists() for text in texts)
    if report_written:
        for text in texts:
            shutil.copy2(sweep / "report" / text, out / text)
    plan = json.loads((sweep / "plan.json").read_text())
    flags = sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    part = {"part": name, "seed": args.seed, "runs": [r["name"] for r in plan["runs"]], "trials": len(plan["trials"]),
            "overrides": overrides, "wall_s": round(wall, 1),
            "report": "written" if report_written else f"failed: slm run exited {rc} after the sweep",
            "stages_s": {k: v["seconds"] for k, v in json.loads((run_dir / "stage_resources.json").read_text()).items()},
            "flops": plan["estimate"]["total_flops"], "data_fingerprint": plan["data"]["fingerprint"],
            "machine": {"cpu": cpu_model(), "flags": flags, "cores": os.cpu_count()},
            "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip(),
            "finished_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    atomic_write_json(out / "part.json", part)
    print(json.dumps(part, indent=2))


def probe_minutes(slm: str, spec: Path, overrides: list[str]) -> float:
    """The part's estimated wall time on this machine (`slm sweep --dry-run --probe`), data stages included at
    the first edition's measured 10 minutes."""
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "plan.json"
        subprocess.run([slm, "sweep", str(spec), "--dry-run", "--probe", "--plan-out", str(plan), *overrides],
                       check=True, capture_output=True, text=True, cwd=ROOT)
        return json.loads(plan.read_text())["wall_estimate"]["total_s"] / 60 + DATA_STAGES_MIN


def _value(config_yaml: str, key: str, section: str) -> str:
    """A top-level section's key from `slm config`'s YAML (the resolved run folder)."""
    import yaml

    return str(yaml.safe_load(config_yaml)[section][key])


if __name__ == "__main__":
    main()
