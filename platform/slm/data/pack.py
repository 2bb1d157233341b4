"""`pack`: tokenize windows and pack them into fixed-length sequences that keep their cluster ids.

The cluster-aware trainers (SLM-mix, SLM-pn, Soup-of-Experts) sample sequences by coarse cluster and by
leaf, so a packed sequence must come from one cluster: windows are grouped by (domain, leaf) on Ray Data
(``groupby(...).map_groups``), joined with ``<|endoftext|>`` and cut into rows of ``seq_len + 1`` tokens
(inputs and shifted targets). Tokens are uint16 when the vocabulary allows. The tail of each group
(< seq_len + 1 tokens) is dropped: at most one row's worth per leaf.

Each window is tokenized with the trained BPE *before* the shuffle, in streaming map tasks, so that what
the shuffle moves and holds is token ids (2 bytes a token) rather than text (~4 bytes a token here) and the
grouping's reducers only join arrays (issue 46: the pack of one domain's CRISP subset and the generic set
peaked at 13.5 GiB of 24). A window's tokens do not depend on the batch it is tokenized in, so the packed
rows are the same bytes as when the groups tokenized their text.

Rows: ``tokens`` (uint16 × (seq_len+1)), ``domain``, ``coarse``, ``leaf``. Training reads them as
memory-mapped arrays (``slm.train.data.materialize``): its samplers need random access by cluster.
"""

from __future__ import annotations

import time
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray.data
from ray.data.expressions import col

from slm.artifacts import atomic_path, file_sha256, input_digests, is_complete, read_manifest, write_manifest
from slm.config import config_hash
from slm.data import tokenizers
from slm.data.bpe import EOT
from slm.data.execution import reproducible_execution
from slm.log import logger
from slm.progress import Progress, RemoteProgress, report

log = logger(__name__)


def pack_texts(tok, texts: list[str], seq_len: int) -> np.ndarray:
    """Texts in this order, tokenized, each followed by ``<|endoftext|>``, cut into rows of ``seq_len + 1``
    tokens (uint16 when the vocabulary allows); the tail shorter than a row is dropped."""
    eot = tok.token_to_id(EOT)
    ids = [np.asarray(e.ids, dtype=np.int64) for e in tok.encode_batch(texts, add_special_tokens=False)]
    stream = np.concatenate([np.append(i, eot) for i in ids]) if ids else np.zeros(0, np.int64)
    row = seq_len + 1
    n_rows = len(stream) // row
    dtype = np.uint16 if tok.get_vocab_size() <= 65536 else np.int32
    return stream[: n_rows * row].astype(dtype).reshape(n_rows, row)


def _tokenize_windows(batch: pa.Table, tokenizer: str, progress) -> pa.Table:
    """Each window's tokens followed by ``<|endoftext|>`` (a list column replacing ``text``)."""
    report(progress, batch.num_rows)  # a Counter actor (slm.progress): the stage's n/N line
    tok = tokenizers.load(tokenizer)
    eot = tok.token_to_id(EOT)
    dtype = pa.uint16() if tok.get_vocab_size() <= 65536 else pa.int32()
    encoded = tok.encode_batch(batch.column("text").to_pylist(), add_special_tokens=False)
    tokens = pa.array([[*e.ids, eot] for e in encoded], pa.list_(dtype))
    return batch.drop_columns(["text"]).append_column("tokens", tokens)


def _pack_group(batch: pa.Table, seq_len: int) -> pa.Table:
    row = seq_len + 1
    if batch.num_rows:
        # The group's windows in an order that is a function of the windows alone: sorted by id, then a
        # permutation seeded by the group (so that a resampled set's repeated windows are not joined
        # end to end). The order they arrive in is not: Ray Data's actor pools handed blocks on out of
        # order in one of two identical runs even with preserve_order (issue 16, tests/test_reproducible).
        ids = batch.column("id").to_pylist()
        seed = zlib.crc32(f"{batch.column('domain')[0].as_py()}/{batch.column('leaf')[0].as_py()}".encode())
        order = np.random.default_rng(seed).permutation(len(ids))
        by_id = sorted(range(len(ids)), key=ids.__getitem__)
        windows = batch.column("tokens").combine_chunks()
        stream = pa.concat_arrays([windows[by_id[i]].values for i in order]).to_numpy()
    else:
        stream = np.zeros(0, np.uint16)
    n_rows = len(stream) // row
    tokens = stream[: n_rows * row].reshape(n_rows, row)
    first = {k: batch.column(k)[0].as_py() for k in ("domain", "coarse", "leaf")} if batch.num_rows else {}
    arrow_type = batch.schema.field("tokens").type.value_type if batch.num_rows else pa.uint16()
    return pa.table({
        "tokens": pa.FixedSizeListArray.from_arrays(pa.array(tokens.reshape(-1), arrow_type), seq_len + 1),
        "domain": pa.array([first.get("domain")] * n_rows, pa.string()),
        "coarse": pa.array([first.get("coarse")] * n_rows, pa.int32()),
        "leaf": pa.array([first.get("leaf")] * n_rows, pa.int32()),
    })


