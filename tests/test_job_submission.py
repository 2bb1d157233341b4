"""A real `ray start --head` on 127.0.0.1, a job submitted through the Jobs API with the token, then stopped.

The head is started in its own process session with ``--block`` and stopped by signalling that
session, never with `ray stop` (which would end every Ray on the host, another test's included).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import NamedTuple

import pytest

from .conftest import REPO

pytestmark = pytest.mark.ray


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Head(NamedTuple):
    client: object  # its JobSubmissionClient, with the token
    url: str  # its dashboard (the Jobs API)
    address: str  # its GCS, what a driver's ray.address names


@pytest.fixture(scope="module")
def head_node(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("head")
    temp_dir = Path(f"/tmp/slm-head-{os.getpid()}")  # Ray's socket paths must stay short
    port, dashboard_port = _free_port(), _free_port()
    bin_dir = str(Path(sys.executable).parent)
    # Task events every 3 s (Ray's default: 1 s): a job that leaves before its workers have sent their
    # tasks' last states then loses them every time, not one run in many (issue 46, ray-project/ray#56427).
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_task_events_report_interval_ms": "3000"}
    env.pop("RAY_ADDRESS", None)
    log = (tmp_path / "head.log").open("w")
    proc = subprocess.Popen(
        [str(Path(bin_dir) / "ray"), "start", "--head", "--block", f"--port={port}",
         "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
         "--num-cpus=2", f"--temp-dir={temp_dir}", "--disable-usage-stats",
         # Free ports for the agents too: the defaults (52365, …) may belong to another local Ray.
         f"--dashboard-agent-listen-port={_free_port()}", f"--dashboard-agent-grpc-port={_free_port()}",
         f"--metrics-export-port={_free_port()}", f"--runtime-env-agent-port={_free_port()}"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{dashboard_port}"
    from ray.job_submission import JobSubmissionClient

    client, deadline = None, time.time() + 120
    while time.time() < deadline:
        assert proc.poll() is None, (tmp_path / "head.log").read_text()
        try:
            client = JobSubmissionClient(url, headers=auth_headers())
            client.list_jobs()
            break
        except Exception:
            client = None
            time.sleep(1)
    assert client is not None, "the head node's Jobs API never answered"
    yield Head(client, url, f"127.0.0.1:{port}")
    # Every process of this head (gcs, raylet, dashboard, workers) shares the launcher's process group.
    os.killpg(proc.pid, signal.SIGTERM)
    # A throwaway cluster: 5 s of grace, then SIGKILL whatever of the group is left.
    deadline = time.time() + 5
    while time.time() < deadline and _group_alive(proc.pid):
        time.sleep(0.5)
    if _group_alive(proc.pid):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    log.close()
    shutil.rmtree(temp_dir, ignore_errors=True)


def auth_headers() -> dict[str, str] | None:
    """The head's token (`ray start` writes it) as the bearer header its HTTP APIs want. Passed explicitly:
    Ray reads RAY_AUTH_MODE once per process, so setting it in a test comes too late where an earlier
    call has read it."""
    token = Path.home() / ".ray" / "auth_token"
    return {"Authorization": f"Bearer {token.read_text().strip()}"} if token.exists() else None


def listed_tasks(url: str, **filters: str) -> list:
    """The tasks the head's state API lists with ``filters`` (column = value), every state."""
    from ray.util.state import StateApiClient
    from ray.util.state.common import ListApiOptions, StateResource

    options = ListApiOptions(filters=[(k, "=", v) for k, v in filters.items()], detail=False)
    return StateApiClient(address=url, headers=auth_headers()).list(StateResource.TASKS, options=options,
                                                                    raise_on_missing_output=False)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_unauthenticated_requests_are_refused(head_node):
    """Token auth stays on: the dashboard's HTTP API answers 401 to a request without the token."""
    url = head_node.url
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{url}/api/jobs/", timeout=30)
    assert err.value.code == 401


