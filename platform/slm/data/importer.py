"""`slm corpus import`: a user's own corpus (JSONL, Parquet or a folder of text files) as generic or a domain.

Reading goes through Ray Data (as the data stages run it: ``slm.data.execution``), so a path may be
local, a glob, or ``s3://…`` and the import scales to a cluster. Documents get the same treatment as the
bundled corpus: normalized text, a stable content id, empty documents dropped and counted, undecodable bytes
replaced and counted, domains split into train/valid by hash. Output is written under a temporary name and renamed into place; the corpus
manifest records the import.

JSON Lines are read line by line (``JsonLinesDatasource``), so that every line is accounted for: a line
that is not a record (malformed JSON, another JSON type, no text field, a non-text value) is quarantined
to ``<corpus>/quarantine/<role>/`` with its file, line and why, and counted (``--on-error skip``, the
default), or stops the import naming them with nothing written (``--on-error fail``).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import ray.data
from ray.data.aggregate import Count, Sum
from ray.data.datasource import FileBasedDatasource
from ray.data.expressions import col

from slm.artifacts import atomic_path, read_manifest, verify, write_manifest
from slm.corpus import documents
from slm.corpus.build import SCHEMA
from slm.corpus.layout import CORPUS_FILES, GENERIC, domain_dir, generic_dir
from slm.data.execution import reproducible_execution
from slm.log import logger

log = logger(__name__)

TEXT_EXTENSIONS = ["txt", "md", "rst", "text"]


class CorpusImportError(ValueError):
    """Input that cannot be imported; the message names the file and column."""


FORMATS = {"jsonl": (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst"), "parquet": (".parquet",),
           "text": tuple(f".{e}" for e in TEXT_EXTENSIONS)}


def _format_of(name: str) -> str | None:
    lower = name.lower()
    return next((fmt for fmt, suffixes in FORMATS.items() if lower.endswith(suffixes)), None)


ON_ERROR = ("skip", "fail")
QUARANTINE = "quarantine"


def input_files(path: str, fmt: str | None = None, on_error: str = "skip", text_column: str = "text"
                ) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """What ``slm corpus import PATH`` reads, checked before Ray starts: the files by format and the files
    passed over with why. A folder gives every supported file below it, whatever their formats (each read
    as its own); a glob its matches; a remote URI (``s3://…``) is handed to Ray Data as it is. A missing
    path, a glob that matches nothing, a JSON array (not JSON Lines), a Parquet file without a text
    column ``text_column`` (its schema, read from the footer) and nothing readable fail here, naming the
    path; a Parquet file whose footer cannot be read (truncated, not Parquet) is passed over with why, or
    fails with ``on_error="fail"``."""
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
        if kind == "parquet":
            try:
                schema = pq.read_schema(f)
            except (pa.ArrowException, OSError) as err:
                why = f"not a readable Parquet file (truncated or another format: {err})"
                if on_error == "fail":
                    raise CorpusImportError(f"{f}: {why}; nothing was imported") from None
                skipped.append((str(f), why))
                continue
            _check_text_column(f, schema, text_column)
        files.setdefault(kind, []).append(str(f))
    if not files:
        raise CorpusImportError(f"{path}: nothing to import ("
                                + "; ".join(f"{Path(f).name}: {why}" for f, why in skipped[:5]) + ")")
    return files, skipped


def no_text_column(path: str | Path, text_column: str, columns: list[str]) -> CorpusImportError:
    """The one error for a Parquet file without the text column, before Ray (its schema) or in the read."""
    return CorpusImportError(f"{path}: no column {text_column!r} (columns: {columns}); pass --text-column")


def _check_text_column(path: Path, schema: pa.Schema, text_column: str) -> None:
    """A Parquet file's text column, from its schema: present, and text (the same two errors the reading
    batches raise for a remote file, here before Ray starts)."""
    if text_column not in schema.names:
        raise no_text_column(path, text_column, schema.names)
    kind = schema.field(text_column).type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
            or pa.types.is_large_binary(kind) or pa.types.is_null(kind)):
        raise CorpusImportError(f"{path}: column {text_column!r} is {kind}, not text")


BOM = b"\xef\xbb\xbf"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # json.loads pairs valid ones: what is left is lone
RAW_KEPT = 2000  # characters of a quarantined line kept to show what it was
ROWS_PER_BLOCK = 1024


def _lines(stream, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The lines of a binary stream without their ``\n`` (a last line without one too), read in pieces
    of ``chunk`` bytes: a line as long as the file is joined once, never re-copied per piece."""
    pending: list[bytes] = []
    while block := stream.read(chunk):
        start = 0
        while (end := block.find(b"\n", start)) != -1:
            pending.append(block[start:end])
            yield b"".join(pending)
            pending, start = [], end + 1
        pending.append(block[start:])
    if tail := b"".join(pending):
        yield tail


