"""Reaching Ray: connect to a cluster when one is named, else start an embedded local Ray.

The same job spec runs unchanged on a laptop and on a cluster: under ``ray job submit`` the driver
inherits ``RAY_ADDRESS`` and connects; run by hand with no address, it starts a local Ray with every
CPU and the dashboard on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from slm.config import ConfigError
from slm.log import VERBOSE_ENV, logger, set_verbose

log = logger(__name__)


@dataclass
class RayConfig:
    """How to reach Ray. No address (and no RAY_ADDRESS) starts an embedded local Ray."""

    address: str | None = None
    num_cpus: int | None = None  # embedded Ray only; None = all CPUs
    include_dashboard: bool = True
    dashboard_host: str = "127.0.0.1"
    # None: Ray's 8265, or the first free port after it when another Ray (a second run, a notebook)
    # holds it; the [ray] line prints where the dashboard is. A number is that port or an error.
    dashboard_port: int | None = None

    def validate(self, prefix: str = "") -> None:
        if self.num_cpus is not None and self.num_cpus < 1:
            raise ConfigError(f"config key '{prefix}num_cpus': at least 1 (or null: every CPU), got {self.num_cpus}")
        if self.dashboard_port is not None and not 1 <= self.dashboard_port <= 65535:
            raise ConfigError(f"config key '{prefix}dashboard_port': a TCP port, 1-65535 (or null: 8265 or the next free one), got {self.dashboard_port}")


JOB_NAME_ENV = "SLM_JOB_NAME"  # what `slm run` is running, for the dashboard (set by the pipeline)


def verbose() -> bool:
    """``slm -v``: libraries' progress output too (Ray Data's per-operator progress, Ray Train's reports)."""
    return os.environ.get(VERBOSE_ENV) == "1"


