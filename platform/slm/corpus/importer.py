"""`slm corpus import`: a user's own corpus (JSONL, Parquet or a folder of text files) as generic or a domain.

Reading goes through Ray Data, so a path may be local, a glob, or ``s3://…`` and the import scales to
a cluster. Documents get the same treatment as the bundled corpus: normalized text, a stable content
id, empty documents dropped and counted, undecodable bytes replaced and counted, domains split into
train/valid by hash. Output is written under a temporary name and renamed into place; the corpus
manifest records the import.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import ray.data
from ray.data.aggregate import Count, Sum

from slm.artifacts import atomic_path, read_manifest, write_manifest
from slm.corpus import documents
from slm.corpus.build import SCHEMA
from slm.corpus.layout import GENERIC, domain_dir, generic_dir

TEXT_EXTENSIONS = ["txt", "md", "rst", "text"]


class CorpusImportError(ValueError):
    """Input that cannot be imported; the message names the file and column."""


def detect_format(path: str) -> str:
    p = path.rstrip("/").lower()
    if p.endswith((".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst")):
        return "jsonl"
    if p.endswith(".parquet"):
        return "parquet"
    if "://" not in p and Path(path).expanduser().is_dir():
        kinds = {q.suffix.lstrip(".") for q in Path(path).expanduser().rglob("*") if q.is_file()}
        if "parquet" in kinds:
            return "parquet"
        if kinds & {"jsonl", "json"}:
            return "jsonl"
        return "text"
    raise CorpusImportError(f"{path}: cannot tell the format; pass --format jsonl|parquet|text")


def _read(path: str, fmt: str):
    if fmt == "jsonl":
        return ray.data.read_json(path, lines=True, include_paths=True)
    if fmt == "parquet":
        return ray.data.read_parquet(path, include_paths=True)
    if fmt == "text":
        return ray.data.read_binary_files(path, include_paths=True, file_extensions=TEXT_EXTENSIONS)
    raise CorpusImportError(f"unknown format {fmt!r}; use jsonl, parquet or text")


def _normalize_batch(batch: pa.Table, text_column: str, source: str, domain: str) -> pa.Table:
    paths = batch.column("path").to_pylist()
    if "bytes" in batch.column_names and text_column not in batch.column_names:
        raw_texts = batch.column("bytes").to_pylist()  # a folder of text files: one file, one document
    elif text_column in batch.column_names:
        raw_texts = batch.column(text_column).to_pylist()
    else:
        columns = [c for c in batch.column_names if c != "path"]
        raise CorpusImportError(f"{paths[0]}: no column {text_column!r} (columns: {columns}); "
                           "pass --text-column")
    texts, bad, replaced, empty = [], [], [], []
    for i, raw in enumerate(raw_texts):
        if raw is not None and not isinstance(raw, (str, bytes)):
            raise CorpusImportError(f"{paths[i]}: a row's {text_column!r} is {type(raw).__name__}, not text")
        counts = documents.SourceCounts()
        text = documents.normalize(documents.decode(raw or "", counts=counts))
        texts.append(text)
        bad.append(counts.decode_errors)
        replaced.append(counts.replaced_chars)
        empty.append(not text)
    return pa.table({
        "id": [documents.doc_id(t) for t in texts],
        "text": texts,
        "source": [source] * len(texts),
        "domain": [domain] * len(texts),
        "n_chars": np.array([len(t) for t in texts], dtype=np.int64),
        "_empty": empty,
        "_decode_errors": np.array(bad, dtype=np.int64),
        "_replaced_chars": np.array(replaced, dtype=np.int64),
        "_path": paths,
    })


def import_corpus(
    path: str,
    corpus_dir: str | Path,
    domain: str | None = None,
    *,
    fmt: str | None = None,
    text_column: str = "text",
    source: str | None = None,
    valid_fraction: float = 0.05,
    replace: bool = False,
) -> dict:
    """Import ``path`` into ``corpus_dir`` as the generic corpus (``domain=None``) or a domain."""
    corpus_dir = Path(corpus_dir).expanduser()
    role = domain or GENERIC
    if role != GENERIC and not role.replace("-", "").replace("_", "").isalnum():
        raise CorpusImportError(f"domain name {role!r} must be letters, digits, '-' or '_'")
    targets = [generic_dir(corpus_dir)] if role == GENERIC else [
        domain_dir(corpus_dir, role, s) for s in ("train", "valid")]
    if any(t.exists() for t in targets) and not replace:
        raise CorpusImportError(f"{targets[0].parent if role != GENERIC else targets[0]} already exists; "
                           "pass --replace to overwrite it")
    fmt = fmt or detect_format(path)
    source = source or Path(path.rstrip("/")).name
    started = time.perf_counter()

    ds = _read(path, fmt).map_batches(
        _normalize_batch, fn_kwargs={"text_column": text_column, "source": source, "domain": role},
        batch_format="pyarrow")
    kept = ds.map_batches(_drop_empty, batch_format="pyarrow")
    counts = ds.aggregate(Count(alias_name="records"), Sum("_empty", alias_name="empty"),
                          Sum("_decode_errors", alias_name="decode_errors"),
                          Sum("_replaced_chars", alias_name="replaced_chars"))
    counts = {k: int(v or 0) for k, v in counts.items()}
    if counts["records"] == counts["empty"]:
        raise CorpusImportError(f"{path}: no non-empty documents ({counts['records']} records read)")

    columns = list(SCHEMA.names)
    summary = {}
    for target in targets:
        split = target.name if role != GENERIC else "all"
        part = kept
        if role != GENERIC:
            want_valid = split == "valid"
            part = kept.map_batches(_split_filter, fn_kwargs={"valid": want_valid, "fraction": valid_fraction},
                                    batch_format="pyarrow")
        with atomic_path(target) as tmp:
            part.select_columns(columns).write_parquet(str(tmp))
            written = sorted(tmp.glob("*.parquet")) if tmp.is_dir() else []
            if not sum(pq.read_metadata(f).num_rows for f in written):
                raise CorpusImportError(f"{path}: the {split} split of domain {role!r} would be empty "
                                   f"(valid_fraction={valid_fraction}); import more documents")
        files = sorted(target.glob("*.parquet"))
        docs = sum(pq.read_metadata(f).num_rows for f in files)
        summary[split] = {"documents": docs, "files": [str(f.relative_to(corpus_dir)) for f in files],
                          "bytes": sum(os.path.getsize(f) for f in files)}
    record = {"path": path, "format": fmt, "text_column": text_column, "source": source, "role": role,
              **counts, "splits": summary, "seconds": round(time.perf_counter() - started, 1)}
    manifest = read_manifest(corpus_dir) or {"stage": "corpus"}
    # The bundled build's description of this role no longer holds: the import replaced it.
    if role == GENERIC:
        manifest.pop(GENERIC, None)
    else:
        manifest.get("domains", {}).pop(role, None)
    manifest.setdefault("imports", {})[role] = record
    write_manifest(corpus_dir, manifest)
    return record


def _drop_empty(batch: pa.Table) -> pa.Table:
    return batch.filter(pc.invert(batch.column("_empty")))


def _split_filter(batch: pa.Table, valid: bool, fraction: float) -> pa.Table:
    mask = [documents.in_valid_split(i, fraction) == valid for i in batch.column("id").to_pylist()]
    return batch.filter(pa.array(mask, type=pa.bool_()))
