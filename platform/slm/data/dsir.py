"""DSIR (Xie et al., p-lambda/dsir): hashed n-gram importance resampling on Ray Data, the peer baseline.

Features exactly as the reference ``data-selection`` package computes them: lower-case, word-punct
tokens (``\\w+|[^\\w\\s]+``, nltk's WordPunctTokenizer), unigrams and space-joined bigrams hashed by
sha256 into ``num_buckets`` (10,000) buckets. Bag-of-n-gram distributions p_T (target: the domain's
train text) and p_R (raw: the generic text) are sums of per-batch bucket counts; the log-importance
weight of a document is

    log w(x) = Σ_j count_j(x) · (log(p_T[j] + 1e-8) − log(p_R[j] + 1e-8))

Resampling is Gumbel top-k on log w (sampling without replacement ∝ w), k chosen to reach the token
budget: the keys are sorted on Ray Data and read back only until the budget is met.

Speed: a document is a list of bucket ids (``buckets``, list<uint16>), never a dense 10,000-vector: a
batch's counts are one ``bincount`` and its weights one gather and ``bincount`` over the concatenated
ids. The generic windows are hashed once, kept (materialized) with their buckets, then fitted on and
scored; the reference package hashes them twice. The sha256 of each distinct n-gram is computed once
per worker process (a bounded dict; text is Zipfian, so most n-grams repeat), where the reference
package hashes every occurrence.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from ray.data.expressions import col

from slm.corpus.documents import hash_uniform

WORD_PUNCT = re.compile(r"\w+|[^\w\s]+")
EPS = 1e-8
CACHE_LIMIT = 2_000_000  # n-grams whose bucket a worker remembers (~0.3 GB at most), then starts over
_buckets: dict[int, dict[str, int]] = {}  # num_buckets → n-gram → bucket


def bucket_ids(text: str, num_buckets: int = 10000, n: int = 2) -> list[int]:
    """The bucket of every unigram and n-gram (up to ``n``) of ``text``, in order."""
    words = WORD_PUNCT.findall(text.lower())
    grams = words + [" ".join(words[i : i + k]) for k in range(2, n + 1) for i in range(len(words) - k + 1)]
    known = _buckets.setdefault(num_buckets, {})
    if len(known) > CACHE_LIMIT:
        known.clear()
    ids = list(map(known.get, grams))
    if None in ids:  # n-grams this worker has not hashed yet
        for i, gram in enumerate(grams):
            if ids[i] is None:
                ids[i] = known[gram] = int.from_bytes(hashlib.sha256(gram.encode()).digest(), "big") % num_buckets
    return ids


def batch_bucket_ids(texts: list[str], num_buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """All bucket ids of a batch, concatenated, and how many belong to each document."""
    flat, lengths = [], []
    for text in texts:
        ids = bucket_ids(text, num_buckets)
        flat.extend(ids)
        lengths.append(len(ids))
    return np.array(flat, dtype=np.int64), np.array(lengths, dtype=np.int64)


def ngram_counts(text: str, num_buckets: int = 10000) -> np.ndarray:
    """The dense count vector of one document (the reference package's feature vector)."""
    return np.bincount(np.asarray(bucket_ids(text, num_buckets), dtype=np.int64), minlength=num_buckets)


def weights_of(flat: np.ndarray, lengths: np.ndarray, log_diff: np.ndarray) -> np.ndarray:
    """log w of each document from its concatenated bucket ids: one gather, one sum per document."""
    doc = np.repeat(np.arange(len(lengths)), lengths)
    return np.bincount(doc, weights=log_diff[flat], minlength=len(lengths))


def log_weights(texts: list[str], log_diff: np.ndarray) -> np.ndarray:
    return weights_of(*batch_bucket_ids(texts, len(log_diff)), log_diff)


def _featurize(batch: pa.Table, num_buckets: int) -> pa.Table:
    flat, lengths = batch_bucket_ids(batch.column("text").to_pylist(), num_buckets)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    dtype = pa.uint16() if num_buckets <= 1 << 16 else pa.uint32()
    return batch.append_column("buckets", pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, dtype)))