def parse_line(raw: bytes, number: int, text_column: str) -> dict | None:
    """One JSON Lines line as a row: the record's text, or ``_error`` saying why it is not a record.
    None for a blank line. A byte-order mark and ``\r\n`` read as editors read them; bytes that are
    not UTF-8 and lone surrogates (``"\\ud800"``) become U+FFFD, counted."""
    if number == 1 and raw.startswith(BOM):
        raw = raw[len(BOM):]
    raw = raw.rstrip(b"\r")
    if not raw.strip():
        return None
    counts = documents.SourceCounts()
    line = documents.decode(raw, counts=counts)
    row = {text_column: None, "_line": number, "_error": None, "_raw": None}
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        row["_error"] = f"not JSON: {err.msg} (column {err.colno})"
    else:
        value = record.get(text_column) if isinstance(record, dict) else None
        if not isinstance(record, dict):
            row["_error"] = f"a JSON {type(record).__name__}, not an object with a {text_column!r} field"
        elif text_column not in record:
            row["_error"] = f"no field {text_column!r} (fields: {sorted(record)[:10]}); pass --text-column"
        elif value is not None and not isinstance(value, str):
            row["_error"] = f"{text_column!r} is a JSON {type(value).__name__}, not text"
        else:
            text = value or ""
            lone = len(_LONE_SURROGATE.findall(text))
            if lone:
                text = _LONE_SURROGATE.sub(documents.REPLACEMENT, text)
                counts.decode_errors = 1
                counts.replaced_chars += lone
            row[text_column] = text
    if row["_error"]:
        row["_raw"] = _LONE_SURROGATE.sub(documents.REPLACEMENT, line[:RAW_KEPT])
    return row | {"_decode_errors": counts.decode_errors, "_replaced_chars": counts.replaced_chars}


def line_schema(text_column: str) -> pa.Schema:
    """The rows ``parse_line`` makes."""
    return pa.schema([(text_column, pa.string()), ("_line", pa.int64()), ("_error", pa.string()),
                      ("_raw", pa.string()), ("_decode_errors", pa.int64()), ("_replaced_chars", pa.int64())])


class JsonLinesDatasource(FileBasedDatasource):
    """JSON Lines (``.jsonl``, ``.json``; gzip or zstd by extension) as rows of the text field, one per
    line, with ``_line`` and, for a line that is not a record, ``_error`` (``parse_line``). Ray Data's
    own JSON reader refuses a whole file over one bad line (or a byte-order mark) with a traceback that
    names neither the file nor the line."""

    def __init__(self, paths, text_column: str, **kwargs):
        super().__init__(paths, **kwargs)
        self.text_column = text_column
        self.schema = line_schema(text_column)

    def _read_stream(self, f, path: str) -> Iterator[pa.Table]:
        rows = []
        for number, raw in enumerate(_lines(f), start=1):
            row = parse_line(raw, number, self.text_column)
            if row is not None:
                rows.append(row)
            if len(rows) == ROWS_PER_BLOCK:
                yield pa.Table.from_pylist(rows, schema=self.schema)
                rows = []
        if rows:
            yield pa.Table.from_pylist(rows, schema=self.schema)


def _read(paths: str | list[str], fmt: str, text_column: str):
    if fmt == "jsonl":
        return ray.data.read_datasource(JsonLinesDatasource(paths, text_column, include_paths=True))
    if fmt == "parquet":
        return ray.data.read_parquet(paths, include_paths=True)
    if fmt == "text":
        return ray.data.read_binary_files(paths, include_paths=True)
    raise CorpusImportError(f"unknown format {fmt!r}; use jsonl, parquet or text")


def _read_all(files: dict[str, list[str]], **normalize):
    """Every format's files, each through its reader and normalized to the corpus schema, as one dataset
    (normalized first: a batch may join blocks, and the formats' raw columns differ)."""
    datasets = [_read(paths, fmt, normalize["text_column"]).map_batches(_normalize_batch, fn_kwargs=normalize,
                                                                         batch_format="pyarrow")
                for fmt, paths in sorted(files.items())]
    return datasets[0].union(*datasets[1:]) if len(datasets) > 1 else datasets[0]