OUTPUT_ENV = (VERBOSE_ENV, "RAY_DEDUP_LOGS", "RAY_COLOR_PREFIX", "RAY_TRAIN_ENABLE_STATE_TRACKING",
              "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "RAY_AIR_NEW_OUTPUT")


def configure_output(verbose: bool = False) -> None:
    """How a job's log reads; set before Ray is imported, which reads some of these at import time.

    - Ray's log deduplication off: slm's progress lines differ only in their numbers, which is what Ray
      folds, so a run's lines vanished into "[repeated 2x across cluster]".
    - No ANSI colour codes around Ray's ``(pid=…)`` prefixes when the output is not a terminal.
    - Ray Train's state tracking on, so that the dashboard's Train page lists the runs.
    - Tune's own TensorBoard writer off (``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS``; the sweep asks for its
      JSON and CSV results by name): each training run writes its own, once, under a short name.
    - Tune's classic console output (``RAY_AIR_NEW_OUTPUT=0``): the new one ignores the sweep's table
      (trial names and the method, budgets and perplexity columns) and prints the trial dict instead.
    A variable the user set is left as it is.
    """
    os.environ[VERBOSE_ENV] = "1" if verbose else os.environ.get(VERBOSE_ENV, "0")
    set_verbose(os.environ[VERBOSE_ENV] == "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if not sys.stdout.isatty():
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    os.environ.setdefault("RAY_TRAIN_ENABLE_STATE_TRACKING", "1")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")


def private_auth_token(path: Path | None = None) -> bool:
    """Ray's token file readable by its owner alone. Ray 2.60 writes ``~/.ray/auth_token`` mode 0644:
    any local user could read it and drive the cluster. Returns whether the mode had to be fixed."""
    path = path or Path(os.environ.get("RAY_AUTH_TOKEN_PATH", "~/.ray/auth_token")).expanduser()
    if not path.is_file() or path.stat().st_mode & 0o077 == 0:
        return False
    path.chmod(0o600)
    log.info(f"[ray] {path} was readable by other users: made it 0600")
    return True


def cluster_address(cfg: RayConfig) -> str | None:
    """The Ray cluster to connect to (``ray.address``, else ``RAY_ADDRESS``), or None: an embedded local Ray."""
    return cfg.address or os.environ.get("RAY_ADDRESS")


# Ray's switch for a one-machine Ray (its default on macOS and Windows): the node's address is the
# loopback. Ray 2.60 binds its GCS, raylet, agents and workers to every interface or to the node's address
# otherwise: reachable from the network (the probe in docs/cluster.md); with the switch, to 127.0.0.1.
ONE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def serve_this_machine_only() -> None:
    """Before an embedded Ray starts: every process of it listens on the loopback only (unless the user
    set ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1``). The variable reaches the Ray processes this driver
    starts; the driver's own reading of it was fixed when Ray was imported, so it is set there too."""
    from ray._private import ray_constants

    os.environ.setdefault(ONE_MACHINE_ENV, "0")
    ray_constants.ENABLE_RAY_CLUSTER = ray_constants.env_bool(ONE_MACHINE_ENV, True)


# Lines Ray forwards to the driver (from the raylet's error channel and the log monitor) that alarm a new
# user and ask nothing of them, each matched exactly; `slm -v` shows them. docs/usage.md ("Quiet logs").
FORWARDED_NOISE = (
    # The raylet counts every live worker process against its start-up concurrency (the CPU count): on 2
    # CPUs a Ray Data pipeline's task workers and actor pool reach "4x" within a stage. Nothing is wrong.
    re.compile(r"WARNING: \d+ PYTHON worker processes have been started on node: .* maximum expected startup "
               r"concurrency"),
    # The GCS killing an actor whose process has already exited (a finished trial's at a sweep's end, a Ray
    # Data actor pool's at a stage's): "Failed to kill actor … RpcError: Socket closed" or "… KillActor RPC
    # failed for actor NIL_ID".
    re.compile(r"gcs_actor_scheduler\.cc:\d+: Failed to kill actor|Failed to kill actor .*RpcError: Socket closed"),
)


def quiet_forwarded_lines() -> None:
    """Drop ``FORWARDED_NOISE`` from what Ray prints on the driver. Ray 2.60 has no filter of its own: its
    printer (``ray._private.worker.print_worker_logs``) is wrapped; a Ray without it is left as it is."""
    from ray._private import worker

    printer = getattr(worker, "print_worker_logs", None)
    if printer is None or getattr(printer, "slm_filtered", False):
        return

    def print_worker_logs(data, print_file, *args, **kwargs):
        lines = [line for line in data.get("lines", []) if not any(p.search(line) for p in FORWARDED_NOISE)]
        if lines:
            printer({**data, "lines": lines}, print_file, *args, **kwargs)

    print_worker_logs.slm_filtered = True
    worker.print_worker_logs = print_worker_logs


class _DropRecords(logging.Filter):
    """Drops log records whose message starts with one of ``starts``."""

    def __init__(self, *starts: str):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.starts)


# Ray Data's ERROR lines when a task of a dataset fails, each followed by the exception itself (which
# names the failure, and which the CLI prints as our one line when it is one of our refusals).
RAY_DATA_FAILURE_LINES = _DropRecords("An exception was raised from a task of operator",
                                      "Exception occurred in user code")


def quiet_ray_data_failures() -> None:
    """Leave out ``RAY_DATA_FAILURE_LINES`` (Ray Data's handlers, set up when it is imported)."""
    import ray.data  # noqa: F401 (its logging configuration)

    for handler in logging.getLogger("ray.data").handlers:
        if RAY_DATA_FAILURE_LINES not in handler.filters:
            handler.addFilter(RAY_DATA_FAILURE_LINES)


class _CpusComingBack(logging.Filter):
    """Ray Data's "The Ray cluster currently does not have any available CPUs. The Dataset job will hang …",
    kept only when it is true. Ray Data reads ``ray.available_resources()`` as a dataset starts to execute, and
    right after the previous dataset's tasks end their CPUs are not yet handed back (the resource view lags by
    a heartbeat): every healthy data job logged it, at a stage that then ran at once (issue 64). The record waits
    up to ``CPU_SETTLE_S`` for a CPU to show; if one does, the warning was false and is dropped (and Ray's
    once-per-process mark is cleared, so a cluster really full of actors later still warns)."""

    PREFIX = "Warning: The Ray cluster currently does not have any available CPUs"

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(self.PREFIX):
            return True
        import ray
        from ray.util import debug

        deadline = time.monotonic() + CPU_SETTLE_S
        while time.monotonic() < deadline:
            if ray.is_initialized() and ray.available_resources().get("CPU"):
                debug._logged.discard("cpu_warning")  # Ray Data's log_once key for this warning
                return False
            time.sleep(0.1)
        return True


CPU_SETTLE_S = 3.0
CPUS_COMING_BACK = _CpusComingBack()


def true_ray_data_warnings() -> None:
    """Ray Data's warning of no free CPU only when none comes back (``_CpusComingBack``), verbose or not."""
    import ray.data  # noqa: F401 (its logging configuration)

    for handler in logging.getLogger("ray.data").handlers:
        if CPUS_COMING_BACK not in handler.filters:
            handler.addFilter(CPUS_COMING_BACK)


# Whether this process's Ray connection is init_ray's: shutdown_ray ends only that. A job run in a process
# that had Ray already (the test session's, in-process `run_job`) stopped it: SIGTERM to its GCS, and the
# next test that needed it waited forever (issue 44).
_started_here = False
# Whether that connection is to a cluster that outlives this driver (a persistent head, `ray job submit`),
# whose dashboard keeps listing this job's tasks after it ends.
_connected_to_cluster = False
# How long the workers' task events take to reach the GCS: each Ray process sends them every
# `task_events_report_interval_ms` (1,000 by Ray's default; its variable is spelt in lower case).
TASK_EVENTS_INTERVAL_S = float(os.environ.get("RAY_task_events_report_interval_ms", 1000)) / 1000  # noqa: SIM112


def init_ray(cfg: RayConfig):
    """Initialise Ray once per process according to ``cfg``; return the Ray context. The dashboard's Jobs
    page names this driver by ``SLM_JOB_NAME`` (set by the pipeline; a submitted job has its submission's)."""
    import ray  # here, not at the top: the CLI's quick commands (config, corpus) never import Ray
    from ray.job_config import JobConfig as RayJobConfig

    global _started_here, _connected_to_cluster
    if ray.is_initialized():  # someone else's Ray (a test session's, a notebook's): used, never stopped
        return ray.get_runtime_context()
    configure_output(verbose())
    private_auth_token()
    address = cluster_address(cfg)
    submitted = "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ  # under `ray job submit`: its metadata stands
    job_name = os.environ.get(JOB_NAME_ENV)
    # The output settings reach every worker (on a cluster too: workers do not inherit this process's env).
    env = {k: os.environ[k] for k in OUTPUT_ENV if k in os.environ}
    job_config = None if submitted else RayJobConfig(metadata={"job_name": job_name} if job_name else None,
                                                     runtime_env={"env_vars": env})
    if not verbose():  # "Started a local Ray instance. View the dashboard at …" in ANSI colours: the
        logging.getLogger("ray._private.worker").setLevel(logging.WARNING)  # [ray] line below says it
        # "Token authentication is enabled … set RAY_AUTH_MODE=disabled to opt out": it stays on (docs/
        # cluster.md), and a first-time user should not be told how to switch it off at every start.
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
        quiet_forwarded_lines()
    if address:
        context = connect(address, job_config)
        where = f"connected to Ray at {address}"
    else:
        serve_this_machine_only()
        # address="local" always starts a fresh Ray, never a stale one recorded in a temp dir.
        context = ray.init(
            address="local",
            num_cpus=cfg.num_cpus,
            include_dashboard=cfg.include_dashboard,
            dashboard_host=cfg.dashboard_host,
            dashboard_port=cfg.dashboard_port,
            job_config=job_config,
        )
        where = "started an embedded local Ray"
    _started_here, _connected_to_cluster = True, bool(address)
    private_auth_token()  # before (a token from an earlier Ray) and after (one this start wrote)
    if not verbose():  # Ray Data's execution plans and per-dataset statistics: INFO lines by the dozen
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        quiet_ray_data_failures()
    true_ray_data_warnings()
    log.info(f"[ray] {where}; {ray.cluster_resources().get('CPU', 0):.0f} CPUs; "
             f"{dashboard_said(getattr(context, 'dashboard_url', None), cfg.include_dashboard or bool(address))}")
    return context


AUTH_MODE_ENV = "RAY_AUTH_MODE"


class ClusterUnreachable(ConnectionError):
    """The cluster at ``ray.address`` / ``RAY_ADDRESS`` did not take this driver; the message says what to set."""


def connect(address: str, job_config):
    """``ray.init`` at an existing cluster's ``address``, with its two failures named instead of Ray's:

    - nothing listens there (a wrong port, a head that is down): Ray's client retries the GCS for minutes
      (warnings every ~35 s; measured: still retrying after 5 minutes), so the address is tried first;
    - a head that wants the token (Ray 2.60's default) from a shell without ``RAY_AUTH_MODE=token``: Ray
      never enables token mode by itself for an explicit address, its client retries "InvalidAuthToken" for
      ~20 s and raises a bare ConnectionError."""
    import ray

    failed = f"could not connect to the Ray cluster at {address} (ray.address or RAY_ADDRESS)"
    unreachable = _nothing_listens_at(address)
    if unreachable:
        raise ClusterUnreachable(f"{failed}: {unreachable}\nIs its head running at that address? "
                                 f"`ray status --address {address}` asks it (docs/cluster.md)")
    try:
        return ray.init(address=address, log_to_driver=True, job_config=job_config)
    except ConnectionError as e:
        token_hint = "" if os.environ.get(AUTH_MODE_ENV, "").lower() == "token" else (
            f"\nIf the cluster uses token authentication (Ray 2.60's default), this shell must say so: "
            f"export {AUTH_MODE_ENV}=token, with the head's token in ~/.ray/auth_token or RAY_AUTH_TOKEN "
            f"(docs/cluster.md, 'Token authentication stays on')")
        raise ClusterUnreachable(f"{failed}: {e}{token_hint}") from e


def _nothing_listens_at(address: str, timeout_s: float = 5.0) -> str | None:
    """Why no TCP connection opens to ``address``'s host and port (``HOST:PORT`` or ``ray://HOST:PORT``), or
    None when one does or the address names no port (``auto``)."""
    import socket

    host, sep, port = address.split("://")[-1].rpartition(":")
    if not sep or not port.isdigit():
        return None
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        return f"nothing answers at {host}:{port} ({e.strerror or e.__class__.__name__})"
    return None


def dashboard_said(url: str | None, wanted: bool) -> str:
    """Where the dashboard answers, checked (issue 46: a head whose dashboard had failed to start was taken to
    have one, and `ray job submit` then answered "500: No available agent")."""
    import urllib.error
    import urllib.request

    if not url:
        return "no dashboard" + (" (this Ray reports none: it failed to start or was left out; docs/usage.md, "
                                 "'Watch')" if wanted else "")
    for _ in range(6):  # a fresh dashboard may take a moment after ray.init returns
        try:
            urllib.request.urlopen(f"http://{url}/api/version", timeout=2).close()
            return f"dashboard http://{url}"
        except urllib.error.HTTPError:
            return f"dashboard http://{url}"  # it answered (an auth refusal is an answer)
        except OSError as e:
            error = e
            time.sleep(0.5)
    return f"dashboard http://{url} not answering ({error.__class__.__name__})"


# CPU flags of instruction sets that compute bfloat16 matmuls natively (oneDNN uses them); without
# them torch emulates bf16 through float32 conversions, far slower than float32 itself.
NATIVE_BF16_CPU_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


def _cpuinfo_field(name: str) -> str:
    """The first ``name : value`` line of Linux ``/proc/cpuinfo`` (empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    line = next((ln for ln in text.splitlines() if ln.split(":", 1)[0].strip() == name), "")
    return line.partition(":")[2].strip()


def cpu_flags() -> frozenset[str]:
    """This machine's CPU feature flags (empty where /proc/cpuinfo is not)."""
    return frozenset(_cpuinfo_field("flags").split())


def cpu_model() -> str:
    """This machine's CPU model name (``platform.processor()`` where /proc/cpuinfo is not)."""
    return _cpuinfo_field("model name") or platform.processor()


def native_bf16(device_type: str) -> bool:
    """Whether ``device_type`` ("cpu" or "cuda") of this machine computes bfloat16 natively."""
    if device_type == "cuda":
        import torch  # only here: a CPU-only driver that never asks never pays torch's import

        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return bool(cpu_flags() & NATIVE_BF16_CPU_FLAGS)


def shutdown_ray() -> None:
    """End the Ray connection ``init_ray`` made (and the local Ray it started); leave one it found."""
    import ray  # as in init_ray: the quick commands never import Ray

    global _started_here, _connected_to_cluster
    if _started_here and ray.is_initialized():
        if _connected_to_cluster:
            # A cluster that outlives this driver force-exits the job's workers when the driver leaves,
            # and a task whose last state a worker had not sent yet (a `Progress(pack).add` a Ray Data task
            # made in the stage's last second) is then marked FAILED, WORKER_DIED, in a job that succeeded
            # (ray-project/ray#56427, open in Ray 2.60; issue 46). Waiting two reporting intervals lets
            # every worker send its tasks' final states first.
            time.sleep(2 * TASK_EVENTS_INTERVAL_S)
        ray.shutdown()
    _started_here = _connected_to_cluster = False


def _proportional(p: psutil.Process) -> int:
    """A process's PSS (its RSS where the platform has none)."""
    try:
        return p.memory_full_info().pss
    except (AttributeError, psutil.AccessDenied):
        return p.memory_info().rss


class PeakMemory:
    """The peak summed PSS of this process and every process it started, sampled in a thread.

    On the embedded local Ray (what ``slm run`` starts by hand) the driver's descendants are the whole
    Ray cluster — GCS, raylet, every worker and actor, idle workers kept from earlier stages — so this is a
    stage's whole footprint on the machine. Connected to a cluster it covers only the driver: read the nodes'
    memory on the Ray dashboard there. PSS (proportional set size) splits a shared page between the
    processes that map it, so the sum is what the machine holds; summed RSS counted the object store and
    the shared libraries once per process (the quickstart's pack stage: 5.08 GiB RSS against 3.36 GiB PSS,
    benchmarks/results/stage_memory_quickstart.json). Where PSS cannot be read (not Linux), RSS.
    """

    def __init__(self, interval_s: float = 1.0):
        self.peak_bytes, self.interval_s, self._stop = 0, interval_s, threading.Event()

    @property
    def peak_gib(self) -> float:
        return round(self.peak_bytes / 2**30, 2)

    def sample(self) -> int:
        me = psutil.Process()
        total = 0
        for p in [me, *me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):  # a worker that exited between listing and reading
                total += _proportional(p)
        self.peak_bytes = max(self.peak_bytes, total)
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):  # walking processes costs CPU: sample sparingly
            self.sample()

    def __enter__(self) -> PeakMemory:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
