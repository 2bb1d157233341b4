"""A study's pretraining on a cluster, side by side against one at a time (issue 66): the makespan ratio.

    python benchmarks/cluster_makespan.py --run-dir runs/quickstart [--nodes 2] [--steps 60] [--seeds 0]

On a simulated cluster (``ray.cluster_utils.Cluster``: a head with no CPUs for the driver, ``--nodes`` nodes of one
CPU), the quickstart's sweep (five methods at d2, ``--steps`` steps, its data from ``--run-dir``) runs twice as a
driver connected to it: with ``sweep.max_concurrent_runs=1`` (one pretraining run at a time, as Ray Train runs went
before issue 66) and with 0 (as many as the nodes hold). The two alternate (one-at-a-time first), each in its own
sweep folder, so that neither reuses the other's runs. The makespan of each is the span of its runs' steps (the
``ran`` spans of their manifests: the first step's start to the last run's end); the ratio is one-at-a-time over
side-by-side. On a machine with fewer cores than simulated nodes the nodes share them: keep ``--nodes`` at most the
cores. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def sweep(run_dir: Path, name: str, address: str, steps: int, seeds: list[int], concurrent: int) -> dict:
    overrides = [f"run.root={run_dir.parent.resolve()}", f"run.name={run_dir.name}", f"sweep.name={name}",
                 f"ray.address={address}", f"sweep.pretrain_steps=[{steps}]", f"sweep.seeds=[{', '.join(map(str, seeds))}]",
                 "sweep.domain_tokens=[10000]", "sweep.specialize_steps=[5]", f"sweep.max_concurrent_runs={concurrent}",
                 "pretrain.train.optim.schedule=cosine", "pretrain.train.checkpoint_every=0"]
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "slm.cli", "sweep", "jobs/sweeps/quickstart.yaml", *overrides], cwd=REPO,
                   check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=sys.stderr)  # stdout: the JSON only
    wall = time.perf_counter() - started
    runs = sorted((run_dir / "sweeps" / name / "checkpoints").glob("*-seed*"))
    spans = {r.name: json.loads((r / "manifest.json").read_text())["ran"] for r in runs}
    makespan = max(s["to"] for s in spans.values()) - min(s["from"] for s in spans.values())
    return {"runs": len(runs), "nodes_used": len({s["node"] for s in spans.values()}),
            "pretraining_makespan_s": round(makespan, 1), "sweep_wall_s": round(wall, 1),
            "run_seconds": {k: round(s["to"] - s["from"], 1) for k, s in spans.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True, help="a run directory the quickstart job made")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(args.nodes):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        modes = {"one_at_a_time": 1, "side_by_side": 0}
        results = {mode: sweep(args.run_dir, f"makespan-{mode.replace('_', '-')}-{stamp}", cluster.address,
                               args.steps, args.seeds, concurrent) for mode, concurrent in modes.items()}
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps({
        "what": "issue 66: the quickstart sweep's pretraining on a simulated cluster, one run at a time against side by "
                "side (sweep.max_concurrent_runs 1 and 0); makespan = the span of the runs' steps",
        "nodes": args.nodes, "cpus_per_node": 1, "host_cores": os.cpu_count(), "steps": args.steps, "seeds": args.seeds,
        **results,
        "ratio_one_at_a_time_over_side_by_side": round(results["one_at_a_time"]["pretraining_makespan_s"]
                                                       / results["side_by_side"]["pretraining_makespan_s"], 2),
    }, indent=2))


if __name__ == "__main__":
    main()
