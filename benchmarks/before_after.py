"""Today's training path against an earlier commit's, on this machine (issue 15: "not slower than before").

    python benchmarks/before_after.py --base 0aca7bd [--run-dir runs/quickstart] [--rounds 2] [--out FILE]

Checks the base commit out into a temporary git worktree and runs the same pretraining job — d2, 2 CPU
workers × 1 thread, 100 steps, batch 8, the job's defaults otherwise — with that commit's code and with
this checkout's, alternating (base, current, base, current, …: a slow spell of a shared machine hits
both), each run in its own process with an embedded local Ray, through ``benchmarks/train.py``'s
``ray_loop``. Prints one JSON object: per run the steady step time (median from step 20), the wall time
of the run (Ray Train's start-up, the steps, the evaluation, the model written) and the final loss; and
the current ÷ base ratios of the means.

    python benchmarks/before_after.py --base 0aca7bd --sweep [--rounds 1]

End to end instead: each checkout's ``slm sweep jobs/sweeps/quickstart.yaml`` as shipped (``--spec
FILE``: the same spec for both, e.g. the base's own), in its own process and embedded local Ray, on the
same data; per run the wall time from launch to exit (Ray's start, any compile warm-up, every trial, the
report), the current ÷ base ratio, the largest relative difference of a trial's perplexity between the
two, and whether their results tables are identical in every column but device-seconds. With ``--base
HEAD`` it is the reproducibility check: the same commit twice.
Needs a run directory with a tokenizer and ``packed/generic`` (the quickstart job makes them; the sweep
reads the rest of that directory too).

    python benchmarks/before_after.py --base 64d6a46 --report benchmarks/results/study [--out FILE]

``slm report`` over committed tables instead (``--plan``: default ``DIR/plan.json``), each checkout's in its own
process (``--current REV``: that commit's instead of this checkout): the wall times, their ratio, and every
output file compared byte for byte (a faster report must write the same one). Then, in this process (this
checkout's code), the table's curve fits (``ladder.families``) timed with the BLAS threads as the library
leaves them and with one thread, as ``curves.fit`` runs them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
OVERRIDES = ["pretrain.model.depth=2", "pretrain.train.num_workers=2", "pretrain.train.torch_threads=1",
             "pretrain.train.batch_size=8", "pretrain.train.budget.steps=100"]

# One run, in a process whose `slm` is the checkout on PYTHONPATH (a base commit's, or this one's); the
# run itself and its steady step are benchmarks/train.py's (ray_loop imports slm only when called).
RUN = """
import json, sys, time
sys.path.insert(0, sys.argv[4])
import slm
from train import LOG_EVERY, SKIP_STEPS, ray_loop, steady
from pathlib import Path
t = time.perf_counter()
times, summary, _ = ray_loop(Path(sys.argv[1]), json.loads(sys.argv[3]), sys.argv[2])
wall = time.perf_counter() - t
print(json.dumps({"slm": slm.__file__, "step_s": round(steady(times, SKIP_STEPS // LOG_EVERY), 4),
                  "wall_s": round(wall, 1), "final_loss": summary["final_loss"]}))
"""


@contextmanager
def worktree(rev: str, path: Path) -> Iterator[Path]:
    """``rev`` checked out at ``path`` (a detached git worktree), removed on the way out."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), rev], check=True,
                   capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], check=False)


def checkout_env(checkout: Path) -> dict:
    """The environment of a process whose `slm` is ``checkout``'s (ahead of the installed one)."""
    return {**os.environ, "PYTHONPATH": str(checkout / "platform"), "HF_HUB_OFFLINE": "1",
            "RAY_USAGE_STATS_ENABLED": "0"}


def one_run(checkout: Path, run_dir: Path, name: str) -> dict:
    env = checkout_env(checkout)
    proc = subprocess.run([sys.executable, "-c", RUN, str(run_dir), name, json.dumps(OVERRIDES),
                           str(REPO / "benchmarks")], env=env,
                          capture_output=True, text=True, check=True)
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    if not row["slm"].startswith(str(checkout)):
        raise RuntimeError(f"run {name} imported slm from {row['slm']}, not from {checkout}")
    return row


