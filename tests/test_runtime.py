"""slm.runtime: what a stage's peak memory measures; where the embedded Ray listens."""

import json
import os
import subprocess
import sys
import time

import pytest


def test_peak_memory_sees_what_the_process_and_its_children_hold():
    # In a fresh process: this one may hold a local Ray whose workers come and go during the measurement.
    code = """
import subprocess, sys
import numpy as np
from slm.runtime import PeakMemory
with PeakMemory(interval_s=0.05) as idle:
    pass
with PeakMemory(interval_s=0.05) as mem:
    block = np.ones(64 * 2**20)  # 512 MiB in this process, touched
    child = subprocess.Popen([sys.executable, "-c", "import numpy, time; a = numpy.ones(32 * 2**20); time.sleep(1)"])
    child.wait()
    del block
print(mem.peak_bytes - idle.peak_bytes)
"""
    grown = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert grown > (512 + 200) * 2**20, grown / 2**30


@pytest.mark.ray
def test_the_embedded_ray_listens_on_the_loopback_only():
    """Issue 19: Ray 2.60 bound the embedded Ray's GCS, raylet, workers and agents to every interface (8
    sockets) or the machine's address (2). Started as `slm` starts it, every socket its processes listen
    on is 127.0.0.1. In a fresh process: this one may hold the tests' own local Ray."""
    code = """
import json, psutil, ray
from slm.runtime import RayConfig, init_ray
init_ray(RayConfig(num_cpus=1))
ray.get(ray.remote(lambda: 1).remote())  # a worker up too
session = ray._private.worker.global_worker.node.session_name  # the GCS is not this process's child
ours = {p.pid for p in psutil.Process().children(recursive=True)} | {psutil.Process().pid} | {
    p.pid for p in psutil.process_iter(["cmdline"]) if session in " ".join(p.info["cmdline"] or [])}
print(json.dumps(sorted({(c.laddr.ip, c.laddr.port) for c in psutil.net_connections(kind="inet")
                         if c.status == "LISTEN" and c.pid in ours})))
ray.shutdown()
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    sockets = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(sockets) >= 8, sockets  # the GCS, the raylet's two, a worker, the agents, the dashboard
    assert all(ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for ip, _ in sockets), sockets


@pytest.mark.ray
def test_a_job_run_in_a_process_that_has_ray_leaves_that_ray_up(ray_local, corpus_dir, tmp_path, capfd):
    """Issue 44: the README's test command hung on a fresh clone: `run_job` in the test process ended with
    `ray.shutdown()`, which stopped the session's Ray (SIGTERM to its GCS), and the next fixture that
    needed it waited forever. A job ends only the Ray it started."""
    from slm.job import load_job
    from slm.pipeline import run_job

    gcs_before = ray_local._private.worker.global_worker.node.gcs_address
    job = load_job(None, [f"corpus.dir={corpus_dir}", f"run.root={tmp_path}", "run.name=r", "stages=[stats]"])
    first = run_job(job)
    assert ray_local.is_initialized()
    # The stats stage reran in full on every `slm run` (issue 44): a second run finds it current.
    capfd.readouterr()
    assert run_job(job)["stats"] == first["stats"]
    assert "[stats] complete and current" in capfd.readouterr().out
    assert ray_local._private.worker.global_worker.node.gcs_address == gcs_before
    assert ray_local.get(ray_local.remote(lambda: 2 + 2).remote()) == 4  # and it still runs tasks


def test_the_dashboard_line_says_what_answers():
    """Issue 46: on a host where another Ray ran, `ray start` printed "Failed to start the dashboard" and
    exited 0, and nothing said so until `ray job submit` failed. The [ray] line checks the address."""
    import http.server
    import threading

    from slm.runtime import dashboard_said

    assert dashboard_said(None, wanted=True).startswith("no dashboard (this Ray reports none")
    assert dashboard_said(None, wanted=False) == "no dashboard"
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)  # answers 501
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"127.0.0.1:{server.server_port}"
        assert dashboard_said(url, wanted=True) == f"dashboard http://{url}"
    finally:
        server.shutdown()
        server.server_close()
    assert "not answering" in dashboard_said(url, wanted=True)  # the port is closed now


@pytest.mark.ray
def test_ray_data_s_no_free_cpu_warning_is_kept_only_when_no_cpu_comes_back(ray_local, monkeypatch):
    """Issue 64: Ray Data warns "does not have any available CPUs … will hang" when a dataset starts while the
    previous one's CPUs are still being handed back; every healthy data job logged it. The filter drops it when a
    CPU shows within CPU_SETTLE_S (and clears Ray's once-per-process mark, so a real starvation later still warns),
    and keeps it while every CPU is held (an actor holding the whole local Ray)."""
    import logging

    import ray
    from ray.util import debug

    from slm import runtime

    monkeypatch.setattr(runtime, "CPU_SETTLE_S", 1.0)
    warning = logging.LogRecord("ray.data.dataset", logging.WARNING, __file__, 1, runtime._CpusComingBack.PREFIX +
                                ". The Dataset job will hang unless more CPUs are freed up.", None, None)
    other = logging.LogRecord("ray.data.dataset", logging.WARNING, __file__, 1, "something else", None, None)
    debug._logged.add("cpu_warning")
    assert runtime.CPUS_COMING_BACK.filter(other)
    assert not runtime.CPUS_COMING_BACK.filter(warning) and "cpu_warning" not in debug._logged

    @ray.remote(num_cpus=2)
    class Hold:
        def ready(self) -> bool:
            return True

    holder = Hold.remote()
    ray.get(holder.ready.remote())
    try:
        for _ in range(50):  # the resource view catches up with the actor's placement
            if not ray.available_resources().get("CPU"):
                break
            time.sleep(0.1)
        assert runtime.CPUS_COMING_BACK.filter(warning), "a true warning (every CPU held) was dropped"
    finally:
        ray.kill(holder)
