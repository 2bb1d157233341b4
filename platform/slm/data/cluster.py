"""`cluster`: k-means over the generic windows' embeddings, then every window assigned on Ray Data.

Flat (``cluster.k``) or two-level (``cluster.k`` coarse × ``cluster.fine_k`` fine, e.g. 16 × 64): coarse
clusters are the experts' domains (SLM-mix, SLM-pn, Soup-of-Experts), leaves the importance-sampling
bins (SLM-is/CRISP). scikit-learn's KMeans is fitted on a sample of generic windows chosen by hashing
their ids with the seed (deterministic, the same on every machine); assignment is a Ray Data
``map_batches`` over every embedded window (generic and domains), so the driver never holds the corpus.

Output (``<run dir>/clusters/``): ``centroids.npz`` (coarse k×d; fine k×fine_k×d), ``assignments/``
(Parquet: window id, doc id, source, domain, text, n_tokens, coarse, leaf), ``clusters.json`` (sizes
in windows and tokens, and a few sample titles per coarse cluster), ``manifest.json``.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import ray.data
from sklearn.cluster import KMeans

from slm.artifacts import (
    atomic_path,
    atomic_write_json,
    file_sha256,
    is_complete,
    read_manifest,
    remake,
    verify,
    write_manifest,
)
from slm.config import config_hash
from slm.corpus.documents import hash_uniform
from slm.data.config import ClusterConfig
from slm.data.embed import EMBEDDING_DIM, embedding_files
from slm.data.execution import grouped_sums, reproducible_execution
from slm.log import logger

log = logger(__name__)

ASSIGNMENT_COLUMNS = ["id", "doc_id", "source", "domain", "text", "n_tokens"]


def _in_sample(ids: list[str], fraction: float, seed: int) -> np.ndarray:
    return np.array([hash_uniform(f"cluster:{seed}:{i}") < fraction for i in ids], dtype=bool)


def _sample_batch(batch: pa.Table, fraction: float, seed: int) -> pa.Table:
    keep = batch.filter(pc.equal(batch.column("domain"), "generic"))
    return keep.filter(pa.array(_in_sample(keep.column("id").to_pylist(), fraction, seed)))


def _embeddings(table: pa.Table, what: str) -> np.ndarray:
    column = table.column("embedding").combine_chunks()
    dim = column.type.list_size if pa.types.is_fixed_size_list(column.type) else None
    if dim is None:
        raise ValueError(f"{what}: the embedding column is not a fixed-size list")
    return column.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim).astype(np.float32)


def clustering(cfg: ClusterConfig) -> dict:
    """The settings that make the clusters (not where they are read from or written to)."""
    return {k: v for k, v in asdict(cfg).items() if k not in ("assignments", "max_unpinned", "pin", "output")}


def fit(embed_dir: str | Path, cfg: ClusterConfig) -> dict:
    """Fit the coarse (and fine) k-means on a deterministic sample of generic windows."""
    if not embedding_files(embed_dir):
        raise FileNotFoundError(f"no embeddings under {embed_dir}: run the embed stage first")
    # The generic shards are the embed output's generic/ folder: read only those, and count their
    # windows from the Parquet footers rather than with a pass over the vectors.
    files = embedding_files(Path(embed_dir) / "generic")
    total = sum(pq.read_metadata(f).num_rows for f in files)
    if total == 0:
        raise ValueError(f"{embed_dir} holds no generic windows to cluster")
    fraction = min(1.0, cfg.sample_size / total)
    ds = ray.data.read_parquet(files).select_columns(["id", "domain", "text", "embedding"])
    sample = ds.map_batches(_sample_batch, fn_kwargs={"fraction": fraction, "seed": cfg.seed},
                            batch_format="pyarrow").to_arrow_refs()
    sample = pa.concat_tables(ray.get(sample)) if sample else None
    if sample is None or sample.num_rows < cfg.k:
        raise ValueError(f"cluster.k={cfg.k} exceeds the {0 if sample is None else sample.num_rows} sampled windows")
    order = np.argsort(np.array(sample.column("id").to_pylist()))  # sample order fixed by id, not by blocks
    sample = sample.take(pa.array(order))
    x = _embeddings(sample, "embeddings sample")
    if x.shape[1] != EMBEDDING_DIM:
        raise ValueError(f"embeddings in {embed_dir} have dimension {x.shape[1]}, expected {EMBEDDING_DIM}")
    coarse = KMeans(cfg.k, n_init=cfg.n_init, random_state=cfg.seed).fit(x)
    fine_centroids = None
    if cfg.fine_k:
        fine_centroids = np.zeros((cfg.k, cfg.fine_k, x.shape[1]), np.float32)
        for c in range(cfg.k):
            members = x[coarse.labels_ == c]
            k2 = min(cfg.fine_k, len(members))
            km = KMeans(k2, n_init=cfg.n_init, random_state=cfg.seed).fit(members)
            fine_centroids[c, :k2] = km.cluster_centers_
            # Fewer members than fine_k: the extra leaves repeat the last centroid and stay empty.
            fine_centroids[c, k2:] = km.cluster_centers_[-1]
    titles = {}
    texts = sample.column("text").to_pylist()
    for c in range(cfg.k):
        idx = np.flatnonzero(coarse.labels_ == c)[: cfg.titles]
        titles[str(c)] = [" ".join(texts[i].split())[:80] for i in idx]
    return {"coarse": coarse.cluster_centers_.astype(np.float32), "fine": fine_centroids,
            "sample_windows": int(sample.num_rows), "generic_windows": int(total), "titles": titles,
            "inertia": float(coarse.inertia_)}


def assign(x: np.ndarray, coarse: np.ndarray, fine: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Nearest coarse centroid, then nearest fine centroid inside it (squared Euclidean, as k-means):
    each row's coarse cluster and leaf (``coarse × fine_k + fine``; the coarse cluster when flat)."""
    if x.shape[1] != coarse.shape[1]:
        raise ValueError(f"embedding dimension {x.shape[1]} does not match the centroids' "
                         f"{coarse.shape[1]}: were these windows embedded with another model?")
    top = _nearest(x, coarse)
    if fine is None:
        return top, top.copy()
    fine_k = fine.shape[1]
    leaf = np.empty_like(top)
    for c in np.unique(top):
        rows = top == c
        leaf[rows] = c * fine_k + _nearest(x[rows], fine[c])
    return top, leaf


