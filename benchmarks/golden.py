"""A golden run, before and after a change that must not change behaviour (issue 17's refactor).

    python benchmarks/golden.py --base 793db38 [--run-dir runs/quickstart] [--out FILE]

For each pretraining method: pretrain a small model for a few steps, then specialize it for the
run's domain (``jobs/quickstart.yaml`` with the settings below), with fixed seeds, in this process's CPU (``num_workers: 0``, one thread, float32, eager:
bitwise reproducible on one machine), once with the base commit's code (a temporary git worktree on
PYTHONPATH) and once with this checkout's, on the same packed data (the quickstart job's run directory).
Prints one JSON object: per method and checkout the training losses, gradient norms, evaluations and
a sha256 of each model file's metadata and tensors, and whether the two checkouts agree to the bit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "platform"))
from slm import methods as registry  # noqa: E402

METHODS = registry.names()  # every registered method (its data packed by the quickstart job)
SETTINGS = ["pretrain.model.depth=1", "pretrain.train.num_workers=0", "pretrain.train.torch_threads=1",
            "pretrain.train.precision=fp32", "pretrain.train.compile=never", "pretrain.train.batch_size=8",
            "pretrain.train.budget={steps: 20}", "pretrain.train.log_every=1", "pretrain.train.eval_every=10",
            "pretrain.train.eval_tokens=8192", "pretrain.train.checkpoint_every=0", "pretrain.snapshot_steps=[10, 20]",
            "specialize.train.num_workers=0", "specialize.train.torch_threads=1", "specialize.train.precision=fp32",
            "specialize.train.compile=never", "specialize.train.batch_size=8", "specialize.train.budget={steps: 10}",
            "specialize.train.log_every=1", "specialize.train.eval_tokens=8192", "specialize.train.checkpoint_every=0",
            "specialize.domain_tokens=20000"]

# One checkout's runs, in a process whose `slm` is that checkout's (PYTHONPATH, ahead of the installed one).
RUN = """
import hashlib, inspect, json, sys
from pathlib import Path
import torch
import slm
try:
    from slm.job import load_job
except ImportError:  # a base commit from before issue 17, whose loader held the job root
    from slm.config import load_job
from slm.train.trainer import pretrain, specialize

def sha(path):
    # Over the metadata and the tensors, not the file's bytes: safetensors writes its header's keys in
    # an order that changes from one process to the next.
    from safetensors import safe_open
    h = hashlib.sha256()
    with safe_open(str(path), framework="pt") as f:
        h.update(json.dumps(f.metadata(), sort_keys=True).encode())
        for name in sorted(f.keys()):
            h.update(name.encode())
            h.update(f.get_tensor(name).contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()

def logged(folder):
    rows = [json.loads(line) for line in (Path(folder) / "logs" / "metrics.jsonl").read_text().splitlines()]
    return [{k: r[k] for k in ("step", "loss", "grad_norm") if k in r} for r in rows if "loss" in r]

run_dir, label, methods, settings = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
job = sys.argv[5]
out = {"slm": slm.__file__}
for method in methods:
    name = f"golden-{method}"  # the same in both checkouts: a model file's header carries it
    cfg = load_job(job, [f"run.root={Path(run_dir).parent}", f"run.name={Path(run_dir).name}",
                          f"pretrain.method={method}", f"pretrain.name={name}", f"pretrain.output=golden-{label}",
                          f"specialize.output=golden-{label}-specialized", f"specialize.source={name}", *settings])
    # a commit from before issue 30 also took the run directory
    pre, spec = (pretrain(cfg), specialize(cfg)) if len(inspect.signature(pretrain).parameters) == 1 else (
        pretrain(cfg, cfg.run.dir), specialize(cfg, cfg.run.dir))
    folder = Path(pre["model"]).parent
    out[method] = {"pretrain": {"log": logged(folder), "eval": pre["eval"], "model": sha(pre["model"]),
                                "snapshots": {s: sha(folder / "snapshots" / f"step-{s:08d}.safetensors")
                                              for s in (10, 20)}},
                   "specialize": {"log": logged(Path(spec["model"]).parent), "eval": spec["eval"],
                                  "eval_before": spec["eval_before"], "model": sha(spec["model"])}}
print(json.dumps(out))
"""


def run_checkout(checkout: Path, run_dir: Path, label: str, methods: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout / "platform"), "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.run([sys.executable, "-c", RUN, str(run_dir.resolve()), label, json.dumps(methods),
                           json.dumps(SETTINGS), str(REPO / "jobs" / "quickstart.yaml")], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{label} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    if not row.pop("slm").startswith(str(checkout)):
        raise RuntimeError(f"the {label} run did not import slm from {checkout}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the commit before the change")
    ap.add_argument("--run-dir", default="runs/quickstart", help="a run directory the quickstart job made")
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    run_dir = Path(args.run_dir)
    with tempfile.TemporaryDirectory(prefix="slm-golden-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), args.base],
                       check=True, capture_output=True)
        try:
            runs = {"base": run_checkout(base, run_dir, "base", args.methods),
                    "current": run_checkout(REPO, run_dir, "current", args.methods)}
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], capture_output=True)
    current = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
    result = {"base": args.base, "current": current, "settings": SETTINGS, "methods": {}}
    for method in args.methods:
        a, b = runs["base"][method], runs["current"][method]
        result["methods"][method] = {"identical": a == b, "base": a, "current": b}
    result["all_identical"] = all(m["identical"] for m in result["methods"].values())
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