WINDOW_SCHEMA = pa.schema([("id", pa.string()), ("text", pa.string()), ("domain", pa.string()), ("coarse", pa.int32()),
                           ("leaf", pa.int32())])


def _conform(batch: pa.Table) -> pa.Table:
    """One schema for every block: the shuffle before ``map_groups`` concatenates blocks of different
    inputs (assignments write int64 cluster ids, a resampled set may hold another width)."""
    return batch.select(WINDOW_SCHEMA.names).cast(WINDOW_SCHEMA)


def _without_clusters(batch: pa.Table) -> pa.Table:
    missing = pa.array([-1] * batch.num_rows, pa.int32())
    return batch.append_column("coarse", missing).append_column("leaf", missing)


@reproducible_execution()
def pack(windows_path: str | Path | list[str], tokenizer_json: str | Path, seq_len: int, out: Path,
         domain: str | None = None) -> dict:
    """Pack the windows under ``windows_path`` (assignments or a resampled set; or raw corpus files,
    whose sequences get cluster ids −1) into ``out``; ``domain`` keeps only that domain's windows."""
    started = time.perf_counter()
    sources = windows_path if isinstance(windows_path, list) else [windows_path]
    key = config_hash({"inputs": input_digests(sources), "tokenizer": file_sha256(tokenizer_json),
                       "seq_len": seq_len, "domain": domain})
    if is_complete(out, key):
        log.info(f"[pack] {out} is complete and current")
        return read_manifest(out)
    ds = ray.data.read_parquet(windows_path if isinstance(windows_path, list) else str(windows_path))
    if "coarse" not in ds.schema().names:
        # Raw corpus documents (a valid split): no cluster ids, so one group per domain.
        ds = ds.map_batches(_without_clusters, batch_format="pyarrow")
    ds = ds.map_batches(_conform, batch_format="pyarrow")
    if domain is not None:
        ds = ds.filter(expr=col("domain") == domain)
    files = [f for p in map(Path, sources) for f in ([p] if p.is_file() else sorted(p.rglob("*.parquet")))]
    windows = (sum(pq.read_metadata(f).num_rows for f in files) if domain is None else  # the progress line's N
               sum(pq.read_table(f, columns=["domain"]).column("domain").to_pylist().count(domain) for f in files))
    with RemoteProgress(Progress("pack", f"windows tokenized ({out.name})", windows)) as counter:
        ds = ds.map_batches(_tokenize_windows, fn_kwargs={"tokenizer": str(tokenizer_json), "progress": counter},
                            batch_format="pyarrow")
        packed = ds.groupby(["domain", "leaf"]).map_groups(_pack_group, fn_kwargs={"seq_len": seq_len},
                                                           batch_format="pyarrow")
        with atomic_path(out / "data") as tmp:
            packed.write_parquet(str(tmp))
    stats = ray.data.read_parquet(str(out / "data")).select_columns(["coarse"])
    rows = stats.count()
    if rows == 0:
        raise ValueError(f"pack: no sequence of {seq_len + 1} tokens could be made from {windows_path}")
    return write_manifest(out, {"stage": "pack", "config_hash": key, "input": str(windows_path), "domain": domain,
                                "tokenizer": str(tokenizer_json),
                                "seq_len": seq_len, "sequences": rows, "tokens": rows * (seq_len + 1),
                                "seconds": round(time.perf_counter() - started, 1)})
