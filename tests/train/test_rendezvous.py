"""The training workers' rendezvous on the embedded local Ray listens on the loopback only (issue 32)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ray


def test_a_two_worker_process_group_on_the_embedded_ray_listens_on_the_loopback_only(tmp_path):
    """Before: rank 0's torch.distributed store listened on every interface (`*:49531`, IPv4 and IPv6).
    Two gloo workers set up their process group as `slm` trains, all-reduce, and list every socket their
    process listens on. In a fresh process: this one may hold the tests' own local Ray."""
    code = f"""
import json, os, psutil, torch, torch.distributed as dist
from ray.train import ScalingConfig, RunConfig
from ray.train.torch import TorchTrainer
from slm.runtime import RayConfig, init_ray
from slm.train.rendezvous import LoopbackTorchConfig, torch_config

def work():
    x = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(x)
    listening = [(c.laddr.ip, c.laddr.port) for c in psutil.Process().net_connections(kind="inet")
                 if c.status == "LISTEN"]
    with open(os.path.join({str(tmp_path)!r}, f"rank{{dist.get_rank()}}.json"), "w") as f:
        json.dump({{"sum": x.item(), "world": dist.get_world_size(), "listening": listening}}, f)

init_ray(RayConfig(num_cpus=2, include_dashboard=False))
config = torch_config("gloo")
assert isinstance(config, LoopbackTorchConfig), config
TorchTrainer(work, torch_config=config, scaling_config=ScalingConfig(num_workers=2),
             run_config=RunConfig(name="loopback", storage_path={str(tmp_path / "ray")!r})).fit()
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(r["sum"], r["world"]) for r in ranks] == [(3.0, 2), (3.0, 2)]  # one process group of two
    assert ranks[0]["listening"], ranks  # rank 0 serves the store
    sockets = [s for r in ranks for s in r["listening"]]
    assert all(ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for ip, _ in sockets), sockets
