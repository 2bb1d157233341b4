"""DSIR (Xie et al., p-lambda/dsir): hashed n-gram importance resampling on Ray Data, the peer baseline.

Features exactly as the reference ``data-selection`` package computes them: lower-case, word-punct
tokens (``\\w+|[^\\w\\s]+``, nltk's WordPunctTokenizer), unigrams and space-joined bigrams hashed by
sha256 into ``num_buckets`` (10,000) buckets. Bag-of-n-gram distributions p_T (target: the domain's
train text) and p_R (raw: the generic text) are sums of per-batch count vectors; the log-importance
weight of a document is

    log w(x) = Σ_j count_j(x) · (log(p_T[j] + 1e-8) − log(p_R[j] + 1e-8))

Resampling is Gumbel top-k on log w (sampling without replacement ∝ w), k chosen to reach the token
budget: the keys are sorted on Ray Data and read back only until the budget is met.
"""

from __future__ import annotations

import functools
import hashlib
import re

import numpy as np
import pyarrow as pa

from slm.corpus.documents import hash_uniform

WORD_PUNCT = re.compile(r"\w+|[^\w\s]+")
EPS = 1e-8


@functools.lru_cache(maxsize=1 << 20)
def bucket(gram: str, num_buckets: int) -> int:
    return int(hashlib.sha256(gram.encode("utf-8")).hexdigest(), 16) % num_buckets


def ngram_counts(text: str, num_buckets: int = 10000, n: int = 2) -> np.ndarray:
    words = WORD_PUNCT.findall(text.lower())
    counts = np.zeros(num_buckets, dtype=np.int64)
    for w in words:
        counts[bucket(w, num_buckets)] += 1
    for k in range(2, n + 1):
        for i in range(len(words) - k + 1):
            counts[bucket(" ".join(words[i : i + k]), num_buckets)] += 1
    return counts


def _batch_counts(batch: pa.Table, num_buckets: int) -> pa.Table:
    total = np.zeros(num_buckets, dtype=np.int64)
    for text in batch.column("text").to_pylist():
        total += ngram_counts(text, num_buckets)
    return pa.table({"counts": pa.FixedSizeListArray.from_arrays(total, num_buckets)})


def fit_distribution(ds, num_buckets: int = 10000) -> np.ndarray:
    """p over buckets: per-batch counts summed (only one vector per batch reaches the driver)."""
    parts = ds.map_batches(_batch_counts, fn_kwargs={"num_buckets": num_buckets}, batch_format="pyarrow").take_all()
    total = np.sum([np.asarray(p["counts"]) for p in parts], axis=0)
    if total.sum() == 0:
        raise ValueError("DSIR: no n-grams in the text to fit")
    return total / total.sum()


def log_weights(texts: list[str], log_diff: np.ndarray) -> np.ndarray:
    return np.array([float(ngram_counts(t, len(log_diff)) @ log_diff) for t in texts])


def _score(batch: pa.Table, log_diff: np.ndarray, seed: int) -> pa.Table:
    logw = log_weights(batch.column("text").to_pylist(), log_diff)
    # Gumbel noise seeded per row by its id: the same key on every machine and every rerun.
    u = np.array([hash_uniform(f"dsir:{seed}:{i}") for i in batch.column("id").to_pylist()])
    keys = logw - np.log(-np.log(u))
    return batch.append_column("log_weight", pa.array(logw)).append_column("key", pa.array(keys))


def select(generic, target, tokens: int, seed: int = 0, num_buckets: int = 10000):
    """Return (the selected rows as a Dataset, log_diff, the key threshold)."""
    p_target = fit_distribution(target, num_buckets)
    p_raw = fit_distribution(generic, num_buckets)
    log_diff = np.log(p_target + EPS) - np.log(p_raw + EPS)
    scored = generic.map_batches(_score, fn_kwargs={"log_diff": log_diff, "seed": seed}, batch_format="pyarrow")
    scored = scored.materialize()  # scored twice below: keys once, then the selection
    got, threshold = 0, float("inf")
    for batch in scored.select_columns(["key", "n_tokens"]).sort("key", descending=True).iter_batches(
            batch_format="numpy", batch_size=4096):
        for key, n in zip(batch["key"], batch["n_tokens"], strict=True):
            if got >= tokens:
                break
            got += int(n)
            threshold = float(key)
        if got >= tokens:
            break
    chosen = scored.filter(lambda row, t=threshold: row["key"] >= t)
    return chosen, log_diff, threshold