def slm_run_refused_at(address: str, env: dict, corpus_dir: Path, tmp_path: Path) -> str:
    """`slm run` of the stats job as a driver at ``address``: refused with one message naming the address, no
    traceback, nothing written. Its stderr, for what the message says beyond that."""
    done = subprocess.run([str(Path(sys.executable).parent / "slm"), "run", "jobs/corpus_stats.yaml",
                           f"corpus.dir={corpus_dir}", f"run.root={tmp_path / 'runs'}", f"ray.address={address}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"slm: could not connect to the Ray cluster at {address}" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "runs" / "corpus-stats" / "stats").exists()
    return done.stderr


def test_a_driver_without_the_token_mode_is_told_what_to_set(head_node, user_corpus_dir, tmp_path):
    """`slm run` at a head that wants the token, from a shell without RAY_AUTH_MODE=token: Ray never enables
    token mode by itself for an explicit address, and its client retried "InvalidAuthToken" for ~20 s,
    then raised a bare ConnectionError (a traceback). Now one message that names the address and what to set."""
    env = {k: v for k, v in os.environ.items() if k not in {"RAY_AUTH_MODE", "RAY_ADDRESS"}}
    stderr = slm_run_refused_at(head_node.address, env, user_corpus_dir, tmp_path)
    assert "export RAY_AUTH_MODE=token" in stderr


def test_a_driver_at_an_address_with_no_head_is_told_to_check_it(user_corpus_dir, tmp_path):
    """An address where nothing listens (a wrong port, a head that is down), with RAY_AUTH_MODE=token set: Ray's
    client would retry it for minutes; `slm` tries the address first and names it, and how to ask it, at once
    (no token hint: the shell has the token mode)."""
    address = f"127.0.0.1:{_free_port()}"  # nothing listens on it
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_AUTH_MODE": "token"}
    stderr = slm_run_refused_at(address, env, user_corpus_dir, tmp_path)
    assert f"ray status --address {address}" in stderr
    assert "export RAY_AUTH_MODE=token" not in stderr


def submit_and_wait(client, entrypoint: str, timeout: float = 300) -> tuple[str, str]:
    """Submit ``entrypoint`` with the repository as working dir; return (final status, logs)."""
    from ray.job_submission import JobStatus

    deadline = time.time() + 120
    while True:  # a fresh head answers before its job agent is up ("No available agent …")
        try:
            job_id = client.submit_job(entrypoint=entrypoint, runtime_env={"working_dir": str(REPO)})
            break
        except RuntimeError as err:
            if "No available agent" not in str(err) or time.time() > deadline:
                raise
            time.sleep(2)
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = client.get_job_status(job_id)
        if status in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
            break
        time.sleep(2)
    return status, client.get_job_logs(job_id)


@pytest.mark.slow  # ~70 s; the head node's token auth stays in the default suite
def test_submit_stats_job_to_a_head_node(head_node, user_corpus_dir, tmp_path):
    client, url, _ = head_node
    from ray.job_submission import JobStatus

    runs = tmp_path / "runs"
    status, logs = submit_and_wait(client, f"slm run jobs/corpus_stats.yaml corpus.dir={user_corpus_dir} run.root={runs}")
    assert status == JobStatus.SUCCEEDED, logs
    assert "connected to Ray at" in logs  # the driver joined the head's cluster, not a new local Ray
    assert "generic.jsonl" in logs and "total" in logs
    stats = json.loads((runs / "corpus-stats" / "stats" / "stats.json").read_text())
    assert {r["domain"] for r in stats} == {"generic", "med", "notes"}
    assert (runs / "corpus-stats" / "config.yaml").exists()
    # Issue 46: a job that succeeded showed "Failed: 89" in the dashboard (Ray Data's FooterReader actors,
    # killed after listing, and a hash shuffle's aggregators). None now, as `ray list tasks` sees them.
    failed = listed_tasks(url, state="FAILED")
    assert failed == [], [(t.name, t.error_type) for t in failed]


@pytest.mark.slow  # ~20 s on top of the head node
def test_a_job_leaves_no_task_unfinished(head_node):
    """Tasks that report progress just before the driver leaves: a cluster that outlives the driver
    force-exits the job's workers, and what a worker had not yet sent of its tasks' states was lost — the
    calls it made listed FAILED (WORKER_DIED) or not at all (ray-project/ray#56427). `shutdown_ray` waits
    two reporting intervals first: every call listed, FINISHED."""
    from ray.job_submission import JobStatus

    client, url, _ = head_node
    tasks = 8
    status, logs = submit_and_wait(client, f"python tests/progress_job.py {tasks}", timeout=120)
    assert status == JobStatus.SUCCEEDED, logs
    assert f"progress-job: {tasks} of {tasks} units reported" in logs
    job_id = next(j.job_id for j in client.list_jobs() if j.entrypoint.startswith("python tests/progress_job.py"))
    adds = listed_tasks(url, job_id=job_id, func_or_class_name="Counter.add")
    assert sorted(t.state for t in adds) == ["FINISHED"] * tasks, [(t.state, t.error_type) for t in adds]


@pytest.mark.slow  # ~1.5 min on top of the head node; run with -m slow
def test_submit_a_pretraining_job_to_a_head_node(head_node, train_run):
    """jobs/pretrain.yaml through the Jobs API: Ray Train's 2 workers on the head's CPUs, over gloo."""
    from ray.job_submission import JobStatus

    from .conftest import train_overrides

    client = head_node.client
    overrides = " ".join(shlex.quote(o) for o in train_overrides(train_run, "pretrain.method=soup", "pretrain.name=submitted",
                                         "pretrain.model.depth=0", "pretrain.train.budget.steps=10",
                                         "pretrain.train.log_every=5"))
    status, logs = submit_and_wait(client, f"slm run jobs/pretrain.yaml {overrides}", timeout=400)
    assert status == JobStatus.SUCCEEDED, logs
    assert "connected to Ray at" in logs and "[train] submitted 10/10 steps (100%)" in logs
    assert logs.count("[train] submitted 10/10 steps") == 1  # one line per interval, from rank 0 only
    assert "Reporting training result" not in logs  # Ray Train's own lines: only with slm -v
    summary = json.loads((train_run.run.dir / "checkpoints" / "submitted" / "summary.json").read_text())
    assert summary["steps"] == 10 and summary["workers"] == 2 and summary["method"] == "soup"