def one_sweep(checkout: Path, root: Path, corpus_dir: Path, name: str, spec: str) -> dict:
    env = checkout_env(checkout)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "slm.cli", "sweep", spec,
                           f"run.root={root}", f"corpus.dir={corpus_dir}", f"sweep.name={name}"],
                          cwd=checkout, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"sweep {name} at {checkout} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    rows = pq.read_table(root / "quickstart" / "sweeps" / name / "results.parquet").to_pylist()
    # Every column but the clocks' (device-seconds differ from run to run by nature).
    table = {r["trial"]: {k: v for k, v in r.items() if "device_seconds" not in k} for r in rows}
    return {"wall_s": round(wall, 1), "trials": len(rows),
            "perplexity": {r["trial"]: r["perplexity"] for r in sorted(rows, key=lambda r: r["trial"])},
            "table": table}


def one_report(checkout: Path, tables: Path, plan: Path, out: Path) -> dict:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "slm.cli", "report", "--tables", str(tables), "--plan",
                           str(plan), "--out", str(out)], cwd=checkout, env=checkout_env(checkout),
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"slm report at {checkout} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    files = {str(f.relative_to(out)): hashlib.sha256(f.read_bytes()).hexdigest()
             for f in sorted(out.rglob("*")) if f.is_file()}
    return {"wall_s": round(wall, 1), "files": files}