def _features(batch: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    buckets = batch.column("buckets").combine_chunks()
    flat = buckets.flatten().to_numpy().astype(np.int64)
    return flat, pc.list_value_length(buckets).to_numpy(zero_copy_only=False).astype(np.int64)


def _batch_counts(batch: pa.Table, num_buckets: int) -> pa.Table:
    flat, _ = _features(batch)
    total = np.bincount(flat, minlength=num_buckets)
    return pa.table({"counts": pa.FixedSizeListArray.from_arrays(total, num_buckets)})


def featurize(ds, num_buckets: int = 10000):
    """Each row with its n-grams' buckets (``buckets``: list<uint16>), hashed once."""
    return ds.map_batches(_featurize, fn_kwargs={"num_buckets": num_buckets}, batch_format="pyarrow")


def fit_distribution(features, num_buckets: int = 10000) -> np.ndarray:
    """p over buckets: per-batch counts summed (only one vector per batch reaches the driver)."""
    parts = features.map_batches(_batch_counts, fn_kwargs={"num_buckets": num_buckets},
                                 batch_format="pyarrow").take_all()
    total = np.sum([np.asarray(p["counts"]) for p in parts], axis=0)
    if total.sum() == 0:
        raise ValueError("DSIR: no n-grams in the text to fit")
    return total / total.sum()


def _score(batch: pa.Table, log_diff: np.ndarray, seed: int, min_words: int) -> pa.Table:
    flat, lengths = _features(batch)
    logw = weights_of(flat, lengths, log_diff)
    # Gumbel noise seeded per row by its id: the same key on every machine and every rerun.
    u = np.array([hash_uniform(f"dsir:{seed}:{i}") for i in batch.column("id").to_pylist()])
    keys = logw - np.log(-np.log(u))
    # A document of L words has L unigrams and L − 1 bigrams: L = (ids + 1) // 2, the package's length.
    short = (lengths + 1) // 2 < min_words
    keys[short] = -np.inf  # never a candidate, as the package's perexample_metadata_filter
    return (batch.drop_columns(["buckets"]).append_column("log_weight", pa.array(logw))
            .append_column("key", pa.array(keys)))


def select(generic, target, tokens: int, seed: int = 0, num_buckets: int = 10000, min_words: int = 100):
    """Return (the selected rows as a Dataset, log_diff, the key threshold). Every generic window counts
    in p_R; only windows of at least ``min_words`` word-punct tokens are candidates: the package's
    ``min_example_length`` (default 100). With 0, short windows — one-line fortunes, a document's last
    few words — are picked for a few strongly weighted n-grams."""
    p_target = fit_distribution(featurize(target, num_buckets), num_buckets)
    # The generic windows are hashed once: fitted on, then scored (twice, cheaply: keys, then selection).
    features = featurize(generic, num_buckets).materialize()
    p_raw = fit_distribution(features, num_buckets)
    log_diff = np.log(p_target + EPS) - np.log(p_raw + EPS)
    scored = features.map_batches(_score, fn_kwargs={"log_diff": log_diff, "seed": seed, "min_words": min_words},
                                  batch_format="pyarrow")
    got, threshold = 0, float("inf")
    candidates = scored.select_columns(["key", "n_tokens"]).filter(expr=col("key") > float("-inf"))  # long enough
    for batch in candidates.sort("key", descending=True).iter_batches(batch_format="numpy", batch_size=4096):
        for key, n in zip(batch["key"], batch["n_tokens"], strict=True):
            if got >= tokens:
                break
            got += int(n)
            threshold = float(key)
        if got >= tokens:
            break
    chosen = scored.filter(expr=col("key") >= threshold)
    return chosen, log_diff, threshold
