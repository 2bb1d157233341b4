"""`resample --domain D --tokens N --method crisp|dsir|uniform`: a generic subset aimed at domain D.

- **crisp** (SLM-is / CRISP): draw a leaf c ~ P(c | D) (the smoothed domain histogram), then a generic
  window uniformly inside c. Done as Poisson sampling, the distributed form of those multinomial draws:
  leaf c needs m_c = N·P(c|D) / (mean tokens of its windows) draws, so each of its n_c generic windows is
  kept k ~ Poisson(m_c / n_c) times (k ≥ 2: repeated, as draws with replacement are). The seed and the
  window id fix each k, so a rerun draws the same subset.
- **uniform**: the control; every generic window kept Poisson(N / generic tokens) times.
- **dsir**: hashed n-gram importance resampling (``slm.data.dsir``), without replacement.

Each is a :class:`SubsetMethod` registered by name (``SUBSETS``), as pretraining methods are: a new way to
draw a subset is one class here with ``@register``, and the pipeline, the config check and the tests
find it in the registry.

Output (``<run>/resampled/<domain>/<method>/``): Parquet rows (window id, doc id, source, text, n_tokens,
coarse, leaf, copy), and a manifest with the per-leaf weights w(c) = P(c|D)/P(c|D_g), the tokens drawn and
KL(resampled leaf histogram ‖ domain histogram).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray.data
from ray.data.expressions import col

from slm.artifacts import (
    atomic_path,
    input_digests,
    is_complete,
    read_manifest,
    remake,
    verify,
    write_manifest,
)
from slm.config import Registry, config_hash
from slm.corpus.documents import hash_seed
from slm.corpus.layout import corpus_files, domain_dir
from slm.data import dsir
from slm.data.cluster import load_sizes
from slm.data.config import EmbedConfig
from slm.data.embed import corpus_windows
from slm.data.execution import grouped_sums, reproducible_execution
from slm.data.histogram import GENERIC, counts_by_leaf, kl, smoothed
from slm.data.pinned import windowing
from slm.log import logger
from slm.progress import Progress, RemoteProgress, report

log = logger(__name__)

ROWS_PER_BLOCK = 4096


@dataclass(frozen=True)
class Draw:
    """What a subset method draws from: the generic windows (with their coarse cluster and leaf), the
    domain's and the generic leaf histograms, each leaf's windows and tokens, and where the text is."""

    domain: str
    tokens: int  # the subset's budget
    seed: int
    generic: ray.data.Dataset
    p_domain: np.ndarray
    p_generic: np.ndarray
    windows_by_leaf: np.ndarray
    tokens_by_leaf: np.ndarray
    cluster_dir: Path
    corpus_dir: Path | None
    embed: EmbedConfig | None
    dsir_min_words: int


class SubsetMethod:
    """One way to draw a generic subset aimed at a domain (``resample.methods``), registered by name:
    ``draw`` returns the chosen windows (with a ``copy`` column) and what the manifest should say of it."""

    name: str
    draws_from_assignments = True  # reads ``Draw.generic`` once (the stage's n/N line counts those windows)

    def draw(self, d: Draw) -> tuple[ray.data.Dataset, dict]:
        raise NotImplementedError


SUBSETS: Registry[SubsetMethod] = Registry("resample method", key="resample.methods")


def register(cls: type[SubsetMethod]) -> type[SubsetMethod]:
    """Class decorator: make a subset method known by its ``name`` (``resample.methods``)."""
    SUBSETS.register(cls.name, cls())
    return cls


def subset_method(name: str, key: str = "resample.methods") -> SubsetMethod:
    """The subset method called ``name``; an unknown one fails with the config key that named it."""
    return SUBSETS.get(name, key)


def _poisson(d: Draw, lam: np.ndarray) -> tuple[ray.data.Dataset, dict]:
    """Every generic window kept Poisson(λ of its leaf) times."""
    info = {"expected_tokens": float((lam * d.tokens_by_leaf).sum()),
            "mean_copies_per_window": {"max": float(lam.max()), "mean_over_used_leaves": float(lam[lam > 0].mean())}}
    return d.generic.map_batches(_poisson_copies, fn_kwargs={"lam": lam, "seed": d.seed}, batch_format="pyarrow"), info


@register
class Crisp(SubsetMethod):
    """SLM-is / CRISP: a leaf c ~ P(c | D), then a window uniformly inside c (as Poisson draws)."""

    name = "crisp"

    def draw(self, d: Draw) -> tuple[ray.data.Dataset, dict]:
        n_c, t_c = d.windows_by_leaf, d.tokens_by_leaf
        mean_tokens = np.divide(t_c, n_c, out=np.zeros_like(t_c), where=n_c > 0)
        draws = np.divide(d.tokens * d.p_domain, mean_tokens, out=np.zeros_like(d.p_domain), where=mean_tokens > 0)
        return _poisson(d, np.divide(draws, n_c, out=np.zeros_like(draws), where=n_c > 0))


@register
class Uniform(SubsetMethod):
    """The control: every generic window kept Poisson(N / generic tokens) times."""

    name = "uniform"

    def draw(self, d: Draw) -> tuple[ray.data.Dataset, dict]:
        return _poisson(d, np.where(d.windows_by_leaf > 0, d.tokens / d.tokens_by_leaf.sum(), 0.0))


@register
class Dsir(SubsetMethod):
    """DSIR: hashed n-gram importance resampling (``slm.data.dsir``), without replacement, from every
    generic window of the corpus (text, not embeddings)."""

    name = "dsir"
    draws_from_assignments = False  # it reads the corpus's text

    def draw(self, d: Draw) -> tuple[ray.data.Dataset, dict]:
        if d.corpus_dir is None or d.embed is None:
            raise ValueError("resample dsir: pass corpus_dir and embed (it selects from the corpus's text)")
        target_files = sorted(str(p) for p in domain_dir(d.corpus_dir, d.domain, "train").glob("*.parquet"))
        if not target_files:
            raise ValueError(f"resample dsir: {domain_dir(d.corpus_dir, d.domain, 'train')} holds no Parquet shards")
        placed = pq.read_table(d.cluster_dir / "assignments", columns=["id", "coarse", "leaf"],
                               filters=[("domain", "=", GENERIC)]).sort_by("id")
        everything = (corpus_windows(corpus_files(d.corpus_dir)["all"], d.embed)
                      .repartition(target_num_rows_per_block=ROWS_PER_BLOCK)
                      .map_batches(_with_clusters, fn_kwargs={"placed": placed}, batch_format="pyarrow"))
        target = corpus_windows(target_files, d.embed).repartition(target_num_rows_per_block=ROWS_PER_BLOCK)
        chosen, log_diff, threshold = dsir.select(everything, target, d.tokens, d.seed, min_words=d.dsir_min_words)
        chosen = chosen.map_batches(lambda b: b.append_column("copy", pa.array(np.zeros(b.num_rows, np.int32))),
                                    batch_format="pyarrow").drop_columns(["key"])
        return chosen, {"key_threshold": threshold, "min_words": d.dsir_min_words,
                        "generic_windows_placed": placed.num_rows}


def _poisson_copies(batch: pa.Table, lam: np.ndarray, seed: int) -> pa.Table:
    ids = batch.column("id").to_pylist()
    leaves = batch.column("leaf").to_numpy()
    # One generator per row, seeded by (seed, id): the draw does not depend on blocks or workers.
    k = np.array([np.random.default_rng(hash_seed(f"resample:{seed}:{i}")).poisson(lam[leaf])
                  for i, leaf in zip(ids, leaves, strict=True)], dtype=np.int64)
    rows = np.repeat(np.arange(len(ids)), k)
    out = batch.take(pa.array(rows, pa.int64()))
    copy = np.concatenate([np.arange(c) for c in k]) if len(k) else np.zeros(0, np.int64)
    return out.append_column("copy", pa.array(copy.astype(np.int32)))


def _counted(batch: pa.Table, progress) -> pa.Table:
    report(progress, batch.num_rows)
    return batch


@reproducible_execution()
def resample(cluster_dir: str | Path, histograms: dict, domain: str, tokens: int, method: str, out: Path,
             seed: int = 0, *, corpus_dir: str | Path | None = None, embed: EmbedConfig | None = None,
             dsir_min_words: int = 100) -> dict:
    """One method's generic subset for ``domain``. DSIR reads text, not embeddings: it selects from every
    generic window of the corpus at ``corpus_dir``, cut as ``embed`` cuts them, keeping only windows of
    at least ``dsir_min_words`` word-punct tokens as candidates (the package's ``min_example_length``)."""
    subset = subset_method(method)
    if tokens <= 0:
        raise ValueError(f"resample tokens must be positive, got {tokens}")
    if domain not in histograms["domains"]:
        raise ValueError(f"no histogram for domain {domain!r} (the histograms have {sorted(histograms['domains'])}): "
                         f"embed its train split (add it to embed.domains, or leave embed.domains empty for every "
                         f"domain), then run the cluster and histogram stages again")

    # The assignments it draws from, against what the cluster stage wrote (a zeroed file read on as data).
    verify(cluster_dir, remake(cluster_dir, "cluster"))
    started = time.perf_counter()
    # Its inputs: the assignments drawn from, the histograms aimed at, the corpus DSIR reads (its manifest
    # records every shard's SHA-256), and every setting of the draw.
    corpus_manifest = Path(corpus_dir).expanduser() / "manifest.json" if corpus_dir else None
    key = config_hash({"assignments": input_digests([Path(cluster_dir) / "assignments"]), "histograms": histograms,
                       "domain": domain, "tokens": tokens, "method": method, "seed": seed,
                       "corpus": input_digests([corpus_manifest]) if corpus_manifest and corpus_manifest.exists() else None,
                       "windowing": windowing(embed) if embed else None, "dsir_min_words": dsir_min_words})
    if is_complete(out, key):
        log.info(f"[resample] {out} is complete and current")
        return read_manifest(out)
    sizes = load_sizes(cluster_dir)
    leaves = histograms["leaves"]
    n_c = counts_by_leaf(sizes, GENERIC, leaves)
    t_c = counts_by_leaf(sizes, GENERIC, leaves, "tokens")
    p_domain = np.array(histograms["domains"][domain]["p"])
    p_generic = np.array(histograms["generic"]["p"])
    weights = np.divide(p_domain, p_generic, out=np.zeros_like(p_domain), where=p_generic > 0)
    assignments = ray.data.read_parquet(str(Path(cluster_dir) / "assignments"))

    def windows_of(d: str):
        # Ray 2.60 reads small files as a few large blocks: cut them as they stream by, so that the
        # per-window work (Poisson draws, DSIR's n-gram hashing) runs on every CPU.
        return assignments.filter(expr=col("domain") == d).repartition(target_num_rows_per_block=ROWS_PER_BLOCK)

    # The stage's n/N line with the time left (issue 46: resample printed nothing for 70-81 s): the generic
    # windows a draw from the assignments has gone through.
    total = int(n_c.sum()) if subset.draws_from_assignments else 0
    with RemoteProgress(Progress("resample", f"generic windows drawn from ({domain}, {method})", total)) as counter:
        generic = windows_of(GENERIC).map_batches(_counted, fn_kwargs={"progress": counter}, batch_format="pyarrow")
        chosen, info = subset.draw(Draw(domain, tokens, seed, generic, p_domain, p_generic, n_c, t_c,
                                        Path(cluster_dir), Path(corpus_dir) if corpus_dir else None, embed,
                                        dsir_min_words))
        with atomic_path(out / "data") as tmp:
            chosen.write_parquet(str(tmp))
    # The drawn leaf histogram (leaf −1: DSIR's picks among windows the sample did not embed).
    by_leaf = grouped_sums(ray.data.read_parquet(str(out / "data")).select_columns(["leaf", "n_tokens"]), ["leaf"],
                           "windows", {"n_tokens": "tokens"})
    drawn_windows = np.zeros(leaves, np.int64)
    for r in by_leaf:
        if r["leaf"] >= 0:
            drawn_windows[r["leaf"]] = r["windows"]
    drawn_tokens = int(sum(r["tokens"] for r in by_leaf))
    unplaced = int(sum(r["windows"] for r in by_leaf if r["leaf"] < 0))
    if drawn_windows.sum() == 0 and not unplaced:
        raise ValueError(f"resample {method} for {domain!r} drew nothing (tokens={tokens})")
    # The KL is a diagnostic of the draw, not the draw: when a small embed.fraction left every window DSIR
    # picked without a leaf, the subset stands and its KL is recorded as not measured.
    measured = drawn_windows.sum() > 0
    p_drawn = drawn_windows / drawn_windows.sum() if measured else None
    support = n_c > 0
    manifest = write_manifest(out, {
        "stage": "resample", "config_hash": key, "domain": domain, "method": method, "seed": seed,
        "tokens_target": tokens, "tokens_drawn": drawn_tokens, "windows_drawn": int(drawn_windows.sum()) + unplaced,
        # The histograms below count the drawn windows that have a leaf (all but DSIR's unembedded picks).
        "windows_drawn_unplaced": unplaced,
        "weights": {"w_c": weights.tolist(), "p_domain": p_domain.tolist(), "p_generic": p_generic.tolist()},
        "kl_resampled_to_domain": kl(p_drawn, p_domain) if measured else None,
        "kl_domain_to_resampled_smoothed": kl(p_domain, smoothed(drawn_windows, support, histograms["alpha"]))
                                           if measured else None,
        **info, "seconds": round(time.perf_counter() - started, 1),
    })
    if not measured:
        divergence = (f"KL(resampled ‖ domain) not measured: none of the {unplaced} windows drawn was embedded "
                      "(a larger embed.fraction measures it)")
    else:
        placed = f" over the {int(drawn_windows.sum())} embedded" if unplaced else ""
        divergence = f"KL(resampled ‖ domain) = {manifest['kl_resampled_to_domain']:.3f}{placed}"
    log.info(f"[resample] {domain}/{method}: {drawn_tokens} tokens in {manifest['windows_drawn']} windows, {divergence}")
    return manifest


def _with_clusters(batch: pa.Table, placed: pa.Table) -> pa.Table:
    """Each window's coarse cluster and leaf where the cluster stage placed it (it was embedded), else −1."""
    ids = placed.column("id").to_numpy(zero_copy_only=False)  # sorted
    mine = batch.column("id").to_numpy(zero_copy_only=False)
    at = np.searchsorted(ids, mine).clip(0, max(len(ids) - 1, 0))
    found = ids[at] == mine if len(ids) else np.zeros(len(mine), bool)  # none placed: no generic window embedded
    for name in ("coarse", "leaf"):
        values = np.full(len(mine), -1, np.int32)
        values[found] = placed.column(name).to_numpy()[at[found]]
        batch = batch.append_column(name, pa.array(values))
    return batch
