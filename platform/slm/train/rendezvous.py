"""The process group's rendezvous on the loopback when every training worker is on this machine.

Ray Train 2.60 has rank 0 host torch.distributed's ``TCPStore`` at the node's address, and torch's store
server binds every interface whatever host it is given (measured: ``*:49531``, IPv4 and IPv6, during a
2-worker DDP run on the embedded local Ray, whose other 22 sockets were all on 127.0.0.1). When the
cluster's nodes are all at 127.0.0.1 (the embedded Ray, ``slm.runtime.serve_this_machine_only``), the
store is made here instead, on a socket bound to 127.0.0.1 and handed to it (``master_listen_fd``), and
every rank joins the process group through it. On a real cluster Ray's own rendezvous is used: the
workers must reach rank 0 across machines (docs/cluster.md lists the ports).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import timedelta

import ray
import torch.distributed as dist
from ray.train._internal.worker_group import WorkerGroup as V1WorkerGroup
from ray.train.torch import TorchConfig
from ray.train.torch.config import _set_torch_distributed_env_vars, _TorchBackend

LOOPBACK = "127.0.0.1"
_store: dist.TCPStore | None = None  # rank 0's server store, kept alive for the process group's life


def all_nodes_on_loopback() -> bool:
    """Whether every live node of the Ray this driver is connected to serves on 127.0.0.1."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return bool(nodes) and all(n.get("NodeManagerAddress") == LOOPBACK for n in nodes)


def _serve(world_size: int, timeout_s: float) -> int:
    """On rank 0: the server store on a loopback socket; returns its port."""
    global _store
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((LOOPBACK, 0))
    listener.listen()
    port = listener.getsockname()[1]
    _store = dist.TCPStore(LOOPBACK, port, world_size, True, timedelta(seconds=timeout_s), wait_for_workers=False,
                           master_listen_fd=listener.detach())
    return port


def _join(backend: str, world_rank: int, world_size: int, port: int, timeout_s: float) -> None:
    # (not `rank`: Ray's execute_single_async takes the worker's index under that name)
    store = _store if world_rank == 0 else dist.TCPStore(LOOPBACK, port, world_size, False,
                                                         timedelta(seconds=timeout_s))
    dist.init_process_group(backend=backend, store=store, rank=world_rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))


class _LoopbackBackend(_TorchBackend):
    def on_start(self, worker_group, backend_config: LoopbackTorchConfig) -> None:
        n = len(worker_group)
        if n < 2:  # one worker: no process group to set up, as Ray's own backend
            return super().on_start(worker_group, backend_config)
        port = worker_group.execute_single(0, _serve, world_size=n, timeout_s=backend_config.timeout_s)
        if not isinstance(worker_group, V1WorkerGroup):  # LOCAL_RANK, RANK, …, where Ray's backend sets them
            worker_group.execute(_set_torch_distributed_env_vars)
        ray.get([worker_group.execute_single_async(i, _join, backend=backend_config.backend, world_rank=i,
                                                   world_size=n, port=port, timeout_s=backend_config.timeout_s)
                 for i in range(n)])


@dataclass
class LoopbackTorchConfig(TorchConfig):
    """``TorchConfig`` whose rendezvous listens on 127.0.0.1 only (every worker on this machine)."""

    @property
    def backend_cls(self):
        return _LoopbackBackend


def torch_config(backend: str) -> TorchConfig:
    """Ray Train's torch config for ``backend``: the loopback rendezvous when every node is at 127.0.0.1."""
    return LoopbackTorchConfig(backend=backend) if all_nodes_on_loopback() else TorchConfig(backend=backend)
