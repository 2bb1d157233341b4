"""Lose a node (issue 19). A simulated cluster (`ray.cluster_utils.Cluster`, each node with its own CPUs)
loses a node mid-embed and mid-pretrain — the node running an embedding actor, a training worker. The
embedding ends with every window exactly once: the windows a one-node run makes; the pretraining resumes
from its last checkpoint on the nodes left and ends with the model the same run makes uninterrupted."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
from safetensors.torch import load_file

from slm.data.embed import WORK, embed_corpus, embedding_files
from slm.job import load_job
from slm.train.trainer import pretrain
from tests.conftest import embed_config_for_tests, logged_rows, train_overrides

pytestmark = [pytest.mark.ray, pytest.mark.slow]

OBJECT_STORE = 512 * 2**20


@pytest.fixture
def cluster(ray_local, request):
    """The session's local Ray set aside for a cluster of ``request.param`` = (nodes, CPUs a node), and
    brought back after."""
    import ray
    from ray.cluster_utils import Cluster

    nodes, cpus = request.param
    node = {"num_cpus": cpus, "object_store_memory": OBJECT_STORE}
    ray.shutdown()
    made = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    for _ in range(nodes - 1):
        made.add_node(**node)
    ray.init(address=made.address, log_to_driver=False)
    made.wait_for_nodes()
    try:
        yield made
    finally:
        ray.shutdown()
        made.shutdown()
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)


class NodeLoss:
    """Once ``ready()`` holds, removes a (non-head) node that runs a Ray worker whose command line has
    ``running`` in it — its raylet and every worker on it, at once; ``lost`` lists those workers.
    (A node cannot be added from here: `Cluster.add_node` installs signal handlers, main thread only.)"""

    def __init__(self, cluster, ready, running: str, timeout_s: float = 600):
        self.cluster, self.ready, self.running, self.timeout_s = cluster, ready, running, timeout_s
        self.lost: list[str] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> NodeLoss:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.thread.join(timeout=60)
        if self.error is not None:
            raise self.error

    def _watch(self) -> None:
        try:
            self._remove()
        except BaseException as err:  # noqa: BLE001 (re-raised in the test's thread by __exit__)
            self.error = err

    def _workers(self, node) -> list[str]:
        raylets = [p for kind, p in node.live_processes() if kind == "raylet"]
        return [" ".join(c.cmdline()) for r in raylets for c in psutil.Process(r.pid).children(recursive=True)]

    def _remove(self) -> None:
        deadline = time.time() + self.timeout_s
        while time.time() < deadline:
            if self.ready():
                for node in self.cluster.worker_nodes:
                    workers = self._workers(node)
                    if any(self.running in w for w in workers):
                        self.cluster.remove_node(node)
                        self.lost = workers
                        print(f"[node loss] removed a node running {len(workers)} Ray workers", flush=True)
                        return
            time.sleep(0.05)


def _last_step(folder: Path) -> int:
    """The last step a run has logged (0 before its first; a line being written is not one yet)."""
    try:
        return max(row["step"] for row in logged_rows(folder))
    except (FileNotFoundError, ValueError):
        return 0


def _windows(folder: Path) -> dict[str, list[str]]:
    """Each output shard's window ids."""
    return {str(Path(f).relative_to(folder)): pq.read_table(f, columns=["id"]).column("id").to_pylist()
            for f in embedding_files(folder)}


# Two nodes of two CPUs: an embedding actor (half a CPU) on each, and room beside it for Ray Data's 1-CPU
# file listing (with one CPU a node, the two half CPUs left are on two nodes and the listing never starts).
@pytest.mark.parametrize("cluster", [(2, 2)], indirect=True)
def test_embedding_survives_losing_a_node(embedded, mini_corpus_dir, cluster, tmp_path):
    reference, _, _ = embedded  # the same corpus embedded on one node
    out = tmp_path / "emb"
    config = replace(embed_config_for_tests(), actors=2)  # Ray Data spreads them: one on each node
    with NodeLoss(cluster, lambda: any((out / WORK).rglob("batch-*.parquet")), "WindowEmbedder") as loss:
        manifest = embed_corpus(mini_corpus_dir, config, out)
    assert any("WindowEmbedder" in p for p in loss.lost), f"no embedding actor was on the lost node: {loss.lost}"
    windows = _windows(out)
    assert all(len(ids) == len(set(ids)) for ids in windows.values())  # every window once
    assert {k: sorted(v) for k, v in windows.items()} == {k: sorted(v) for k, v in _windows(reference).items()}
    assert manifest["windows"] == sum(map(len, windows.values()))


# Three nodes of one CPU: the two training workers (1 CPU each) on two of them; the third takes the lost
# one's place when Ray Train restarts the group from its checkpoint.
@pytest.mark.parametrize("cluster", [(3, 1)], indirect=True)
def test_pretraining_survives_losing_a_node(train_run, cluster):
    def run(name: str, **watch):
        cfg = load_job(None, train_overrides(
            train_run, f"pretrain.name={name}", "pretrain.train.num_workers=2", "pretrain.train.batch_size=8",
            "pretrain.train.budget.steps=120", "pretrain.train.checkpoint_every=40", "pretrain.train.log_every=1",
            "pretrain.train.report_every=0", "pretrain.train.max_failures=1", "ray.include_dashboard=false"))
        return pretrain(cfg), cfg.run.dir / "checkpoints" / name

    _, reference = run("two-nodes-reference")
    folder = train_run.run.dir / "checkpoints" / "two-nodes-lost"
    with NodeLoss(cluster, lambda: _last_step(folder) >= 50, "RayTrainWorker") as loss:
        summary, _ = run("two-nodes-lost")
    assert any("RayTrainWorker" in p for p in loss.lost), f"no training worker was on the lost node: {loss.lost}"
    assert summary["steps"] == 120 and [r["step"] for r in logged_rows(folder)] == list(range(1, 121))
    expected = {r["step"]: r["loss"] for r in logged_rows(reference)}
    for row in logged_rows(folder):
        if row["step"] > 40:  # resumed from the step-40 checkpoint: the same steps on the same rows
            assert row["loss"] == pytest.approx(expected[row["step"]], abs=1e-4), row["step"]
    a, b = load_file(reference / "model.safetensors"), load_file(folder / "model.safetensors")
    assert all((a[k] - b[k]).abs().max() < 1e-4 for k in a)
