"""Data-pipeline benchmarks (issue 3), printing one JSON object.

    python benchmarks/data.py --corpus data/corpus --run runs/quickstart [--windows 5000] [--repeats 3]
                              [--only embed|resample] [--out FILE]
    python benchmarks/data.py --only embed-corpus [--fraction 1.0] [--compile auto|always|never] [--out FILE]

- ``embed_ratio``: throughput of the Ray Data embed stage ÷ single-process ``SentenceTransformer.encode``
  on the same windows with the same batch size and dtype, the median of ``--repeats`` interleaved pairs
  in this run, each on its own windows: a fresh single process (timed after its import and model load),
  then the Ray stage end to end on a fresh local Ray (actor processes, loading the exported embedder,
  the Parquet writes).
  ``embed_ratio_steady``: the same once the actors are up (first working file to last). The embedder's
  export (once per machine: ``slm.data.embedder``) is made up front into a fresh cache and timed apart
  (``export_seconds``), as the single process's import and model load are.
- ``resample``: windows/s of our CRISP and DSIR resampling and of the reference DSIR package
  (``data-selection``: fit, weights, resample); both DSIRs on the same inputs (every generic window of
  the corpus, the domain's train split, candidates of ≥ 100 words). Ours windows the corpus inside the
  timed run; the package is handed the windows' text already cut.
- ``embed_corpus`` (``--only embed-corpus``): the embed stage over the whole bundled corpus, as ``slm data
  embed`` runs it (minutes, windows/s, start-up, the actors' own encode rate).
- ``peak_memory_gib``: the largest sum of RSS over this driver and every process it started (the local
  Ray it starts: every Ray process), sampled every second while each stage runs (``slm.runtime.PeakMemory``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from slm.runtime import PeakMemory  # noqa: E402  (after the offline switch)


def window_corpus(corpus: Path, n: int, root: Path, skip: int = 0) -> list[str]:
    """``n`` real windows (generic text, ≤ 254 tokens each) written as a one-domain corpus of documents:
    from every 7th document, starting at the ``skip``-th (another ``skip``, other windows)."""
    from slm.corpus import documents
    from slm.corpus.build import SCHEMA
    from slm.data import tokenizers
    from slm.data.embed import split_windows

    tok = tokenizers.load(tokenizers.EMBEDDER)
    unique: dict[str, None] = {}  # distinct windows: a repeated text would be one document, one id
    for f in sorted((corpus / "generic").glob("*.parquet")):
        for text in pq.read_table(f, columns=["text"]).column("text").to_pylist()[skip % 7::7]:
            for w, _ in split_windows(text, tok.encode(text, add_special_tokens=False), 254):
                unique.setdefault(w)
            if len(unique) >= n:
                break
        if len(unique) >= n:
            break
    texts = list(unique)[:n]
    (root / "generic").mkdir(parents=True)
    for i in range(4):  # four shards, so that reads are spread over tasks
        part = texts[i::4]
        pq.write_table(pa.table({"id": [documents.doc_id(t) for t in part], "text": part,
                                 "source": ["bench"] * len(part), "domain": ["generic"] * len(part),
                                 "n_chars": [len(t) for t in part]}, schema=SCHEMA),
                       root / "generic" / f"part-{i:05d}.parquet")
    return texts


def encode_seconds(corpus_root: str, encode_batch: int, dtype: str) -> float:
    """Single-process ``SentenceTransformer.encode`` over every window under ``corpus_root``: seconds,
    after the import, the model load and a 64-window warm-up (run in a fresh process: see bench_embed)."""
    import torch
    from sentence_transformers import SentenceTransformer

    from slm.data import tokenizers

    texts = pq.read_table(sorted(Path(corpus_root).rglob("*.parquet")), columns=["text"]).column("text").to_pylist()
    model = SentenceTransformer(str(tokenizers.embedder_dir()), device="cpu",
                                model_kwargs={"torch_dtype": getattr(torch, dtype)})
    model.encode(texts[:64], batch_size=encode_batch)  # warm-up, as the actor's first batch is not
    t = time.perf_counter()
    model.encode(texts, batch_size=encode_batch, normalize_embeddings=True)  # torch's default: every core
    return time.perf_counter() - t


def bench_embed(corpus: Path, n: int, repeats: int, result: dict) -> None:
    import ray

    from slm.data.config import EmbedConfig
    from slm.data.embed import embed_corpus, resolve_compile, resolve_dtype

    cache = Path(tempfile.mkdtemp(prefix="bench-embedder-"))
    cfg = EmbedConfig(splits=["all"], cache_dir=str(cache))
    dtype = resolve_dtype(cfg.dtype, cfg.device)  # both sides compute in the same dtype
    # The first actor on a machine exports (and compiles) the embedder; every later one loads it. Start
    # one here, in a fresh process, with the settings embed_corpus gives its actors, so that each pair
    # measures what every run after a machine's first does.
    compiled = resolve_compile(cfg)
    actor_cfg = {**asdict(cfg), "dtype": dtype, "compile": compiled}
    code = ("import time; t = time.perf_counter(); from slm.data.embed import WindowEmbedder; "
            f"WindowEmbedder({actor_cfg!r}, {str(cache)!r}); print(time.perf_counter() - t)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    export_seconds = round(float(proc.stdout.strip().splitlines()[-1]), 1)
    pairs = []
    for i in range(repeats):
        # Each pair embeds its own 5,000 windows twice: one fresh single process, then the Ray stage
        # (fresh actors). Fresh on both sides, because torch's CPU kernels are set up per input shape on
        # first use: a process that has seen these lengths before runs ~25% faster, and actors never have.
        tmp = Path(tempfile.mkdtemp(prefix="bench-embed-"))
        texts = window_corpus(corpus, n, tmp / "corpus", skip=i)
        code = ("import sys; sys.path.insert(0, 'benchmarks'); from data import encode_seconds; "
                f"print(encode_seconds({str(tmp / 'corpus')!r}, {cfg.encode_batch}, {dtype!r}))")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        single = float(proc.stdout.strip().splitlines()[-1])
        ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        with PeakMemory() as mem:
            t = time.perf_counter()
            manifest = embed_corpus(tmp / "corpus", cfg, tmp / "emb")
            ray_s = time.perf_counter() - t
        ray.shutdown()
        assert manifest["windows"] == len(texts), (manifest["windows"], len(texts))
        shutil.rmtree(tmp, ignore_errors=True)
        steady = manifest["embedded_this_run"].get("steady_windows_per_s")
        pairs.append({"single_process_windows_per_s": round(len(texts) / single, 2),
                      "ray_data_windows_per_s": round(len(texts) / ray_s, 2),
                      # once the actors are up (from the first working file to the last), and the
                      # start-up before it: actor processes, loading the exported embedder, a first batch
                      "ray_data_steady_windows_per_s": steady,
                      "ray_data_startup_s": manifest["embedded_this_run"].get("first_file_after_s"),
                      "peak_memory_gib": mem.peak_gib, "actors": manifest["actors"],
                      "embed_ratio": round(single / ray_s, 3),
                      "embed_ratio_steady": round(steady * single / len(texts), 3) if steady else None})
    shutil.rmtree(cache, ignore_errors=True)
    result["embed"] = {"windows": n, "repeats": repeats, "encode_batch": cfg.encode_batch, "dtype": dtype,
                       "compile": compiled, "export_seconds": export_seconds,
                       "single_process_threads": os.cpu_count(), "torch_threads_per_actor": cfg.torch_threads,
                       "pairs": pairs}
    # The median pair: this shared machine's speed drifts by tens of percent between minutes.
    result["embed_ratio"] = float(np.median([p["embed_ratio"] for p in pairs]))  # end to end, as issue 3 defines it
    result["embed_ratio_steady"] = float(np.median([p["embed_ratio_steady"] for p in pairs]))


def bench_embed_corpus(corpus: Path, fraction: float, compile_mode: str, result: dict) -> None:
    """The embed stage over the whole corpus (or a hash sample), as ``slm data embed`` runs it, on a fresh
    local Ray: minutes, windows/s, start-up, the actors' encode rate and the peak memory."""
    import ray

    from slm.data.config import EmbedConfig
    from slm.data.embed import embed_corpus

    out = Path(tempfile.mkdtemp(prefix="bench-embed-corpus-"))
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    with PeakMemory() as mem:
        t = time.perf_counter()
        manifest = embed_corpus(corpus, EmbedConfig(fraction=fraction, compile=compile_mode), out / "emb")
        seconds = time.perf_counter() - t
    ray.shutdown()
    run = manifest["embedded_this_run"]
    result["embed_corpus"] = {
        "corpus": str(corpus), "fraction": fraction, "documents": manifest["documents"],
        "windows": manifest["windows"], "tokens": run["tokens"], "dtype": manifest["config"]["dtype"],
        "actors": manifest["actors"], "compile": manifest["compile"], "seconds": round(seconds, 1),
        "minutes": round(seconds / 60, 1), "windows_per_s": round(manifest["windows"] / seconds, 1),
        **{k: run[k] for k in ("first_file_after_s", "steady_windows_per_s", "encode_seconds",
                               "encode_windows_per_s_per_actor", "duplicate_windows_dropped")},
        "peak_memory_gib": mem.peak_gib,
    }
    shutil.rmtree(out, ignore_errors=True)