def _normalize_batch(batch: pa.Table, text_column: str, source: str, domain: str,
                     max_chars: int | None = None) -> pa.Table:
    """A batch of records as corpus rows: decoded (undecodable bytes replaced and counted), normalized,
    hashed; a record longer than ``max_chars`` split at paragraph boundaries into several documents, as
    the bundled build splits its sources (``_first`` marks each record's first piece, so that the
    counts stay per record). A JSON Lines line that is not a record passes as an empty row flagged
    ``_quarantined``, with its line and why."""
    paths = batch.column("path").to_pylist()
    n = batch.num_rows
    per_line = {k: batch.column(k).to_pylist() if k in batch.column_names else [default] * n
                for k, default in (("_line", None), ("_error", None), ("_raw", None),
                                   ("_decode_errors", 0), ("_replaced_chars", 0))}
    if "bytes" in batch.column_names and text_column not in batch.column_names:
        raw_texts = batch.column("bytes").to_pylist()  # a folder of text files: one file, one document
    elif text_column in batch.column_names:
        raw_texts = batch.column(text_column).to_pylist()
    else:
        raise no_text_column(paths[0], text_column, [c for c in batch.column_names if c != "path"])
    texts, first, bad, replaced, empty, where, origin = [], [], [], [], [], [], []
    for i, raw in enumerate(raw_texts):
        if raw is not None and not isinstance(raw, (str, bytes)):
            raise CorpusImportError(f"{paths[i]}: a row's {text_column!r} is {type(raw).__name__}, not text")
        counts = documents.SourceCounts()
        text = documents.normalize(documents.decode(raw or "", counts=counts))
        pieces = documents.split_long(text, max_chars) if text and max_chars else [text]
        for k, piece in enumerate(pieces or [""]):
            texts.append(piece)
            first.append(k == 0)
            bad.append(counts.decode_errors + per_line["_decode_errors"][i] if k == 0 else 0)
            replaced.append(counts.replaced_chars + per_line["_replaced_chars"][i] if k == 0 else 0)
            empty.append(not piece and per_line["_error"][i] is None)
            where.append(paths[i])
            origin.append(i)
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
        "_quarantined": pa.array([per_line["_error"][i] is not None for i in origin], pa.bool_()),
        "_line": pa.array([per_line["_line"][i] for i in origin], pa.int64()),
        "_error": pa.array([per_line["_error"][i] for i in origin], pa.string()),
        "_raw": pa.array([per_line["_raw"][i] for i in origin], pa.string()),
    })


@dataclass
class Documents:
    """One input read: its documents (empty ones and repeats dropped, materialized), its lines that are
    not records, and the counts of what happened on the way."""

    inputs: dict[str, list[str]]
    skipped: list[tuple[str, str]]
    counts: dict[str, int]
    kept: ray.data.Dataset
    bad_lines: ray.data.Dataset

    def describe(self, path: str) -> dict:
        return {"path": path, "format": "+".join(sorted(self.inputs)), "files": sum(map(len, self.inputs.values())),
                "skipped": [{"file": f, "why": why} for f, why in self.skipped], **self.counts}


def read_documents(path: str, *, fmt: str | None, on_error: str, **normalize) -> Documents:
    """``path`` read and normalized (``_normalize_batch``'s arguments in ``normalize``), its documents
    kept once each (the same normalized text is the same id, as the bundled build keeps it)."""
    inputs, skipped = input_files(path, fmt, on_error, normalize["text_column"])
    for name, why in skipped:
        log.info(f"[import] skipped {name}: {why}")
    ds = _read_all(inputs, **normalize)
    counts = ds.aggregate(Sum("_first", alias_name="records"), Count(alias_name="rows"),
                          Sum("_empty", alias_name="empty"), Sum("_quarantined", alias_name="quarantined"),
                          Sum("_decode_errors", alias_name="decode_errors"),
                          Sum("_replaced_chars", alias_name="replaced_chars"))
    counts = {k: int(v or 0) for k, v in counts.items()}
    counts["split_pieces"] = counts.pop("rows") - counts["records"]  # documents made by splitting long records
    bad_lines = ds.filter(expr=col("_quarantined")).select_columns(["_path", "_line", "_error", "_raw"])
    if counts["quarantined"] and (on_error == "fail" or counts["records"] == counts["empty"] + counts["quarantined"]):
        shown = "; ".join(f"{r['_path']}:{r['_line']}: {r['_error']}" for r in bad_lines.take(5))
        raise CorpusImportError(f"{shown} (lines that are not records: {counts['quarantined']} in all); nothing "
                                "was imported" + ("" if on_error == "fail" else " (no line was a record)"))
    if counts["records"] == counts["empty"]:
        raise CorpusImportError(f"{path}: no non-empty documents ({counts['records']} records read)")
    # Materialized once (in the object store, spilled to disk when large): a domain's two splits read it
    # without shuffling the corpus twice.
    kept = ds.map_batches(_drop_empty, batch_format="pyarrow").groupby("id").map_groups(
        _first_of_group, batch_format="pyarrow").materialize()
    counts["duplicates"] = (counts["records"] - counts["empty"] - counts["quarantined"] + counts["split_pieces"]
                            - kept.count())
    return Documents(inputs, skipped, counts, kept, bad_lines)


