"""Data-pipeline benchmarks (issue 3), printing one JSON object.

    python benchmarks/data.py --corpus data/corpus --run runs/quickstart [--windows 5000] [--out FILE]

- ``embed_ratio``: throughput of the Ray Data embed stage ÷ single-process ``SentenceTransformer.encode``
  on the same windows with the same batch size and dtype, both timed in this run (the Ray side end to
  end: actor start-up, importing sentence-transformers, the Parquet writes; the single process after its
  model is loaded). ``embed_ratio_steady``: the same once the actors are up (first working file to last).
- ``resample``: windows/s of our CRISP and DSIR resampling and of the reference DSIR package
  (``data-selection``: fit, weights, resample) on the same generic windows and target domain.
- ``peak_memory_gib``: the largest sum of RSS over this driver and every Ray process, sampled every
  second while each stage runs.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class PeakRSS:
    """Samples the summed RSS of this process and every Ray process until stopped."""

    def __init__(self):
        self.peak, self._stop = 0, threading.Event()

    def _sample(self):
        while not self._stop.is_set():
            total = 0
            for p in psutil.process_iter(["cmdline", "memory_info"]):
                cmd = " ".join(p.info["cmdline"] or [])
                if p.pid == os.getpid() or "ray::" in cmd or "/ray/" in cmd or "raylet" in cmd or "gcs_server" in cmd:
                    total += p.info["memory_info"].rss if p.info["memory_info"] else 0
            self.peak = max(self.peak, total)
            time.sleep(1.0)  # walking every process costs CPU: sample sparingly beside timed work

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def window_corpus(corpus: Path, n: int, root: Path) -> list[str]:
    """``n`` real windows (generic text, ≤ 254 tokens each) written as a one-domain corpus of documents."""
    from slm.corpus import documents
    from slm.corpus.build import SCHEMA
    from slm.data import tokenizers
    from slm.data.embed import split_windows

    tok = tokenizers.load(tokenizers.EMBEDDER)
    unique: dict[str, None] = {}  # distinct windows: a repeated text would be one document, one id
    for f in sorted((corpus / "generic").glob("*.parquet")):
        for text in pq.read_table(f, columns=["text"]).column("text").to_pylist()[::7]:
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


def bench_embed(corpus: Path, n: int, result: dict) -> None:
    import ray
    import torch
    from sentence_transformers import SentenceTransformer

    from slm.config import EmbedConfig
    from slm.data import tokenizers
    from slm.data.embed import embed_corpus, resolve_dtype

    tmp = Path(tempfile.mkdtemp(prefix="bench-embed-"))
    texts = window_corpus(corpus, n, tmp / "corpus")
    cfg = EmbedConfig(splits=["all"])
    dtype = resolve_dtype(cfg.dtype, cfg.device)  # both sides compute in the same dtype
    model = SentenceTransformer(str(tokenizers.embedder_dir()), device="cpu",
                                model_kwargs={"torch_dtype": getattr(torch, dtype)})
    model.encode(texts[:64], batch_size=cfg.encode_batch)  # warm-up, as the actor's first batch is not
    t = time.perf_counter()
    model.encode(texts, batch_size=cfg.encode_batch, normalize_embeddings=True)  # torch's default: every core
    single = time.perf_counter() - t
    del model
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    with PeakRSS() as mem:
        t = time.perf_counter()
        manifest = embed_corpus(tmp / "corpus", cfg, tmp / "emb")
        ray_s = time.perf_counter() - t
    assert manifest["windows"] == len(texts), (manifest["windows"], len(texts))
    result["embed"] = {"windows": len(texts), "encode_batch": cfg.encode_batch, "dtype": dtype,
                       "single_process_threads": torch.get_num_threads(),
                       "ray_actors": manifest["actors"], "torch_threads_per_actor": cfg.torch_threads,
                       "single_process_windows_per_s": round(len(texts) / single, 2),
                       "ray_data_windows_per_s": round(len(texts) / ray_s, 2),
                       "peak_memory_gib": round(mem.peak / 2**30, 2),
                       # once the actors are up (from the first working file to the last), and the
                       # start-up before it: actor processes, importing sentence-transformers, the model
                       "ray_data_steady_windows_per_s": manifest["embedded_this_run"].get("steady_windows_per_s"),
                       "ray_data_startup_s": manifest["embedded_this_run"].get("first_file_after_s")}
    result["embed_ratio"] = round(single / ray_s, 3)  # end to end, as issue 3 defines it
    steady = manifest["embedded_this_run"].get("steady_windows_per_s")
    result["embed_ratio_steady"] = round(steady * single / len(texts), 3) if steady else None


def bench_resample(run: Path, domain: str, tokens: int, result: dict) -> None:
    from data_selection import HashedNgramDSIR

    from slm.data.histogram import domain_histograms
    from slm.data.resample import resample

    clusters = run / "clusters"
    assignments = pq.read_table(clusters / "assignments", columns=["text", "domain"])
    generic = [t for t, d in zip(*assignments.to_pydict().values(), strict=True) if d == "generic"]
    target = [t for t, d in zip(*assignments.to_pydict().values(), strict=True) if d == domain]
    hist = domain_histograms(clusters, 0.5)
    tmp = Path(tempfile.mkdtemp(prefix="bench-resample-"))
    rows = {}
    for method in ("crisp", "dsir"):
        with PeakRSS() as mem:
            t = time.perf_counter()
            resample(clusters, hist, domain, tokens, method, tmp / method)
            rows[method] = {"seconds": time.perf_counter() - t, "peak_memory_gib": round(mem.peak / 2**30, 2)}
    for name, texts in (("raw", generic), ("target", target)):
        (tmp / f"{name}.jsonl").write_text("".join(json.dumps({"text": x}) + "\n" for x in texts))
    with PeakRSS() as mem:
        t = time.perf_counter()
        ref = HashedNgramDSIR([str(tmp / "raw.jsonl")], [str(tmp / "target.jsonl")], cache_dir=str(tmp / "ref"),
                              num_proc=os.cpu_count(), min_example_length=0)
        ref.fit_importance_estimator(num_tokens_to_fit="all")
        ref.compute_importance_weights()
        mean_tokens = sum(len(x.split()) for x in generic) / max(len(generic), 1)
        ref.resample(out_dir=str(tmp / "ref-out"), num_to_sample=max(1, int(tokens / max(mean_tokens, 1))),
                     cache_dir=str(tmp / "ref-cache"))
        rows["dsir_package"] = {"seconds": time.perf_counter() - t, "peak_memory_gib": round(mem.peak / 2**30, 2)}
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
    ap.add_argument("--only", choices=["embed", "resample"], help="run one of the two benchmarks")
    ap.add_argument("--out")
    args = ap.parse_args()
    result: dict = {"machine": {"cpus": os.cpu_count()}}
    if args.only != "resample":
        bench_embed(Path(args.corpus), args.windows, result)
    if args.only != "embed":
        bench_resample(Path(args.run), args.domain, args.tokens, result)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