def fit_threads(table: Path) -> dict:
    """``ladder.families`` over a table: ``curves.fit`` as shipped (one BLAS thread) against the same fit with
    the BLAS threads the library starts with, alternating twice."""
    from threadpoolctl import threadpool_info

    from slm.analysis import curves, ladder
    from slm.records.table import read_table

    trials, shipped = read_table(table), curves.fit
    times: dict[str, list[float]] = {"library_threads": [], "one_thread": []}
    try:
        for _ in range(2):
            for name, fit in (("library_threads", shipped.__wrapped__), ("one_thread", shipped)):
                curves.fit = fit
                started = time.perf_counter()
                ladder.families(trials)
                times[name].append(round(time.perf_counter() - started, 2))
    finally:
        curves.fit = shipped
    return {"blas": [(i["internal_api"], i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"],
            "families_s": times, "library_over_one_thread": round(
                statistics.mean(times["library_threads"]) / statistics.mean(times["one_thread"]), 2)}


def compare_sweeps(runs: dict[str, list[dict]]) -> dict:
    base, current = runs["base"][0]["perplexity"], runs["current"][0]["perplexity"]
    if set(base) != set(current):
        raise RuntimeError(f"the two sweeps ran different trials: {sorted(set(base) ^ set(current))}")
    mean = {k: statistics.mean(r["wall_s"] for r in v) for k, v in runs.items()}
    tables = runs["base"][0].pop("table"), runs["current"][0].pop("table")
    differing = sorted({k for t in tables[0] for k in tables[0][t] if tables[0][t][k] != tables[1][t][k]})
    for r in (*runs["base"][1:], *runs["current"][1:]):
        r.pop("table")
    return {"current_over_base_wall_s": round(mean["current"] / mean["base"], 3),
            "max_rel_perplexity_difference": float(f"{max(abs(current[t] / base[t] - 1) for t in base):.2g}"),
            # the results tables of the first round, every column but device-seconds, compared exactly
            "identical_tables": not differing, "columns_differing": differing}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the earlier commit")
    ap.add_argument("--run-dir", default="runs/quickstart")
    ap.add_argument("--sweep", action="store_true", help="time the quickstart sweep end to end instead")
    ap.add_argument("--spec", default="", help="with --sweep: a sweep spec both checkouts run (default: each "
                    "checkout's own jobs/sweeps/quickstart.yaml, as shipped)")
    ap.add_argument("--report", default="", help="time `slm report --tables DIR` instead")
    ap.add_argument("--plan", default="", help="with --report: the plan (default: DIR/plan.json)")
    ap.add_argument("--current", default="", help="with --report: a commit instead of this checkout")
    ap.add_argument("--rounds", type=int, default=0, help="alternating rounds (default: 2; 1 with --sweep)")
    ap.add_argument("--out", default="")
    ap.add_argument("--keep", action="store_true", help="keep the scratch run directory (the sweeps' outputs)")
    args = ap.parse_args()

    if args.report:
        print(json.dumps(report_speed(args), indent=2))
        return
    rounds = args.rounds or (1 if args.sweep else 2)
    source = Path(args.run_dir).expanduser().resolve()
    scratch = Path(tempfile.mkdtemp(prefix="slm-bench-before-after-"))
    work = scratch / "quickstart" if args.sweep else scratch / source.name  # the sweep job's run.name
    work.mkdir()
    for part in source.iterdir() if args.sweep else (source / p for p in ("tokenizer", "packed")):
        if part.name != "sweeps":  # read-only inputs, linked
            (work / part.name).symlink_to(part)
    corpus_dir = (REPO / "data" / "corpus").resolve()
    runs: dict[str, list[dict]] = {"base": [], "current": []}
    try:
        with worktree(args.base, scratch / "base") as base:
            for i in range(rounds):
                if args.sweep:
                    spec = str(Path(args.spec).resolve()) if args.spec else "jobs/sweeps/quickstart.yaml"
                    runs["base"].append(one_sweep(base, scratch, corpus_dir, f"before-after-base-{i}", spec))
                    runs["current"].append(one_sweep(REPO, scratch, corpus_dir, f"before-after-current-{i}", spec))
                else:
                    runs["base"].append(one_run(base, work, f"before-after-base-{i}"))
                    runs["current"].append(one_run(REPO, work, f"before-after-current-{i}"))
    finally:
        if args.keep:
            print(f"kept {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    commit = _head()
    if args.sweep:
        job = f"slm sweep {args.spec or 'jobs/sweeps/quickstart.yaml'}"
        result = {"base": args.base, "current": commit, "job": job,
                  "runs": runs, **compare_sweeps(runs)}
    else:
        mean = {k: {m: statistics.mean(r[m] for r in v) for m in ("step_s", "wall_s")} for k, v in runs.items()}
        result = {
            "base": args.base, "current": commit, "overrides": OVERRIDES, "runs": runs,
            "current_over_base_step_s": round(mean["current"]["step_s"] / mean["base"]["step_s"], 3),
            "current_over_base_wall_s": round(mean["current"]["wall_s"] / mean["base"]["wall_s"], 3),
            "same_final_loss": len({r["final_loss"] for v in runs.values() for r in v}) == 1,
        }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


def report_speed(args: argparse.Namespace) -> dict:
    tables = Path(args.report).resolve()
    plan = Path(args.plan).resolve() if args.plan else tables / "plan.json"
    scratch = Path(tempfile.mkdtemp(prefix="slm-bench-report-"))
    runs: dict[str, list[dict]] = {"base": [], "current": []}
    try:
        with ExitStack() as stack:
            checkouts = {"base": stack.enter_context(worktree(args.base, scratch / "base")),
                         "current": stack.enter_context(worktree(args.current, scratch / "current"))
                         if args.current else REPO}
            for i in range(args.rounds or 1):
                for name in runs:
                    # one folder name for every run: the page's title is the folder's name
                    out = scratch / f"{name}-{i}" / tables.name
                    runs[name].append(one_report(checkouts[name], tables, plan, out))
        fits = fit_threads(scratch / "current-0" / tables.name)  # the combined table the report wrote
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    files = [r.pop("files") for v in runs.values() for r in v]
    mean = {k: statistics.mean(r["wall_s"] for r in v) for k, v in runs.items()}
    result = {"base": args.base, "current": args.current or _head(), "job": f"slm report --tables {args.report}",
              "runs": runs,
              "current_over_base_wall_s": round(mean["current"] / mean["base"], 3),
              "identical_outputs": all(f == files[0] for f in files), "files": len(files[0]),
              "differing": sorted({n for f in files for n in f if f.get(n) != files[0].get(n)}),
              "fits": fits}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return result


def _head() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


if __name__ == "__main__":
    main()
