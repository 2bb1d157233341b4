"""The embed stage on a real local Ray with the real embedding model: windows, exactly-once, resume."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slm.corpus.layout import corpus_files
from slm.data import tokenizers
from slm.data.config import EmbedConfig
from slm.data.embed import WORK, WORK_FINGERPRINT, embed_corpus, embedding_files, split_windows
from tests.conftest import embed_config_for_tests

pytestmark = pytest.mark.ray


def test_split_windows_keeps_every_character_and_word():
    tok = tokenizers.load(tokenizers.EMBEDDER)
    text = ("Tokenization of unquestionably extraordinary sentences " * 40).strip()
    windows = split_windows(text, tok.encode(text, add_special_tokens=False), 30)
    assert len(windows) > 5 and all(n <= 30 for _, n in windows)
    assert "".join(w for w, _ in windows).replace(" ", "") == text.replace(" ", "")
    for w, n in windows:  # no window starts inside a word
        assert not tok.encode(w, add_special_tokens=False).tokens[0].startswith("##")
        assert len(tok.encode(w, add_special_tokens=False).ids) == n
    assert split_windows("", tok.encode("", add_special_tokens=False), 30) == []


def test_every_window_exactly_once_after_an_actor_kill(embedded, mini_corpus_dir):
    out, manifest, killed = embedded
    assert killed, "the embedding actor was never killed: the test did not test a failure"
    # Ids could repeat across shards (a user may import one text into two domains); within a shard,
    # each window must appear exactly once.
    per_shard = [pq.read_table(f).column("id").to_pylist() for f in embedding_files(out)]
    assert all(len(ids) == len(set(ids)) for ids in per_shard)
    assert sum(map(len, per_shard)) == manifest["windows"]
    windows_of = collections.defaultdict(list)
    for f in embedding_files(out):
        t = pq.read_table(f, columns=["doc_id", "window", "n_windows"]).to_pydict()
        for doc, w, n in zip(t["doc_id"], t["window"], t["n_windows"], strict=True):
            windows_of[(f, doc)].append((w, n))
    for key, ws in windows_of.items():
        assert sorted(w for w, _ in ws) == list(range(ws[0][1])), key
    table = pq.read_table(embedding_files(out)).to_pydict()
    files = corpus_files(mini_corpus_dir)
    expected = set(pq.read_table(files["all"] + files["train"], columns=["id"]).column("id").to_pylist())
    assert {doc for _, doc in windows_of} == expected  # generic and the domains' train splits, every document
    assert max(table["n_tokens"]) <= 254
    print("duplicate windows dropped after the kill:", manifest["embedded_this_run"]["duplicate_windows_dropped"])


# Vectors of the same text computed in other batches (other padding) differ by this much at most.
BATCH_NOISE = {"float32": 2e-5, "bfloat16": 2e-2}


def test_embeddings_match_single_process_encode(embedded):
    import torch
    from sentence_transformers import SentenceTransformer

    out, manifest, _ = embedded
    dtype = manifest["config"]["dtype"]  # resolved: bfloat16 on CPUs with AMX / AVX512-BF16
    assert dtype in BATCH_NOISE
    table = pq.read_table(embedding_files(out)[0]).slice(0, 16).to_pydict()
    ours = np.array(table["embedding"])
    assert np.allclose(np.linalg.norm(ours, axis=1), 1, atol=1e-5)  # normalized in float32
    for reference_dtype in dict.fromkeys([dtype, "float32"]):
        model = SentenceTransformer(str(tokenizers.embedder_dir()), device="cpu",
                                    model_kwargs={"torch_dtype": getattr(torch, reference_dtype)})
        reference = model.encode(table["text"], normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)
        if reference_dtype == dtype:
            np.testing.assert_allclose(ours, reference, atol=BATCH_NOISE[dtype])
        # whatever the dtype, the directions are float32's: what clustering reads
        assert ((ours * reference).sum(axis=1) / np.linalg.norm(reference, axis=1)).min() > 0.995


def test_rerun_skips_finished_shards_and_resumes_a_partial_one(embedded, mini_corpus_dir):
    """Interrupt one shard half-way (its final file gone, half its documents in a working file)."""
    out, manifest, _ = embedded
    # the smallest shard: re-embedding half of it is the test's cost; the others show they were not redone
    shard = min(manifest["shards"], key=lambda s: manifest["shards"][s]["documents"])
    final = out / f"{shard}.parquet"
    original = pq.read_table(final)
    docs = sorted(set(original.column("doc_id").to_pylist()))
    kept_docs = set(docs[: len(docs) // 2])
    partial = original.filter(pa.array([d in kept_docs for d in original.column("doc_id").to_pylist()]))
    work = out / WORK / shard
    work.mkdir(parents=True)
    pq.write_table(partial, work / "batch-interrupted.parquet")
    (work / WORK_FINGERPRINT).write_text(manifest["shards"][shard]["input"])  # made from this very input
    final.unlink()
    others = {p: p.stat().st_mtime_ns for p in map(Path, embedding_files(out))}

    again = embed_corpus(mini_corpus_dir, embed_config_for_tests(), out)
    assert again["embedded_this_run"]["windows"] == original.num_rows - partial.num_rows
    assert all(p.stat().st_mtime_ns == t for p, t in others.items())  # finished shards were not redone
    resumed = pq.read_table(final)
    for column in ("id", "doc_id", "window", "n_windows", "text", "n_tokens"):  # the same rows, in order
        assert resumed.column(column).equals(original.column(column)), column
    # Vectors recomputed in other batches differ only by padding noise.
    np.testing.assert_allclose(np.array(resumed.column("embedding").to_pylist()),
                               np.array(original.column("embedding").to_pylist()),
                               atol=BATCH_NOISE[manifest["config"]["dtype"]])
    assert not work.exists()
    assert embed_corpus(mini_corpus_dir, embed_config_for_tests(), out)["embedded_this_run"]["windows"] == 0


def test_a_sample_of_generic_embeds_the_chosen_domains_whole(mini_corpus_dir):
    """embed.fraction samples the generic shards only: a domain's histogram, packed set and
    specialization data are every document it has; embed.domains chooses the domains."""
    from slm.data.embed import selected_ids, shards_to_embed

    files = corpus_files(mini_corpus_dir)
    cfg = EmbedConfig(fraction=0.3, domains=["legal"])
    chosen = shards_to_embed(mini_corpus_dir, cfg)
    assert sorted(chosen) == sorted(files["all"] + [f for f in files["train"] if "/legal/" in f])
    generic_total = generic_picked = 0
    for path, fraction in chosen.items():
        everything = set(pq.read_table(path, columns=["id"]).column("id").to_pylist())
        picked = selected_ids(path, fraction)
        assert picked <= everything
        if "/legal/" in path:
            assert picked == everything, path
        else:  # a shard may hold a single document, picked or not: count over every generic shard
            generic_total, generic_picked = generic_total + len(everything), generic_picked + len(picked)
    assert generic_total >= 200, "the mini corpus is too small to measure a sample fraction"
    # 0.3 of the generic documents, within 4 binomial standard deviations (a hash-based sample).
    assert abs(generic_picked - 0.3 * generic_total) < 4 * (0.3 * 0.7 * generic_total) ** 0.5, \
        (generic_picked, generic_total)
    assert set(shards_to_embed(mini_corpus_dir, EmbedConfig(fraction=0.3))) == set(files["all"] + files["train"])
    with pytest.raises(ValueError, match=r"'embed.domains': \['poetry'\] not in"):
        shards_to_embed(mini_corpus_dir, EmbedConfig(domains=["legal", "poetry"]))


def test_bad_split_names_fail_before_running():
    from slm.config import ConfigError
    from slm.job import load_job

    with pytest.raises(ConfigError, match=r"'embed.splits': unknown split\(s\) \['generic'\]"):
        load_job(None, ["embed.splits=[generic]"])


@pytest.mark.slow  # ~1 min warm, more with a cold export cache; the embed fixtures use this embedder too
def test_exported_embedder_is_sentence_transformers_encode(mini_corpus_dir, tmp_path):
    """The actors' embedder (the model's forward, exported once per machine) gives encode()'s vectors;
    a process that loads it from the cache never imports sentence-transformers (the start-up it saves)."""
    import subprocess
    import sys

    import torch
    from sentence_transformers import SentenceTransformer

    from slm.data.embed import resolve_dtype
    from slm.data.embedder import SentenceEmbedder

    dtype = resolve_dtype("auto", "cpu")
    settings = {"dtype": dtype, "device": "cpu", "max_tokens": 256, "cache_dir": str(tmp_path)}
    embedder = SentenceEmbedder.load(tokenizers.embedder_dir(), **settings)  # not cached: exports first
    (cached,) = tmp_path.glob("*.pt")
    # Real documents of every length: many longer than 256 tokens (truncated), batches padded.
    texts = pq.read_table(corpus_files(mini_corpus_dir)["all"][0], columns=["text"]).column("text").to_pylist()[:60]
    assert max(len(tokenizers.load(tokenizers.EMBEDDER).encode(t).ids) for t in texts) > 256
    model = SentenceTransformer(str(tokenizers.embedder_dir()), device="cpu",
                                model_kwargs={"torch_dtype": getattr(torch, dtype)})
    model.max_seq_length = 256
    reference = model.encode(texts, batch_size=16, convert_to_numpy=True).astype(np.float32)
    ours = embedder.encode(texts, 16)
    np.testing.assert_allclose(ours, reference, atol=BATCH_NOISE[dtype] / 10)  # the same batches: near-equal
    np.testing.assert_allclose(embedder.encode(texts[:1], 1), reference[:1], atol=BATCH_NOISE[dtype])
    assert embedder.dimension() == 384 and embedder.encode([], 16).shape == (0, 384)

    code = ("import sys; from slm.data import tokenizers; from slm.data.embedder import SentenceEmbedder; "
            f"e = SentenceEmbedder.load(tokenizers.embedder_dir(), **{settings!r}); "
            "print(e.dimension(), *(m in sys.modules for m in ('sentence_transformers', 'transformers', "
            "'torch._dynamo')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # Neither the model's libraries nor the export machinery: torch alone loads the cached module.
    assert loaded.stdout.split() == ["384", "False", "False", "False"]
    assert len(list(tmp_path.glob("*.pt"))) == 1  # loaded from the cache, not exported again

    other_dtype = "float32" if dtype == "bfloat16" else "bfloat16"  # auto is float32 without native bf16
    other = SentenceEmbedder.load(tokenizers.embedder_dir(), **{**settings, "dtype": other_dtype})
    assert len(list(tmp_path.glob("*.pt"))) == 2  # another dtype, another program
    assert ((other.encode(texts, 16) * reference).sum(axis=1) / np.linalg.norm(reference, axis=1)).min() > 0.995

    cached.write_bytes(cached.read_bytes()[:1000])  # a damaged cache file is exported anew, not fatal
    np.testing.assert_allclose(SentenceEmbedder.load(tokenizers.embedder_dir(), **settings).encode(texts[:8], 16),
                               ours[:8], atol=BATCH_NOISE[dtype] / 10)


@pytest.mark.slow  # ~2 min warm (an AOTInductor compile when the cache is cold); embed.compile is off on CPU by default
def test_compiled_embedder_writes_the_eager_vectors(mini_corpus_dir, tmp_path):
    """embed.compile=always (AOTInductor): compiled once per machine while other actors
    wait, loaded without Inductor; the same windows, the same vectors as eager."""
    import json
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor
    from dataclasses import asdict

    from slm.data.embed import WindowEmbedder, resolve_dtype

    cfg = EmbedConfig(cache_dir=str(tmp_path / "cache"))
    cfg = {**asdict(cfg), "dtype": resolve_dtype(cfg.dtype, cfg.device)}
    # Two actors starting together on a machine that has no compiled embedder yet: one compiles it, the
    # other waits on the lock and loads the result without importing Inductor or TorchDynamo.
    code = ("import json, sys; from slm.data import tokenizers; from slm.data.embedder import SentenceEmbedder; "
            f"e = SentenceEmbedder.load(tokenizers.embedder_dir(), dtype={cfg['dtype']!r}, device='cpu', "
            f"max_tokens=256, cache_dir={cfg['cache_dir']!r}, compiled=True, threads=1); "
            "print(json.dumps([e.dimension(), 'torch._inductor' in sys.modules, 'torch._dynamo' in sys.modules]))")
    starts = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    outputs = [proc.communicate() for proc in starts]
    results = sorted(json.loads(out.strip().splitlines()[-1]) for out, _ in outputs)
    assert [proc.returncode for proc in starts] == [0, 0]
    # Issue 64: torch's own deprecation inside its export and compile ("isinstance(treespec, LeafSpec)") reached
    # every first embed's worker log as a FutureWarning.
    assert not [err for _, err in outputs if "FutureWarning" in err], [err[-2000:] for _, err in outputs]
    # [dimension, Inductor imported, TorchDynamo imported]: one compiled, the other only loaded
    assert results == [[384, False, False], [384, True, True]]
    assert len(list((tmp_path / "cache").glob("*.aoti.pt2"))) == 1

    # Documents of every length, so that batches are padded, and one batch of a single window (unpadded).
    docs = pq.read_table(corpus_files(mini_corpus_dir)["all"][0], columns=["id", "text", "source", "domain"]).slice(0, 40)
    batch = docs.append_column("shard", pa.array(["generic/part-00000"] * docs.num_rows))
    tables = {}
    for mode in ("never", "always"):
        embedder = WindowEmbedder({**cfg, "compile": mode}, str(tmp_path / mode))
        with ThreadPoolExecutor(1) as thread:  # another thread than the constructor's, as Ray Data calls
            thread.submit(lambda e=embedder: [e(part) for part in (batch, batch.slice(0, 1))]).result()
        tables[mode] = pq.read_table(sorted((tmp_path / mode).rglob("batch-*.parquet"))).sort_by("id")
    eager, compiled = tables["never"], tables["always"]
    assert eager.num_rows > docs.num_rows  # long documents were cut into windows
    assert compiled.drop_columns(["embedding"]).equals(eager.drop_columns(["embedding"]))
    a, b = (np.array(t.column("embedding").to_pylist()) for t in (eager, compiled))
    np.testing.assert_allclose(b, a, atol=BATCH_NOISE[cfg["dtype"]])
    assert (a * b).sum(axis=1).min() > 0.999


def test_compile_auto_on_cpu_only():
    from slm.data.embed import resolve_compile

    assert resolve_compile(EmbedConfig()) == "always"  # compiled once per machine, then free
    assert resolve_compile(EmbedConfig(device="cuda")) == "never"  # measured on CPU only
    assert resolve_compile(EmbedConfig(compile="always", device="cuda")) == "always"
    assert resolve_compile(EmbedConfig(compile="never")) == "never"


def test_a_planted_cache_file_is_never_unpickled(tmp_path, monkeypatch):
    """Issue 19: the embedder's cache held a pickle loaded with weights_only=False, so anyone who could
    write embed.cache_dir (shared storage on a cluster) ran code in the embedding actors. Only what this
    machine exported (its hash recorded in the user's home) is loaded; anything else is exported afresh
    to a local folder."""
    import pickle

    import torch

    from slm.data import embedder as module
    from slm.data.embed import resolve_dtype
    from slm.data.embedder import SentenceEmbedder, export_key

    monkeypatch.setattr(module, "TRUST_DIR", tmp_path / "trust")
    monkeypatch.setattr(module, "LOCAL_EXPORTS", tmp_path / "local")
    dtype = resolve_dtype("auto", "cpu")
    cache = tmp_path / "shared"
    settings = {"dtype": dtype, "device": "cpu", "max_tokens": 256, "cache_dir": str(cache)}
    path = cache / f"{export_key(tokenizers.embedder_dir(), dtype, 'cpu', False, 1)}.pt"
    path.parent.mkdir()
    marker = tmp_path / "pwned"

    class Planted:
        def __reduce__(self):
            return (marker.write_text, ("code ran",))

    torch.save({"forward": Planted(), "inputs": []}, path, pickle_module=pickle)
    embedder = SentenceEmbedder.load(tokenizers.embedder_dir(), **settings)
    assert not marker.exists()
    assert embedder.dimension() == 384 and list((tmp_path / "local").glob("*.pt"))
    # the load looked at the planted file (nothing else was exported into the shared cache) and left it
    assert [p.name for p in cache.glob("*.pt")] == [path.name]


def test_outputs_of_other_inputs_or_fractions_are_never_reused(mini_corpus_dir, tmp_path):
    """Reuse is keyed shard by shard by what made it. Three ways an output went stale: (1) a run with
    another embed.fraction interrupted before its manifest, (2) generic re-imported with --replace,
    (3) a new domain embedded into the same output — after which the clusters are made again."""
    from slm.data.cluster import cluster
    from slm.data.config import ClusterConfig
    from slm.data.importer import import_corpus

    corpus, out = tmp_path / "corpus", tmp_path / "emb"
    texts = pq.read_table(corpus_files(mini_corpus_dir)["all"], columns=["text"]).column("text").to_pylist()
    pq.write_table(pa.table({"text": texts[:24]}), tmp_path / "generic-a.parquet")
    pq.write_table(pa.table({"text": texts[24:48]}), tmp_path / "generic-b.parquet")
    import_corpus(str(tmp_path / "generic-a.parquet"), corpus)
    for domain in ("legal", "medical"):
        legal = pq.read_table(corpus_files(mini_corpus_dir)["train"], columns=["text", "domain"]).to_pydict()
        ours = [t for t, d in zip(legal["text"], legal["domain"], strict=True) if d == domain]
        # spread over the domain: an import writes documents in id order, and the split goes by id, so the
        # first 12 would all fall in one split
        mine = ours[:: max(1, len(ours) // 12)][:12]
        pq.write_table(pa.table({"text": mine}), tmp_path / f"{domain}.parquet")
        import_corpus(str(tmp_path / f"{domain}.parquet"), corpus, domain, valid_fraction=0.5)

    def generic_docs() -> set[str]:
        return set(pq.read_table(embedding_files(out / "generic"), columns=["doc_id"]).column("doc_id").to_pylist())

    # (1) A fraction-0.5 run whose manifest was never written, rerun with fraction 1.0.
    half = EmbedConfig(batch_docs=32, compile="never", fraction=0.5, domains=["legal"])
    embed_corpus(corpus, half, out)
    (out / "manifest.json").unlink()
    whole = EmbedConfig(batch_docs=32, compile="never", domains=["legal"])
    manifest = embed_corpus(corpus, whole, out)
    assert manifest["dropped_stale_shards"] and all(s.startswith("generic/") for s in manifest["dropped_stale_shards"])
    first_generic = set(pq.read_table(corpus_files(corpus)["all"], columns=["id"]).column("id").to_pylist())
    assert generic_docs() == first_generic  # all of them, not the half the interrupted run had
    legal_files = {p: Path(p).stat().st_mtime_ns for p in embedding_files(out / "domains" / "legal")}

    cluster_cfg = ClusterConfig(k=2, sample_size=1000)
    first = cluster(out, cluster_cfg, tmp_path / "clusters")
    assert cluster(out, cluster_cfg, tmp_path / "clusters")["config_hash"] == first["config_hash"]  # reused

    # (2) generic replaced, (3) medical embedded too: no window of a document that left the corpus
    # survives, legal is not redone, and the clusters follow the embeddings (made again, medical assigned).
    import_corpus(str(tmp_path / "generic-b.parquet"), corpus, replace=True)
    manifest = embed_corpus(corpus, EmbedConfig(batch_docs=32, compile="never", domains=["legal", "medical"]), out)
    now_generic = set(pq.read_table(corpus_files(corpus)["all"], columns=["id"]).column("id").to_pylist())
    assert now_generic.isdisjoint(first_generic) and generic_docs() == now_generic
    assert {p: Path(p).stat().st_mtime_ns for p in embedding_files(out / "domains" / "legal")} == legal_files
    assert manifest["documents"] == len(now_generic) + sum(
        pq.read_metadata(f).num_rows for f in corpus_files(corpus)["train"])
    second = cluster(out, cluster_cfg, tmp_path / "clusters")
    assert second["config_hash"] != first["config_hash"]
    assigned = set(pq.read_table(tmp_path / "clusters" / "assignments", columns=["domain"]).column("domain").to_pylist())
    assert assigned == {"generic", "legal", "medical"}