def with_clusters(batch: pa.Table, coarse: np.ndarray, leaf: np.ndarray) -> pa.Table:
    out = batch.select(ASSIGNMENT_COLUMNS)
    return out.append_column("coarse", pa.array(coarse, pa.int32())).append_column("leaf", pa.array(leaf, pa.int32()))


def assign_batch(batch: pa.Table, centroids: str, digest: str) -> pa.Table:
    """A Ray Data task: every embedded window's coarse cluster and leaf. The centroids are read from the
    stage's ``centroids.npz`` by path and digest, once per worker process (``_centroids``): a plain task
    needs no actor (Ray Data's actor pools print a ``core_worker.cc`` warning about their constructor
    arguments at every start, docs/usage.md), and the arrays need not travel with every task."""
    coarse, fine = _centroids(centroids, digest)
    return with_clusters(batch, *assign(_embeddings(batch, "embedding batch"), coarse, fine))


@functools.lru_cache(maxsize=4)
def _centroids(path: str, digest: str) -> tuple[np.ndarray, np.ndarray | None]:
    return load_centroids(path, digest)


def _nearest(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    d = (x * x).sum(1, keepdims=True) - 2 * x @ centroids.T + (centroids * centroids).sum(1)
    return d.argmin(1).astype(np.int32)


@reproducible_execution()
def cluster(embed_dir: str | Path, cfg: ClusterConfig, out: str | Path) -> dict:
    """Fit, assign every window and describe the clusters; skipped when complete and current."""
    out = Path(out)
    embedded = read_manifest(embed_dir)
    if not embedded or not embedded.get("complete") or "fingerprint" not in embedded:
        raise FileNotFoundError(f"{embed_dir} has no complete embed manifest with shard fingerprints: run the "
                                "embed stage (again: outputs made before fingerprints are re-embedded)")
    verify(embed_dir, remake(embed_dir, "embed"))
    # Keyed by what was embedded, not where: a new domain embedded, a shard re-imported and re-embedded,
    # each changes the fingerprint and the clusters are made again.
    key = config_hash({"cfg": clustering(cfg), "embeddings": embedded["fingerprint"]})
    if is_complete(out, key):
        log.info(f"[cluster] {out} is complete and current")
        return read_manifest(out)
    started = time.perf_counter()
    model = fit(embed_dir, cfg)
    out.mkdir(parents=True, exist_ok=True)
    centroids = save_centroids(out / "centroids.npz", model["coarse"], model["fine"])
    ds = ray.data.read_parquet(embedding_files(embed_dir))
    assigned = ds.map_batches(assign_batch, fn_kwargs={"centroids": str(out / "centroids.npz"), "digest": centroids},
                              batch_format="pyarrow", num_cpus=0.5)
    with atomic_path(out / "assignments") as tmp:
        assigned.write_parquet(str(tmp))
    describe(out, cfg, model["titles"])
    manifest = write_manifest(out, {
        "stage": "cluster", "config_hash": key, "config": asdict(cfg), "embed_dir": str(embed_dir),
        "embeddings_fingerprint": embedded["fingerprint"],
        "sample_windows": model["sample_windows"], "generic_windows": model["generic_windows"],
        "inertia": model["inertia"], "seconds": round(time.perf_counter() - started, 1)})
    log.info(f"[cluster] k={cfg.k}" + (f"×{cfg.fine_k}" if cfg.fine_k else "") +
             f" fitted on {model['sample_windows']} windows; assignments in {out / 'assignments'}")
    return manifest


def save_centroids(path: Path, coarse: np.ndarray, fine: np.ndarray | None) -> str:
    """``centroids.npz`` (coarse, and fine when hierarchical), written atomically; returns its SHA-256."""
    arrays = {"coarse": coarse} | ({"fine": fine} if fine is not None else {})
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    return file_sha256(path)


def load_centroids(path: str | Path, digest: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The centroids ``save_centroids`` wrote, refused unless the file is the one it wrote (``digest``):
    a stage rerun meanwhile must not hand an actor other centroids than its driver assigned with."""
    if file_sha256(path) != digest:
        raise ValueError(f"{path}: not the centroids this stage wrote (its SHA-256 changed since): was the stage "
                         "run twice at once on one output folder?")
    arrays = np.load(path)
    return arrays["coarse"], arrays.get("fine")


def describe(out: Path, cfg: ClusterConfig, titles: dict[str, list[str]]) -> dict:
    """``clusters.json``: each (domain, coarse, leaf)'s windows and tokens, and the coarse clusters' titles."""
    keys = ["domain", "coarse", "leaf"]
    counted = grouped_sums(ray.data.read_parquet(str(out / "assignments")).select_columns([*keys, "n_tokens"]), keys,
                           "windows", {"n_tokens": "tokens"})
    sizes = [{"domain": r["domain"], "coarse": int(r["coarse"]), "leaf": int(r["leaf"]), "windows": int(r["windows"]),
              "tokens": int(r["tokens"])} for r in counted]
    description = {"k": cfg.k, "fine_k": cfg.fine_k, "leaves": cfg.k * max(cfg.fine_k, 1), "titles": titles,
                   "sizes": sorted(sizes, key=lambda r: (r["domain"], r["leaf"]))}
    atomic_write_json(out / "clusters.json", description)
    return description


def load_sizes(cluster_dir: str | Path) -> list[dict]:
    return json.loads((Path(cluster_dir) / "clusters.json").read_text())["sizes"]