def check_import(path: str, corpus_dir: str | Path, domain: str | None, *, fmt: str | None = None,
                 valid: str | None = None, replace: bool = False, on_error: str = "skip",
                 text_column: str = "text") -> list[Path]:
    """Everything about an import that needs no Ray, checked before Ray starts (`slm corpus import` calls
    it first): the options, the domain's name, its folder (refused unless ``replace``), and the inputs
    (``input_files``: a missing path, an unsupported or empty file, a JSON array). Returns the folders
    the import writes."""
    if on_error not in ON_ERROR:
        raise CorpusImportError(f"--on-error must be one of {ON_ERROR}, got {on_error!r}")
    corpus_dir = Path(corpus_dir).expanduser()
    role = domain or GENERIC
    if role != GENERIC and not role.replace("-", "").replace("_", "").isalnum():
        raise CorpusImportError(f"domain name {role!r} must be letters, digits, '-' or '_'")
    if valid and role == GENERIC:
        raise CorpusImportError("--valid is a domain's valid split; the generic corpus has none")
    targets = [generic_dir(corpus_dir)] if role == GENERIC else [
        domain_dir(corpus_dir, role, s) for s in ("train", "valid")]
    if any(t.exists() for t in targets) and not replace:
        raise CorpusImportError(f"{targets[0].parent if role != GENERIC else targets[0]} already exists; "
                                "pass --replace to overwrite it")
    for given in (path, valid):
        if given:
            input_files(given, fmt, on_error, text_column)
    # What the import keeps (the other roles' files) must still be what was written: the new manifest
    # records them again, and never records a damaged file as written.
    kept = [rel for rel in ((read_manifest(corpus_dir) or {}).get("files") or {})
            if not rel.startswith(replaced_prefix(role))]
    if kept:
        verify(corpus_dir, "`slm corpus build` (the bundled corpus) or `slm corpus import … --replace` (yours)",
               only=kept)
    return targets


def replaced_prefix(role: str) -> str:
    """The files (relative to the corpus folder) an import of ``role`` replaces."""
    return f"{GENERIC}/" if role == GENERIC else f"domains/{role}/"


