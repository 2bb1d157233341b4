"""Corpus statistics on Ray Data: documents, characters and tokens per (domain, split, source).

The first job every user runs; it proves that the corpus reads and tokenizes across the cluster.
Shards are read in parallel and tokenized in ``map_batches`` tasks, each batch reduced to its own few
rows of counts per (domain, split, source) — summed on the driver, so the driver never holds the
documents and no shuffle runs. (A groupby-aggregate ran Ray Data's hash shuffle, 200 partitions of
aggregator actors on a 2-CPU Ray, whose shutdown left a SIGABRT dump in a stage that succeeded: issue 46.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray.data

from slm.config import config_hash
from slm.corpus.layout import corpus_files, verify_corpus
from slm.data import tokenizers
from slm.data.config import StatsConfig
from slm.data.execution import grouped_sums, reproducible_execution
from slm.progress import Progress, RemoteProgress, report

KEYS = ["domain", "split", "source"]


def _count_tokens(batch: pa.Table, tokenizer: str, progress) -> pa.Table:
    """The batch's documents with their tokens counted (``n_tokens``)."""
    texts = batch.column("text").to_pylist()
    encoded = tokenizers.load(tokenizer).encode_batch(texts, add_special_tokens=False)
    report(progress, len(texts))  # a Counter actor (slm.progress)
    return pa.table({**{k: batch.column(k) for k in KEYS}, "n_chars": batch.column("n_chars").cast(pa.int64()),
                     "n_tokens": pa.array(np.fromiter((len(e.ids) for e in encoded), np.int64, len(encoded)))})


def stats_key(corpus_dir: str | Path, cfg: StatsConfig) -> str:
    """What the counts depend on: the settings, the corpus's files (as its manifest records them; else
    hashed here) and the tokenizer's file when it is one. The records are checked against the disk by
    whoever reads the corpus next (``corpus_stats``, or the stage that skips): once, not here too."""
    from slm.artifacts import input_digests, read_manifest

    manifest = read_manifest(corpus_dir)
    recorded = manifest.get("files") if manifest else None
    corpus = recorded if recorded is not None else input_digests(sorted(p for v in corpus_files(corpus_dir).values()
                                                                         for p in v))
    tokenizer = input_digests([cfg.tokenizer]) if cfg.tokenizer != tokenizers.EMBEDDER else cfg.tokenizer
    return config_hash({"stats": cfg, "corpus": corpus, "tokenizer": tokenizer})


@reproducible_execution()
def corpus_stats(corpus_dir: str | Path, tokenizer: str = tokenizers.EMBEDDER, batch_size: int = 256) -> list[dict]:
    """One row per (domain, split, source): documents, chars, tokens and chars per token."""
    verify_corpus(corpus_dir)
    files = corpus_files(corpus_dir)
    datasets = [
        ray.data.read_parquet(paths).select_columns(["text", "source", "domain", "n_chars"])
        .map_batches(lambda b, s=split: b.append_column("split", pa.array([s] * b.num_rows)),
                     batch_format="pyarrow")
        for split, paths in files.items()
    ]
    ds = datasets[0].union(*datasets[1:]) if len(datasets) > 1 else datasets[0]
    documents = sum(pq.read_metadata(p).num_rows for paths in files.values() for p in paths)
    with RemoteProgress(Progress("stats", "documents tokenized", documents)) as counter:
        counted = ds.map_batches(_count_tokens, fn_kwargs={"tokenizer": tokenizer, "progress": counter},
                                 batch_size=batch_size, batch_format="pyarrow")
        rows = grouped_sums(counted, KEYS, "documents", {"n_chars": "chars", "n_tokens": "tokens"})
    out = []
    for r in sorted(rows, key=lambda r: (r["domain"] != "generic", r["domain"], r["split"], r["source"])):
        out.append({k: (int(v) if isinstance(v, np.integer) else v) for k, v in r.items()})
        out[-1]["chars_per_token"] = round(out[-1]["chars"] / max(out[-1]["tokens"], 1), 3)
    return out


def format_table(rows: list[dict]) -> str:
    header = f"{'domain':12s} {'split':6s} {'source':14s} {'documents':>10s} {'chars':>13s} {'tokens':>12s}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['domain']:12s} {r['split']:6s} {r['source']:14s} {r['documents']:10d} "
                     f"{r['chars']:13,d} {r['tokens']:12,d}")
    lines.append("-" * len(header))
    lines.append(f"{'total':34s} {sum(r['documents'] for r in rows):10d} "
                 f"{sum(r['chars'] for r in rows):13,d} {sum(r['tokens'] for r in rows):12,d}")
    return "\n".join(lines)
