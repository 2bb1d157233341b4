"""`slm corpus import`: a user's own corpus (JSONL, Parquet or a folder of text files) as generic or a domain.

Reading goes through Ray Data, so a path may be local, a glob, or ``s3://…`` and the import scales to
a cluster. Documents get the same treatment as the bundled corpus: normalized text, a stable content
id, empty documents dropped and counted, undecodable bytes replaced and counted, domains split into
train/valid by hash. Output is written under a temporary name and renamed into place; the corpus
manifest records the import.
"""

from __future__ import annotations

import glob
import json
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


FORMATS = {"jsonl": (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst"), "parquet": (".parquet",),
           "text": tuple(f".{e}" for e in TEXT_EXTENSIONS)}


def _format_of(name: str) -> str | None:
    lower = name.lower()
    return next((fmt for fmt, suffixes in FORMATS.items() if lower.endswith(suffixes)), None)


def input_files(path: str, fmt: str | None = None) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """What ``slm corpus import PATH`` reads, checked before Ray starts: the files by format and the files
    passed over with why. A folder gives every supported file below it, whatever their formats (each read
    as its own); a glob its matches; a remote URI (``s3://…``) is handed to Ray Data as it is. A missing
    path, a glob that matches nothing, a JSON array (not JSON Lines) and nothing readable fail here,
    naming the path."""
    if "://" in path:  # a remote file says its format by its name; a remote folder needs --format
        kind = fmt or _format_of(path.rstrip("/"))
        if kind not in ("jsonl", "parquet") and not fmt:
            raise CorpusImportError(f"{path}: cannot tell the format; pass --format jsonl|parquet|text")
        return {kind: [path]}, []
    if any(c in path for c in "*?["):
        matches = sorted(glob.glob(os.path.expanduser(path), recursive=True))
        if not matches:
            raise CorpusImportError(f"{path}: the pattern matches no file")
        candidates = [Path(m) for m in matches if Path(m).is_file()]
    else:
        root = Path(path).expanduser()
        if not root.exists():
            raise CorpusImportError(f"{path}: no such file or folder")
        candidates = sorted(q for q in root.rglob("*") if q.is_file()) if root.is_dir() else [root]
    files: dict[str, list[str]] = {}
    skipped: list[tuple[str, str]] = []
    for f in candidates:
        kind = fmt or _format_of(f.name)
        if kind is None:
            skipped.append((str(f), f"not a supported file (JSON Lines, Parquet or {'/'.join(TEXT_EXTENSIONS)})"))
            continue
        if kind == "jsonl" and not f.name.lower().endswith((".gz", ".zst")):
            with open(f, "rb") as handle:
                head = handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")  # a BOM, blank lines
            if not head and f.stat().st_size < 4096:
                skipped.append((str(f), "empty"))
                continue
            if head.startswith(b"["):
                raise CorpusImportError(f"{f}: a JSON array, not JSON Lines (one object per line); convert it "
                                        f"with: jq -c '.[]' {f.name} > {f.stem}.jsonl")
        files.setdefault(kind, []).append(str(f))
    if not files:
        raise CorpusImportError(f"{path}: nothing to import ("
                                + "; ".join(f"{Path(f).name}: {why}" for f, why in skipped[:5]) + ")")
    return files, skipped


def diagnose_jsonl(path: str | Path, text_column: str = "text") -> str | None:
    """The first thing in a JSON Lines file that stops a reader, as ``FILE:LINE: what``, or None.
    Ray Data's JSON reader (pandas / Arrow underneath) fails on such a file with a long traceback that
    names neither; the import runs this on its JSON Lines inputs when the read fails."""
    path = Path(path)
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                return (f"{path}:1: starts with a UTF-8 byte-order mark, which the JSON reader refuses; remove "
                        f"it (e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' {path.name})")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                return f"{path}:{number}: not UTF-8 (byte {err.start}: {raw[err.start:err.start + 4]!r})"
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                return f"{path}:{number}: not JSON ({err.msg} at column {err.colno})"
            if not isinstance(record, dict):
                return f"{path}:{number}: a JSON {type(record).__name__}, not an object with a {text_column!r} field"
    return None


def _read(paths: str | list[str], fmt: str):
    if fmt == "jsonl":
        return ray.data.read_json(paths, lines=True, include_paths=True)
    if fmt == "parquet":
        return ray.data.read_parquet(paths, include_paths=True)
    if fmt == "text":
        return ray.data.read_binary_files(paths, include_paths=True)
    raise CorpusImportError(f"unknown format {fmt!r}; use jsonl, parquet or text")


def _read_all(files: dict[str, list[str]], **normalize):
    """Every format's files, each through its reader and normalized to the corpus schema, as one dataset
    (normalized first: a batch may join blocks, and the formats' raw columns differ)."""
    datasets = [_read(paths, fmt).map_batches(_normalize_batch, fn_kwargs=normalize, batch_format="pyarrow")
                for fmt, paths in sorted(files.items())]
    return datasets[0].union(*datasets[1:]) if len(datasets) > 1 else datasets[0]


def _normalize_batch(batch: pa.Table, text_column: str, source: str, domain: str,
                     max_chars: int | None = None) -> pa.Table:
    """A batch of records as corpus rows: decoded (undecodable bytes replaced and counted), normalized,
    hashed; a record longer than ``max_chars`` split at paragraph boundaries into several documents, as
    the bundled build splits its sources (``_first`` marks each record's first piece, so that the
    counts stay per record)."""
    paths = batch.column("path").to_pylist()
    if "bytes" in batch.column_names and text_column not in batch.column_names:
        raw_texts = batch.column("bytes").to_pylist()  # a folder of text files: one file, one document
    elif text_column in batch.column_names:
        raw_texts = batch.column(text_column).to_pylist()
    else:
        columns = [c for c in batch.column_names if c != "path"]
        raise CorpusImportError(f"{paths[0]}: no column {text_column!r} (columns: {columns}); "
                           "pass --text-column")
    texts, first, bad, replaced, empty, where = [], [], [], [], [], []
    for i, raw in enumerate(raw_texts):
        if raw is not None and not isinstance(raw, (str, bytes)):
            raise CorpusImportError(f"{paths[i]}: a row's {text_column!r} is {type(raw).__name__}, not text")
        counts = documents.SourceCounts()
        text = documents.normalize(documents.decode(raw or "", counts=counts))
        pieces = documents.split_long(text, max_chars) if text and max_chars else [text]
        for k, piece in enumerate(pieces or [""]):
            texts.append(piece)
            first.append(k == 0)
            bad.append(counts.decode_errors if k == 0 else 0)
            replaced.append(counts.replaced_chars if k == 0 else 0)
            empty.append(not piece)
            where.append(paths[i])
    return pa.table({
        "id": [documents.doc_id(t) for t in texts],
        "text": texts,
        "source": [source] * len(texts),
        "domain": [domain] * len(texts),
        "n_chars": np.array([len(t) for t in texts], dtype=np.int64),
        "_first": pa.array(first, pa.bool_()),
        "_empty": pa.array(empty, pa.bool_()),
        "_decode_errors": np.array(bad, dtype=np.int64),
        "_replaced_chars": np.array(replaced, dtype=np.int64),
        "_path": where,
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
    max_doc_chars: int | None = 8000,
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
    inputs, skipped = input_files(path, fmt)
    for name, why in skipped:
        print(f"[import] skipped {name}: {why}", flush=True)
    source = source or Path(path.rstrip("/")).name
    started = time.perf_counter()

    ds = _read_all(inputs, text_column=text_column, source=source, domain=role, max_chars=max_doc_chars)
    # Empty documents dropped; a document given twice (the same normalized text, so the same id) kept once,
    # as the bundled build keeps it: the written splits' total says how many went.
    kept = ds.map_batches(_drop_empty, batch_format="pyarrow").groupby("id").map_groups(
        _first_of_group, batch_format="pyarrow")
    try:
        counts = ds.aggregate(Sum("_first", alias_name="records"), Count(alias_name="rows"),
                              Sum("_empty", alias_name="empty"), Sum("_decode_errors", alias_name="decode_errors"),
                              Sum("_replaced_chars", alias_name="replaced_chars"))
        # Materialized once (in the object store, spilled to disk when large): a domain's two splits read
        # it without shuffling the corpus twice.
        kept = kept.materialize()
    except CorpusImportError:
        raise
    except Exception as err:  # a reader's failure deep in Ray Data: say which file and line, if we can
        found = next(filter(None, (diagnose_jsonl(f, text_column) for f in inputs.get("jsonl", [])
                                   if "://" not in f and not f.endswith((".gz", ".zst")))), None)
        if found is None:
            raise
        raise CorpusImportError(f"{found}; nothing was imported") from err
    counts = {k: int(v or 0) for k, v in counts.items()}
    counts["split_pieces"] = counts.pop("rows") - counts["records"]  # documents made by splitting long records
    if counts["records"] == counts["empty"]:
        raise CorpusImportError(f"{path}: no non-empty documents ({counts['records']} records read)")

    # The whole role is staged, then swapped in with one rename: a split that comes out empty (or any
    # failure) leaves the corpus as it was — never a new train split beside an old valid one.
    columns = list(SCHEMA.names)
    folder = generic_dir(corpus_dir) if role == GENERIC else targets[0].parent
    with atomic_path(folder) as staged:
        for target in targets:
            split = target.name if role != GENERIC else "all"
            part = kept
            if role != GENERIC:
                part = kept.map_batches(_split_filter, fn_kwargs={"valid": split == "valid", "fraction": valid_fraction},
                                        batch_format="pyarrow")
            out = staged if role == GENERIC else staged / split
            part.select_columns(columns).write_parquet(str(out))
            if not sum(pq.read_metadata(f).num_rows for f in out.glob("*.parquet")):
                raise CorpusImportError(f"{path}: the {split} split of domain {role!r} would be empty "
                                        f"(valid_fraction={valid_fraction}); import more documents; the corpus "
                                        "is left as it was")
    summary = {}
    for target in targets:
        files = sorted(target.glob("*.parquet"))
        summary[target.name if role != GENERIC else "all"] = {
            "documents": sum(pq.read_metadata(f).num_rows for f in files),
            "files": [str(f.relative_to(corpus_dir)) for f in files], "bytes": sum(os.path.getsize(f) for f in files)}
    written = sum(split["documents"] for split in summary.values())
    counts["duplicates"] = counts["records"] - counts["empty"] + counts["split_pieces"] - written
    record = {"path": path, "format": "+".join(sorted(inputs)), "files": sum(len(v) for v in inputs.values()),
              "skipped": [{"file": f, "why": why} for f, why in skipped], "text_column": text_column,
              "source": source, "role": role,
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


def _first_of_group(group: pa.Table) -> pa.Table:
    return group.slice(0, 1)


def _drop_empty(batch: pa.Table) -> pa.Table:
    return batch.filter(pc.invert(batch.column("_empty")))


def _split_filter(batch: pa.Table, valid: bool, fraction: float) -> pa.Table:
    mask = [documents.in_valid_split(i, fraction) == valid for i in batch.column("id").to_pylist()]
    return batch.filter(pa.array(mask, type=pa.bool_()))
