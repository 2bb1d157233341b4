"""Today's training path against an earlier commit's, on this machine (issue 15: "not slower than before").

    python benchmarks/before_after.py --base 0aca7bd [--run-dir runs/quickstart] [--rounds 2] [--out FILE]

Checks the base commit out into a temporary git worktree and runs the same pretraining job — d2, 2 CPU
workers × 1 thread, 100 steps, batch 8, the job's defaults otherwise — with that commit's code and with
this checkout's, alternating (base, current, base, current, …: a slow spell of a shared machine hits
both), each run in its own process with an embedded local Ray, through ``benchmarks/train.py``'s
``ray_loop``. Prints one JSON object: per run the steady step time (median from step 20), the wall time
of the run (Ray Train's start-up, the steps, the evaluation, the model written) and the final loss; and
the current ÷ base ratios of the means.
Needs a run directory with a tokenizer and ``packed/generic`` (the quickstart job makes them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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


def one_run(checkout: Path, run_dir: Path, name: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout / "platform"), "HF_HUB_OFFLINE": "1",
           "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.run([sys.executable, "-c", RUN, str(run_dir), name, json.dumps(OVERRIDES),
                           str(REPO / "benchmarks")], env=env,
                          capture_output=True, text=True, check=True)
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    if not row["slm"].startswith(str(checkout)):
        raise RuntimeError(f"run {name} imported slm from {row['slm']}, not from {checkout}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the earlier commit")
    ap.add_argument("--run-dir", default="runs/quickstart")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    source = Path(args.run_dir).expanduser().resolve()
    scratch = Path(tempfile.mkdtemp(prefix="slm-bench-before-after-"))
    work = scratch / source.name
    work.mkdir()
    for part in ("tokenizer", "packed"):  # read-only inputs, linked
        (work / part).symlink_to(source / part)
    base = scratch / "base"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), args.base], check=True,
                   capture_output=True)
    runs: dict[str, list[dict]] = {"base": [], "current": []}
    try:
        for i in range(args.rounds):
            runs["base"].append(one_run(base, work, f"before-after-base-{i}"))
            runs["current"].append(one_run(REPO, work, f"before-after-current-{i}"))
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], check=False)
        shutil.rmtree(scratch, ignore_errors=True)
    mean = {k: {m: statistics.mean(r[m] for r in v) for m in ("step_s", "wall_s")} for k, v in runs.items()}
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
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


if __name__ == "__main__":
    main()
