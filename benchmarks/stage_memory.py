"""Where a job's memory is, stage by stage (issue 46, 3): runs ``slm run JOB`` and samples every process it
started every ``--interval`` seconds — RSS (what ``stage_resources.json`` sums), PSS (shared pages split
between the processes that map them: their sum is what the machine holds) and USS (a process's own pages)
— and, for each stage, the peaks of the sums and the processes that held the most at the RSS peak.

    .venv/bin/python benchmarks/stage_memory.py jobs/quickstart.yaml [overrides ...] > benchmarks/results/stage_memory.json

Prints JSON: per stage, ``peak_rss_gib`` / ``peak_pss_gib`` / ``peak_uss_gib`` (each its own peak) and
``top`` (pid, what the process is, rss/pss/uss in GiB at that stage's RSS peak).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30


def what(p: psutil.Process) -> str:
    """A process's role: Ray's own daemons by name, workers by the task or actor their title names."""
    try:
        title = " ".join(p.cmdline())[:160] or p.name()
    except psutil.Error:
        return "?"
    for daemon in ("gcs_server", "raylet", "dashboard", "log_monitor", "monitor.py", "runtime_env", "plasma"):
        if daemon in title:
            return daemon
    if title.startswith("ray::"):
        return title.split()[0]
    return "driver" if "slm" in title and "run" in title else title[:60]


def sample(root: psutil.Process) -> list[dict]:
    out = []
    for p in [root, *root.children(recursive=True)]:
        try:
            m = p.memory_full_info()
            out.append({"pid": p.pid, "what": what(p), "rss": m.rss, "pss": m.pss, "uss": m.uss})
        except psutil.Error:
            continue
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args()
    slm = str(Path(sys.executable).with_name("slm"))
    proc = subprocess.Popen([slm, "run", args.job, *args.overrides], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    root = psutil.Process(proc.pid)
    stage = {"name": "start"}
    stages: dict[str, dict] = {}

    def reader() -> None:
        for line in proc.stdout:
            sys.stderr.write(line)
            m = re.match(r"\[run\] stage (\w+) \.\.\.", line)
            if m:
                stage["name"] = m.group(1)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    while proc.poll() is None:
        procs = sample(root)
        name = stage["name"]
        s = stages.setdefault(name, {"peak_rss": 0, "peak_pss": 0, "peak_uss": 0, "top": []})
        rss, pss, uss = (sum(p[k] for p in procs) for k in ("rss", "pss", "uss"))
        if rss > s["peak_rss"]:
            s["top"] = sorted(procs, key=lambda p: -p["rss"])[:8]
        s["peak_rss"], s["peak_pss"], s["peak_uss"] = max(s["peak_rss"], rss), max(s["peak_pss"], pss), max(s["peak_uss"], uss)
        time.sleep(args.interval)
    thread.join()
    result = {"job": args.job, "overrides": args.overrides, "rc": proc.returncode, "stages": {
        name: {"peak_rss_gib": round(s["peak_rss"] / GIB, 2), "peak_pss_gib": round(s["peak_pss"] / GIB, 2),
               "peak_uss_gib": round(s["peak_uss"] / GIB, 2),
               "top": [{"pid": p["pid"], "what": p["what"], **{k: round(p[k] / GIB, 2) for k in ("rss", "pss", "uss")}}
                       for p in s["top"]]}
        for name, s in stages.items()}}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
