"""Issue 66, item 3: a study as one job on a multi-node cluster. On a simulated cluster (``ray.cluster_utils.Cluster``:
a head and three one-CPU nodes), a small sweep submitted once through the Jobs API spreads its pretraining runs and
trials over the nodes (the results table says where each ran), loses a node mid-pretraining — its run resumes from
its checkpoint on the nodes left — and ends with the table the same sweep makes on one node."""

from __future__ import annotations

import json
import shlex
import sys
import time

import pyarrow.parquet as pq
import pytest

from slm.records.table import COLUMNS
from tests.conftest import REPO, logged_rows, train_overrides
from tests.test_job_submission import _free_port, auth_headers
from tests.test_node_loss import OBJECT_STORE, NodeLoss, _last_step

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SWEEP = ["sweep.methods=[generic, soup]", "sweep.sizes=[tiny]", "sweep.domains=[legal]", "resample.domains=[]",
         "sweep.pretrain_steps=[160]", "sweep.domain_tokens=[3200]", "sweep.specialize_steps=[5]",
         "sweep.seeds=[0, 1]", "pretrain.model.soup.experts=2", "pretrain.train.num_workers=0",
         "pretrain.train.checkpoint_every=40", "pretrain.train.log_every=1", "specialize.train.checkpoint_every=0",
         "ray.include_dashboard=false"]
# What a trial measured: every column but where it ran and how long it took there.
MEASURED = [c for c in COLUMNS if not c.endswith("device_seconds")]


@pytest.fixture
def one_node_table(train_run, slm_cli):
    """The sweep on one node (an embedded Ray of 2 CPUs), before the cluster starts: the table to match."""
    slm_cli("sweep", "jobs/sweeps/quickstart.yaml", *train_overrides(train_run, *SWEEP, "sweep.name=one-node",
                                                                      "ray.num_cpus=2"))
    return pq.read_table(train_run.run.dir / "sweeps" / "one-node" / "results.parquet").to_pylist()


@pytest.fixture
def cluster_with_jobs(one_node_table, ray_local):
    """The session's Ray set aside for a head (no CPUs: it runs the job's driver) with the dashboard's Jobs API
    and three nodes of one CPU; brought back after."""
    import ray
    from ray.cluster_utils import Cluster
    from ray.job_submission import JobSubmissionClient

    ray.shutdown()
    # Free ports for the dashboard and every agent: the defaults may belong to another local Ray (a study part's).
    def ports() -> dict:
        return {"dashboard_agent_listen_port": _free_port(), "runtime_env_agent_port": _free_port(),
                "metrics_export_port": _free_port()}

    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": OBJECT_STORE,
                                                          "include_dashboard": True, "dashboard_host": "127.0.0.1",
                                                          "dashboard_port": _free_port(), **ports()})
    for _ in range(3):
        made.add_node(num_cpus=1, object_store_memory=OBJECT_STORE, **ports())
    ray.init(address=made.address, log_to_driver=False)
    made.wait_for_nodes()
    url = f"http://{made.head_node.address_info['webui_url']}"
    client, deadline = None, time.time() + 120
    while client is None and time.time() < deadline:
        try:
            client = JobSubmissionClient(url, headers=auth_headers())
            client.list_jobs()
        except Exception:  # noqa: BLE001 (the dashboard is still starting)
            client = None
            time.sleep(1)
    assert client is not None, f"the simulated head's Jobs API never answered at {url}"
    try:
        yield made, client
    finally:
        ray.shutdown()
        made.shutdown()
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)


def test_a_study_submitted_once_spreads_over_the_nodes_and_survives_a_lost_one(train_run, one_node_table,
                                                                              cluster_with_jobs):
    made, client = cluster_with_jobs
    sweep = train_run.run.dir / "sweeps" / "cluster"
    overrides = train_overrides(train_run, *SWEEP, "sweep.name=cluster")
    entrypoint = (f"cd {shlex.quote(str(REPO))} && {shlex.quote(sys.executable)} -m slm.cli sweep "
                  f"jobs/sweeps/quickstart.yaml {' '.join(shlex.quote(o) for o in overrides)}")
    runs = sweep / "checkpoints"

    loss = NodeLoss(made, lambda: False, "pretrain:")

    def midway() -> bool:  # a run past its first checkpoint, not finished: the node running it is the one lost
        for run in runs.glob("*-tiny-seed*"):
            if 60 <= _last_step(run) < 150:
                loss.running = f"pretrain:{run.name}"
                return True
        return False

    loss.ready = midway
    with loss:
        job, deadline = None, time.time() + 120
        while job is None:  # the head's agent registers with the dashboard some seconds after it answers
            try:
                job = client.submit_job(entrypoint=entrypoint)
            except RuntimeError as err:
                if "No available agent" not in str(err) or time.time() > deadline:
                    raise
                time.sleep(2)
        deadline = time.time() + 1500
        while (status := client.get_job_status(job)) not in {"SUCCEEDED", "FAILED", "STOPPED"}:
            assert time.time() < deadline, client.get_job_logs(job)[-3000:]
            time.sleep(2)
    logs = client.get_job_logs(job)
    assert status == "SUCCEEDED", logs[-5000:]
    assert any(loss.running in w for w in loss.lost), f"{loss.running} was not on the lost node: {loss.lost}"
    lost_run = loss.running.removeprefix("pretrain:")

    # Every run trained each of its steps, and finished once: the lost one resumed from its checkpoint on another
    # node, the others were not trained again.
    assert f"[train] {lost_run}: resumed at step" in logs, logs[-5000:]
    for run in sorted(runs.glob("*-tiny-seed*")):
        assert [r["step"] for r in logged_rows(run)] == list(range(1, 161)), run.name
        assert logs.count(f"[train] {run.name} done: ") == 1, run.name
    table = pq.read_table(sweep / "results.parquet").to_pylist()
    assert len({r["pretrained_on"] for r in table}) >= 2 and len({r["specialized_on"] for r in table}) >= 2, table
    nodes = {json.loads((r / "manifest.json").read_text())["ran"]["node"] for r in runs.glob("*-tiny-seed*")}
    assert len(nodes) >= 2  # the runs' nodes, as their manifests say
    mine = {r["trial"]: {c: r[c] for c in MEASURED} for r in table}
    reference = {r["trial"]: {c: r[c] for c in MEASURED} for r in one_node_table}
    assert mine.keys() == reference.keys() and len(mine) == 4
    for trial, row in mine.items():
        numbers = [c for c, v in row.items() if isinstance(v, float)]
        assert {c: v for c, v in row.items() if c not in numbers} == {c: reference[trial][c] for c in row
                                                                     if c not in numbers}, trial
        assert [row[c] for c in numbers] == pytest.approx([reference[trial][c] for c in numbers], rel=1e-6), trial
