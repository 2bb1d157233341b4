"""Is the second edition's large-model split the machine's or the seed's? (issue 63, item 1)

Trains one seed's large model (``generic-d2-seed<S>``, 3,400 steps) exactly as the second edition's sweep
did — the same spec (jobs/sweeps/study2.yaml), the same run config (``slm.tune.sweep.run_config`` on the
planned run), the same data, made here by the study's data stages — on the machine at hand, and compares its
valid-loss curve step by step with the committed curve of the same seed
(``benchmarks/results/study2/seed<S>-a/curves.parquet``): bit for bit equal, or from which evaluation on it
differs, and where it ends. Several seeds train at once, one process each (one thread, as the parts did).

    slm run jobs/sweeps/study2.yaml 'stages=[corpus,cluster,histogram,resample,tokenizer,pack]'   # the data, once
    python benchmarks/d2_split.py --seeds 0 1 [--numerics pinned] [--steps 340] [--out FILE.json]

``--numerics``: ``native`` (the second edition's: each library on this CPU's widest kernels) or ``pinned``
(slm.train.numerics: the training processes start with every kernel library pinned to one instruction set).
``--steps N``: stop each run at its first evaluation at or past step N (its curve up to there is the full run's:
the schedule's horizon is unchanged), e.g. a 340-step check that a seed reproduces. Prints the comparison as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from slm.artifacts import atomic_write_json
from slm.layout import TrainOutput
from slm.runtime import cpu_flags, cpu_model

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "jobs" / "sweeps" / "study2.yaml"
COMMITTED = ROOT / "benchmarks" / "results" / "study2"


def large_run_config(seed: int, output: Path):
    """The planned large-model run of ``seed`` as the sweep would train it, into ``output``."""
    from slm.job import load_job
    from slm.tune.sweep import plan_sweep, run_config

    cfg = load_job(SPEC, [f"sweep.seeds=[{seed}]"])
    run = next(r for r in plan_sweep(cfg).runs if r.role == "large")
    cfg = replace(cfg, run=replace(cfg.run, root=str((ROOT / cfg.run.root).resolve())),
                  corpus=replace(cfg.corpus, dir=str((ROOT / cfg.corpus.dir).resolve())),
                  pretrain=replace(cfg.pretrain, output=str(output)))
    return run_config(cfg, run), run


def train_one(seed: int, output: Path) -> None:
    from slm.train.trainer import pretrain

    pretrain(large_run_config(seed, output)[0])


def curve(metrics: Path) -> dict[int, float]:
    """The run's valid loss at each evaluation (the last of a step logged twice)."""
    seen = {}
    for line in metrics.read_text().splitlines() if metrics.exists() else []:
        m = json.loads(line)
        if "eval.macro.loss" in m:
            seen[m["step"]] = m["eval.macro.loss"]
    return dict(sorted(seen.items()))


def compare(seed: int, here: dict[int, float]) -> dict:
    committed = pd.read_parquet(COMMITTED / f"seed{seed}-a" / "curves.parquet")
    machine = json.loads((COMMITTED / f"seed{seed}-a" / "part.json").read_text())["machine"]
    theirs = {int(s): float(v) for s, v in committed[committed["run"] == f"generic-d2-seed{seed}"][["step", "loss"]]
              .itertuples(index=False)}
    steps = [s for s in here if s in theirs]
    first_diff = next((s for s in steps if here[s] != theirs[s]), None)
    return {"seed": seed, "committed_machine": machine["cpu"], "committed_flags": machine["flags"],
            "steps_compared": len(steps), "bit_identical": first_diff is None,
            "first_differing_step": first_diff,
            "max_abs_diff": max((abs(here[s] - theirs[s]) for s in steps), default=None),
            "here": {str(s): here[s] for s in steps}, "committed": {str(s): theirs[s] for s in steps},
            "final_here": here[steps[-1]] if steps else None, "final_committed": theirs[steps[-1]] if steps else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--steps", type=int, default=0, help="stop each run after this many steps (0: all)")
    parser.add_argument("--numerics", choices=["native", "pinned"], default="native")
    parser.add_argument("--scratch", type=Path, default=ROOT / "runs" / "d2_split")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: train this seed here
    args = parser.parse_args()
    folder = args.scratch / args.numerics
    if args.one is not None:
        train_one(args.one, folder / f"seed{args.one}")
        return
    from slm.train.numerics import pinned_environment

    env = {**os.environ, **(pinned_environment() if args.numerics == "pinned" else {})}
    outputs = {seed: TrainOutput(folder / f"seed{seed}" / large_run_config(seed, folder / f"seed{seed}")[1].name)
               for seed in args.seeds}
    metrics = {seed: output.metrics for seed, output in outputs.items()}
    for output in outputs.values():  # a fresh run each time: a kept checkpoint would resume, not retrain
        if output.dir.exists():
            shutil.rmtree(output.dir)
    started = time.time()
    children = {seed: subprocess.Popen([sys.executable, __file__, "--seeds", str(seed), "--one", str(seed), "--numerics", args.numerics,
                                        "--scratch", str(args.scratch)], env=env)
                for seed in args.seeds}
    failed = []
    while children:
        time.sleep(5)
        for seed, child in list(children.items()):
            if args.steps and max(curve(metrics[seed]), default=0) >= args.steps:  # seen enough: stop it
                child.terminate()
                child.wait()
                del children[seed]
            elif child.poll() is not None:
                if child.returncode:
                    failed.append(seed)
                del children[seed]
    if failed:
        raise SystemExit(f"d2_split: the runs of seeds {failed} failed (their logs above)")
    result = {"machine": {"cpu": cpu_model(), "flags": sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16",
                                                                            "amx_bf16"})},
              "numerics": args.numerics, "steps": args.steps or "all", "wall_s": round(time.time() - started, 1),
              "seeds": []}
    for seed in args.seeds:
        result["seeds"].append(compare(seed, curve(metrics[seed])))
    if args.out:
        atomic_write_json(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