def corpus_window_texts(files: list[str], cfg) -> list[str]:
    """The windows of these corpus shards, cut as the embed stage cuts them (in this process)."""
    from slm.data import tokenizers
    from slm.data.embed import window_rows

    tokenizer = tokenizers.load(str(tokenizers.embedder_dir() / "tokenizer.json"))
    return [text for f in files
            for text in window_rows(pq.read_table(f, columns=["id", "text", "source", "domain"]), tokenizer,
                                    cfg.max_tokens)["text"]]


def bench_resample(corpus: Path, run: Path, domain: str, tokens: int, result: dict) -> None:
    """CRISP (over the run's clustered windows), our DSIR and the package's, both DSIRs on the same
    inputs: every generic window of the corpus and the domain's whole train split, candidates of ≥ 100
    words (the package's default min_example_length, ours resample.dsir_min_words)."""
    import ray
    from data_selection import HashedNgramDSIR

    from slm.corpus.layout import corpus_files, domain_dir
    from slm.data.config import EmbedConfig, ResampleConfig
    from slm.data.histogram import domain_histograms
    from slm.data.resample import resample

    clusters = run / "clusters"
    embed, min_words = EmbedConfig(), ResampleConfig().dsir_min_words
    generic = corpus_window_texts(corpus_files(corpus)["all"], embed)
    target = corpus_window_texts(sorted(str(p) for p in domain_dir(corpus, domain, "train").glob("*.parquet")), embed)
    hist = domain_histograms(clusters, 0.5)
    tmp = Path(tempfile.mkdtemp(prefix="bench-resample-"))
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    rows = {}
    for method in ("crisp", "dsir"):
        with PeakMemory() as mem:
            t = time.perf_counter()
            resample(clusters, hist, domain, tokens, method, tmp / method, corpus_dir=corpus, embed=embed,
                     dsir_min_words=min_words)
            rows[method] = {"seconds": time.perf_counter() - t, "peak_memory_gib": mem.peak_gib}
    for name, texts in (("raw", generic), ("target", target)):
        (tmp / f"{name}.jsonl").write_text("".join(json.dumps({"text": x}) + "\n" for x in texts))
    with PeakMemory() as mem:
        t = time.perf_counter()
        ref = HashedNgramDSIR([str(tmp / "raw.jsonl")], [str(tmp / "target.jsonl")], cache_dir=str(tmp / "ref"),
                              num_proc=os.cpu_count(), min_example_length=min_words)
        ref.fit_importance_estimator(num_tokens_to_fit="all")
        ref.compute_importance_weights()
        mean_tokens = sum(len(x.split()) for x in generic) / max(len(generic), 1)
        ref.resample(out_dir=str(tmp / "ref-out"), num_to_sample=max(1, int(tokens / max(mean_tokens, 1))),
                     cache_dir=str(tmp / "ref-cache"))
        rows["dsir_package"] = {"seconds": time.perf_counter() - t, "peak_memory_gib": mem.peak_gib}
    shutil.rmtree(tmp, ignore_errors=True)
    for row in rows.values():
        row["windows_per_s"] = round(len(generic) / row["seconds"], 1)
        row["seconds"] = round(row["seconds"], 2)
    result["resample"] = {"generic_windows": len(generic), "target_windows": len(target), "domain": domain,
                          **rows,
                          "crisp_vs_dsir_package": round(rows["dsir_package"]["seconds"] / rows["crisp"]["seconds"], 2),
                          "our_dsir_vs_dsir_package": round(rows["dsir_package"]["seconds"] / rows["dsir"]["seconds"], 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="data/corpus")
    ap.add_argument("--run", default="runs/quickstart", help="a run whose cluster stage is done")
    ap.add_argument("--domain", default="legal")
    ap.add_argument("--tokens", type=int, default=200_000)
    ap.add_argument("--windows", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=3, help="embed: (single process, Ray stage) pairs, interleaved")
    ap.add_argument("--only", choices=["embed", "resample", "embed-corpus"],
                    help="run one benchmark; embed-corpus (never run by default) embeds the whole corpus")
    ap.add_argument("--fraction", type=float, default=1.0, help="embed-corpus: share of each shard")
    ap.add_argument("--compile", default="auto", choices=["auto", "always", "never"], help="embed-corpus: embed.compile")
    ap.add_argument("--out")
    args = ap.parse_args()
    result: dict = {"machine": {"cpus": os.cpu_count()}}
    if args.only == "embed-corpus":
        bench_embed_corpus(Path(args.corpus), args.fraction, args.compile, result)
    if args.only in (None, "embed"):
        bench_embed(Path(args.corpus), args.windows, args.repeats, result)
    if args.only in (None, "resample"):
        bench_resample(Path(args.corpus), Path(args.run), args.domain, args.tokens, result)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