@reproducible_execution()  # the data stages' Ray Data settings: V1 Parquet reads, sort-based shuffle, quiet logs
def import_corpus(
    path: str,
    corpus_dir: str | Path,
    domain: str | None = None,
    *,
    fmt: str | None = None,
    text_column: str = "text",
    source: str | None = None,
    valid_fraction: float = 0.05,
    valid: str | None = None,
    replace: bool = False,
    max_doc_chars: int | None = 8000,
    on_error: str = "skip",
    shard_docs: int = 4096,
) -> dict:
    """Import ``path`` into ``corpus_dir`` as the generic corpus (``domain=None``) or a domain: its valid
    split the documents of ``valid`` when given (those also in ``path`` leave train), else chosen by hash.
    Lines that are not records are quarantined and counted (``on_error="skip"``) or stop the import
    (``"fail"``). Written in files near ``shard_docs`` documents (or below: docs/corpus.md)."""
    targets = check_import(path, corpus_dir, domain, fmt=fmt, valid=valid, replace=replace, on_error=on_error,
                           text_column=text_column)
    corpus_dir = Path(corpus_dir).expanduser()
    role = domain or GENERIC
    replaced = replaced_prefix(role)
    source = source or Path(path.rstrip("/")).name
    started = time.perf_counter()
    normalize = {"text_column": text_column, "source": source, "domain": role, "max_chars": max_doc_chars}
    given = read_documents(path, fmt=fmt, on_error=on_error, **normalize)
    given_valid = read_documents(valid, fmt=fmt, on_error=on_error, **normalize) if valid else None

    # Each split's documents: the generic corpus whole; a domain's by hash, or train = path without the
    # documents of the valid input (no document in both splits).
    if role == GENERIC:
        parts = {"all": given.kept}
    elif given_valid is None:
        parts = {split: given.kept.map_batches(_split_filter, fn_kwargs={"valid": split == "valid",
                                                                         "fraction": valid_fraction},
                                               batch_format="pyarrow") for split in ("train", "valid")}
    else:
        valid_ids = {row["id"] for row in given_valid.kept.select_columns(["id"]).iter_rows()}
        parts = {"train": given.kept.map_batches(_without_ids, fn_kwargs={"ids": valid_ids}, batch_format="pyarrow"),
                 "valid": given_valid.kept}
    # The whole role is staged, then swapped in with one rename: a split that comes out empty (or any
    # failure) leaves the corpus as it was — never a new train split beside an old valid one.
    columns = list(SCHEMA.names)
    folder = generic_dir(corpus_dir) if role == GENERIC else targets[0].parent
    with atomic_path(folder) as staged:
        for split, part in parts.items():
            out = staged if role == GENERIC else staged / split
            # Files near shard_docs documents (Ray Data's min_rows_per_file, per write task: near it or below,
            # docs/corpus.md); without it one per block (a 10 MB domain came out as 348 files of ~30 KB).
            part.select_columns(columns).write_parquet(str(out), min_rows_per_file=shard_docs)
            if not sum(pq.read_metadata(f).num_rows for f in out.glob("*.parquet")):
                why = f"valid_fraction={valid_fraction}" if given_valid is None else f"--valid {valid}"
                raise CorpusImportError(f"{path}: the {split} split of domain {role!r} would be empty ({why}); "
                                        "import more documents; the corpus is left as it was")
    summary = {}
    for target in targets:
        files = sorted(target.glob("*.parquet"))
        summary[target.name if role != GENERIC else "all"] = {
            "documents": sum(pq.read_metadata(f).num_rows for f in files),
            "files": [str(f.relative_to(corpus_dir)) for f in files], "bytes": sum(os.path.getsize(f) for f in files)}
    quarantined = given.counts["quarantined"] + (given_valid.counts["quarantined"] if given_valid else 0)
    quarantine = corpus_dir / QUARANTINE / role
    if quarantined:  # after the swap: a failed import leaves no quarantine of lines it never took
        bad_lines = given.bad_lines.union(given_valid.bad_lines) if given_valid else given.bad_lines
        with atomic_path(quarantine) as tmp:
            bad_lines.rename_columns({"_path": "file", "_line": "line", "_error": "error", "_raw": "raw"}
                                     ).write_json(str(tmp))
        log.info(f"[import] {quarantined} lines that are not records quarantined in {quarantine}")
    else:
        shutil.rmtree(quarantine, ignore_errors=True)  # an earlier import's, of the data just replaced
    record = {**given.describe(path), "text_column": text_column, "source": source, "role": role,
              "quarantine": str(quarantine.relative_to(corpus_dir)) if quarantined else None}
    if role != GENERIC:
        record["valid_split"] = {"from": "hash", "fraction": valid_fraction} if given_valid is None else {
            "from": "file", **given_valid.describe(valid),
            "dropped_from_train": given.kept.count() - summary["train"]["documents"]}
    record |= {"splits": summary, "seconds": round(time.perf_counter() - started, 1)}
    log.info(f"[import] {role}: " + ", ".join(f"{split} {s['documents']} documents" for split, s in summary.items())
             + ("" if role == GENERIC else f" (valid split from {record['valid_split']['from']})"))
    manifest = read_manifest(corpus_dir) or {"stage": "corpus"}
    # The bundled build's description of this role no longer holds: the import replaced it.
    if role == GENERIC:
        manifest.pop(GENERIC, None)
    else:
        manifest.get("domains", {}).pop(role, None)
    manifest.setdefault("imports", {})[role] = record
    write_manifest(corpus_dir, manifest, files=CORPUS_FILES, written=lambda rel: rel.startswith(replaced))
    return record


def _without_ids(batch: pa.Table, ids: set[str]) -> pa.Table:
    return batch.filter(pa.array([i not in ids for i in batch.column("id").to_pylist()], type=pa.bool_()))


def _first_of_group(group: pa.Table) -> pa.Table:
    return group.slice(0, 1)


def _drop_empty(batch: pa.Table) -> pa.Table:
    """Only documents: neither empty nor a quarantined line."""
    return batch.filter(pc.invert(pc.or_(batch.column("_empty"), batch.column("_quarantined"))))


def _split_filter(batch: pa.Table, valid: bool, fraction: float) -> pa.Table:
    mask = [documents.in_valid_split(i, fraction) == valid for i in batch.column("id").to_pylist()]
    return batch.filter(pa.array(mask, type=pa.bool_()))
