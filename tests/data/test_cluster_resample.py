"""cluster → histogram → resample on the embedded mini corpus (real Ray, real embeddings, real text),
and our DSIR against the reference implementation (PyPI data-selection)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from slm.artifacts import file_sha256, write_manifest
from slm.data.cluster import assign_batch, cluster, load_centroids, save_centroids
from slm.data.config import ClusterConfig
from slm.data.histogram import domain_histograms
from slm.data.resample import SUBSETS, resample
from tests.conftest import embed_config_for_tests

pytestmark = pytest.mark.ray

CFG = ClusterConfig(k=6, fine_k=3, sample_size=1500, seed=7)


@pytest.fixture(scope="module")
def clusters(embedded, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "clusters"
    return out, cluster(embedded[0], CFG, out)


def test_assignments_cover_every_window_with_consistent_ids(clusters, embedded):
    out, manifest = clusters
    table = pq.read_table(out / "assignments").to_pydict()
    assert len(table["id"]) == embedded[1]["windows"]
    assert all(0 <= c < CFG.k for c in table["coarse"])
    assert all(leaf // CFG.fine_k == c for leaf, c in zip(table["leaf"], table["coarse"], strict=True))
    info = json.loads((out / "clusters.json").read_text())
    assert info["leaves"] == CFG.k * CFG.fine_k
    assert sum(r["windows"] for r in info["sizes"]) == len(table["id"])
    assert all(len(t) >= 1 for t in info["titles"].values())
    assert manifest["sample_windows"] <= CFG.sample_size


@pytest.mark.slow  # a second clustering (~40 s); test_reproducible runs the whole pipeline twice
def test_clustering_is_deterministic_under_a_seed(clusters, embedded, tmp_path):
    out, _ = clusters
    again = tmp_path / "clusters"
    cluster(embedded[0], CFG, again)
    a, b = np.load(out / "centroids.npz"), np.load(again / "centroids.npz")
    np.testing.assert_array_equal(a["coarse"], b["coarse"])
    np.testing.assert_array_equal(a["fine"], b["fine"])
    assert cluster(embedded[0], CFG, again)["complete"]  # complete and current: skipped


def test_wrong_embedding_dimension_is_a_clear_error(clusters):
    out, _ = clusters
    batch = pa.table({"id": ["x"], "doc_id": ["x"], "source": ["s"], "domain": ["generic"], "text": ["t"],
                      "n_tokens": [1], "embedding": pa.FixedSizeListArray.from_arrays(np.zeros(128, np.float32), 128)})
    with pytest.raises(ValueError, match="embedding dimension 128 does not match the centroids' 384"):
        assign_batch(batch, str(out / "centroids.npz"), file_sha256(out / "centroids.npz"))


def test_the_assigning_tasks_refuse_centroids_other_than_their_stage_wrote(clusters, tmp_path):
    """The assigning tasks read the centroids by path and digest (not through the object store)."""
    out, _ = clusters
    arrays = np.load(out / "centroids.npz")
    digest = save_centroids(tmp_path / "centroids.npz", arrays["coarse"], arrays["fine"])
    assert digest == file_sha256(out / "centroids.npz")  # the same arrays, the same bytes
    np.testing.assert_array_equal(load_centroids(str(tmp_path / "centroids.npz"), digest)[1], arrays["fine"])
    save_centroids(tmp_path / "centroids.npz", arrays["coarse"] + 1, arrays["fine"])  # rewritten meanwhile
    with pytest.raises(ValueError, match="not the centroids this stage wrote"):
        load_centroids(str(tmp_path / "centroids.npz"), digest)


def test_histograms_smoothing_and_errors(clusters):
    out, _ = clusters
    h = domain_histograms(out, alpha=0.5)
    assert set(h["domains"]) == {"legal", "medical", "code"}
    for d in h["domains"].values():
        p = np.array(d["p"])
        assert abs(p.sum() - 1) < 1e-9 and (p > 0).sum() == (np.array(h["generic"]["p"]) > 0).sum()
        assert 0 < d["entropy"] <= np.log(h["leaves"]) + 1e-9
    with pytest.raises(ValueError, match="domain 'poetry' has no windows"):
        domain_histograms(out, 0.5, ["poetry"])
    # Issue 19: resampling for a domain the histograms lack said only "no histogram for domain": now what to do
    with pytest.raises(ValueError, match=r"no histogram for domain 'poetry'.*embed\.domains.*cluster and histogram"):
        resample(out, h, "poetry", 1000, "crisp", out.parent / "never")


def test_a_domain_whose_clusters_are_absent_from_generic_fails(clusters, tmp_path):
    out, _ = clusters
    info = json.loads((out / "clusters.json").read_text())
    legal_leaves = {r["leaf"] for r in info["sizes"] if r["domain"] == "legal"}
    info["sizes"] = [r for r in info["sizes"] if not (r["domain"] == "generic" and r["leaf"] in legal_leaves)]
    (tmp_path / "clusters.json").write_text(json.dumps(info))
    write_manifest(tmp_path, {"stage": "cluster"})  # as a cluster stage that made these sizes would
    with pytest.raises(ValueError, match="all of its windows fall in leaves that hold no generic"):
        domain_histograms(tmp_path, 0.5, ["legal"])


@pytest.fixture(scope="module")
def resampled(clusters, mini_corpus_dir, tmp_path_factory):
    out, _ = clusters
    h = domain_histograms(out, alpha=0.5)
    root = tmp_path_factory.mktemp("resampled")
    return {(d, m): resample(out, h, d, 30000, m, root / d / m, corpus_dir=mini_corpus_dir,
                             embed=embed_config_for_tests())
            for d in ("legal", "medical") for m in SUBSETS}, root


def test_crisp_matches_the_domain_histogram_far_better_than_uniform(resampled):
    results, _ = resampled
    for domain in ("legal", "medical"):
        crisp, uniform = results[(domain, "crisp")], results[(domain, "uniform")]
        assert crisp["kl_resampled_to_domain"] < 0.5 * uniform["kl_resampled_to_domain"], domain
        for m in SUBSETS:  # every registered subset meets the budget within Poisson noise / one window
            assert 0.6 * 30000 < results[(domain, m)]["tokens_drawn"] < 1.6 * 30000, (domain, m)


def test_dsir_on_ray_data_weighs_and_selects_as_one_process_would(resampled, clusters):
    """The distributed path (buckets hashed once into list<uint16>, fitted, scored, sorted, filtered) gives
    every selected window the weight one process computes from the same texts, and selects by key among
    the windows of ≥ 100 words. (The mini corpus is embedded whole, so the corpus's windows, which DSIR
    reads, are the assignments' windows.)"""
    from slm.data import dsir

    out, _ = clusters
    rows = pq.read_table(out / "assignments", columns=["id", "domain", "text"]).to_pylist()
    generic = [r for r in rows if r["domain"] == "generic"]
    p_t = sum(dsir.ngram_counts(r["text"]) for r in rows if r["domain"] == "legal")
    p_r = sum(dsir.ngram_counts(r["text"]) for r in generic)
    log_diff = np.log(p_t / p_t.sum() + dsir.EPS) - np.log(p_r / p_r.sum() + dsir.EPS)
    weights = dict(zip((r["id"] for r in generic), dsir.log_weights([r["text"] for r in generic], log_diff),
                       strict=True))
    results, root = resampled
    chosen = pq.read_table(root / "legal" / "dsir" / "data", columns=["id", "log_weight"]).to_pylist()
    assert chosen and len({r["id"] for r in chosen}) == len(chosen)  # without replacement
    for r in chosen:
        assert r["log_weight"] == pytest.approx(weights[r["id"]], rel=1e-9, abs=1e-6), r["id"]
    threshold = results[("legal", "dsir")]["key_threshold"]
    long_enough = {r["id"] for r in generic if len(dsir.WORD_PUNCT.findall(r["text"])) >= 100}
    assert 0 < len(long_enough) < len(generic)  # the filter has windows to keep and to drop
    keys = {i: w - np.log(-np.log(dsir.hash_uniform(f"dsir:0:{i}"))) for i, w in weights.items() if i in long_enough}
    assert {r["id"] for r in chosen} == {i for i, k in keys.items() if k >= threshold}
    assert results[("legal", "dsir")]["windows_drawn_unplaced"] == 0


def generic_sampled(out: Path, every: int | None, to: Path) -> tuple[pa.Table, np.ndarray]:
    """The cluster stage's assignments with one generic window in ``every`` kept (None: none), as a
    smaller embed.fraction would leave them: the full table and the rows kept."""
    table = pq.read_table(out / "assignments")
    generic = pc.equal(table.column("domain"), "generic").to_numpy(zero_copy_only=False)
    keep = ~generic | ((np.arange(table.num_rows) % every == 0) if every else False)
    (to / "assignments").mkdir(parents=True)
    pq.write_table(table.filter(pa.array(keep)), to / "assignments" / "part-0.parquet")
    (to / "clusters.json").write_text((out / "clusters.json").read_text())
    write_manifest(to, {"stage": "cluster"})  # as the cluster stage records what it wrote (resample checks it)
    return table, keep


def test_dsir_selects_from_windows_the_embedding_sample_left_out(clusters, mini_corpus_dir, tmp_path):
    """DSIR needs no embedding: with the cluster stage's assignments cut to half of the generic windows
    (as an embed.fraction of 0.5 would leave them), it still selects from every generic window of the
    corpus; the windows it picks outside the assignments have no leaf and are counted apart."""
    out, _ = clusters
    table, keep = generic_sampled(out, 2, tmp_path / "clusters")
    m = resample(tmp_path / "clusters", domain_histograms(out, 0.5), "legal", 30000, "dsir", tmp_path / "dsir",
                 corpus_dir=mini_corpus_dir, embed=embed_config_for_tests())
    chosen = pq.read_table(tmp_path / "dsir" / "data", columns=["id", "leaf"])
    left_out = set(table.filter(pa.array(~keep)).column("id").to_pylist())
    unplaced = [i for i, leaf in zip(*chosen.to_pydict().values(), strict=True) if leaf < 0]
    assert unplaced and set(unplaced) <= left_out
    assert m["windows_drawn_unplaced"] == len(unplaced) and m["windows_drawn"] == chosen.num_rows
    assert m["kl_resampled_to_domain"] >= 0  # over the placed picks


def test_dsir_with_no_pick_embedded_keeps_its_subset_and_leaves_the_kl_unmeasured(clusters, mini_corpus_dir,
                                                                                 tmp_path, capsys):
    """A small embed.fraction can leave every window DSIR picks without a leaf (the whole-corpus quickstart
    at 0.5%): the subset is the data, the KL only a diagnostic of it, so the subset is written and the KL
    recorded as not measured, with a line that says why."""
    out, _ = clusters
    generic_sampled(out, None, tmp_path / "clusters")
    m = resample(tmp_path / "clusters", domain_histograms(out, 0.5), "legal", 30000, "dsir", tmp_path / "dsir",
                 corpus_dir=mini_corpus_dir, embed=embed_config_for_tests())
    chosen = pq.read_table(tmp_path / "dsir" / "data", columns=["leaf"]).column("leaf").to_pylist()
    assert chosen and set(chosen) == {-1} and m["windows_drawn_unplaced"] == m["windows_drawn"] == len(chosen)
    assert m["kl_resampled_to_domain"] is None and m["kl_domain_to_resampled_smoothed"] is None
    assert f"not measured: none of the {len(chosen)} windows drawn was embedded" in capsys.readouterr().out


def test_resampling_is_deterministic(resampled, clusters, tmp_path):
    results, root = resampled
    out, _ = clusters
    again = resample(out, domain_histograms(out, 0.5), "legal", 30000, "crisp", tmp_path / "again")
    assert again["windows_drawn"] == results[("legal", "crisp")]["windows_drawn"]
    ids = lambda p: sorted(pq.read_table(p / "data", columns=["id", "copy"]).to_pylist(), key=str)  # noqa: E731
    assert ids(tmp_path / "again") == ids(root / "legal" / "crisp")


def test_a_complete_resample_is_skipped_until_an_input_or_setting_changes(clusters, tmp_path, capsys):
    out, _ = clusters
    h = domain_histograms(out, 0.5)
    first = resample(out, h, "legal", 30000, "crisp", tmp_path / "r")
    written = {f: f.stat().st_mtime_ns for f in (tmp_path / "r").rglob("*")}
    capsys.readouterr()
    assert resample(out, h, "legal", 30000, "crisp", tmp_path / "r") == first
    assert "complete and current" in capsys.readouterr().out
    assert {f: f.stat().st_mtime_ns for f in (tmp_path / "r").rglob("*")} == written  # nothing rewritten
    other = resample(out, h, "legal", 30000, "crisp", tmp_path / "r", seed=1)  # another draw
    assert other["seed"] == 1 and other["config_hash"] != first["config_hash"]


def test_bad_resample_requests(clusters):
    out, _ = clusters
    h = domain_histograms(out, 0.5)
    with pytest.raises(ValueError, match="'resample.methods': unknown resample method 'random'"):
        resample(out, h, "legal", 1000, "random", Path("/nonexistent"))
    with pytest.raises(ValueError, match="no histogram for domain 'poetry'"):
        resample(out, h, "poetry", 1000, "crisp", Path("/nonexistent"))


def test_dsir_weights_equal_the_reference_implementation(mini_corpus_dir, tmp_path):
    """Same features, same p_T and p_R: the same per-document log-importance weights as data-selection."""
    from data_selection import HashedNgramDSIR

    from slm.data import dsir

    files = sorted((mini_corpus_dir / "generic").glob("*.parquet"))
    raw = pq.read_table(files, columns=["text"]).column("text").to_pylist()[:120]
    target_files = sorted((mini_corpus_dir / "domains" / "legal" / "train").glob("*.parquet"))
    target = pq.read_table(target_files, columns=["text"]).column("text").to_pylist()[:40]
    for name, texts in (("raw", raw), ("target", target)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    ref = HashedNgramDSIR([str(tmp_path / "raw.jsonl")], [str(tmp_path / "target.jsonl")],
                          cache_dir=str(tmp_path / "cache"), num_proc=1, ngrams=2, num_buckets=10000)
    ref.fit_importance_estimator(num_tokens_to_fit="all")
    ref.compute_importance_weights()
    ref_weights = np.load(tmp_path / "cache" / "log_importance_weights" / "0.npy")

    p_t = sum(dsir.ngram_counts(t) for t in target)
    p_r = sum(dsir.ngram_counts(t) for t in raw)
    log_diff = np.log(p_t / p_t.sum() + dsir.EPS) - np.log(p_r / p_r.sum() + dsir.EPS)
    np.testing.assert_allclose(log_diff, ref.log_diff, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dsir.log_weights(raw, log_diff), ref_weights, rtol=1e-9, atol=1e-6)


@pytest.fixture(scope="module")
def bpe(mini_corpus_dir, tmp_path_factory):
    from slm.data.bpe import train_bpe

    out = tmp_path_factory.mktemp("tok")
    return out, train_bpe(mini_corpus_dir, out, vocab_size=1024)


def test_bpe_tokenizer(bpe):
    from tokenizers import Tokenizer

    out, manifest = bpe
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab_size() == manifest["vocab_size"] == 1024
    assert tok.token_to_id("<|endoftext|>") == 0
    text = "Licensee shall not sublicense the Software; naïve café ≠ 42."
    assert tok.decode(tok.encode(text).ids) == text  # byte-level: every string round-trips
    assert len(tok.encode(text).ids) < len(text.encode())  # and it compresses


def test_a_current_tokenizer_is_not_trained_again_until_a_setting_changes(bpe, mini_corpus_dir, tmp_path, capsys):
    import shutil

    from slm.data.bpe import train_bpe

    out, manifest = bpe
    shutil.copytree(out, tmp_path / "tok")  # the module's tokenizer stays as the other tests read it
    written = (tmp_path / "tok" / "tokenizer.json").stat().st_mtime_ns
    capsys.readouterr()
    assert train_bpe(mini_corpus_dir, tmp_path / "tok", vocab_size=1024) == manifest
    assert "is complete and current" in capsys.readouterr().out
    assert (tmp_path / "tok" / "tokenizer.json").stat().st_mtime_ns == written
    again = train_bpe(mini_corpus_dir, tmp_path / "tok", vocab_size=512)  # another setting: trained again
    assert again["vocab_size"] == 512 and again["config_hash"] != manifest["config_hash"]
    assert "is complete and current" not in capsys.readouterr().out


def test_pack_conserves_tokens_and_keeps_cluster_ids(bpe, resampled, tmp_path):
    from tokenizers import Tokenizer

    from slm.data.pack import pack
    from slm.train.data import PackedArrays, arrays_digest, materialize, recorded_digest

    tok_dir, _ = bpe
    _, root = resampled
    source = root / "legal" / "crisp" / "data"
    seq_len = 64
    manifest = pack(source, tok_dir / "tokenizer.json", seq_len, tmp_path / "packed")
    table = pq.read_table(tmp_path / "packed" / "data")
    assert table.column("tokens").type == pa.list_(pa.uint16(), seq_len + 1)
    assert table.num_rows == manifest["sequences"] > 0
    windows = pq.read_table(source, columns=["text", "leaf", "domain"])
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    per_leaf = {}
    for text, leaf in zip(windows.column("text").to_pylist(), windows.column("leaf").to_pylist(), strict=True):
        per_leaf[leaf] = per_leaf.get(leaf, 0) + len(tok.encode(text).ids) + 1  # + the separator
    packed_per_leaf = {}
    for leaf in table.column("leaf").to_pylist():
        packed_per_leaf[leaf] = packed_per_leaf.get(leaf, 0) + seq_len + 1
    for leaf, n in per_leaf.items():  # each leaf loses less than one row: its tail
        assert 0 <= n - packed_per_leaf.get(leaf, 0) < seq_len + 1, leaf
    assert set(table.column("domain").to_pylist()) == {"generic"}
    # issue 46: tokenized before the shuffle, the rows are the bytes the text-joining packer made (pack_texts
    # over each leaf's windows in its order: by id, then the leaf's seeded permutation)
    import zlib

    from slm.data.pack import pack_texts

    ids = pq.read_table(source, columns=["id"]).column("id").to_pylist()
    texts = windows.column("text").to_pylist()
    for leaf in sorted(per_leaf)[:5]:
        mine = sorted((i for i, lf in enumerate(windows.column("leaf").to_pylist()) if lf == leaf), key=ids.__getitem__)
        order = np.random.default_rng(zlib.crc32(f"generic/{leaf}".encode())).permutation(len(mine))
        expected = pack_texts(tok, [texts[mine[i]] for i in order], seq_len)
        got = np.array([r for r, lf in zip(table.column("tokens").to_pylist(), table.column("leaf").to_pylist(),
                                           strict=True) if lf == leaf], dtype=np.uint16).reshape(-1, seq_len + 1)
        assert np.array_equal(got, expected), leaf
    arrays = PackedArrays.open(materialize(tmp_path / "packed"))  # what training reads
    # the digest a sweep's data fingerprint is made of, as recorded, is the arrays' own
    assert recorded_digest(tmp_path / "packed" / "arrays") == arrays_digest(tmp_path / "packed" / "arrays")
    tokens, coarse = arrays.take(np.arange(8))
    assert len(arrays) == table.num_rows and tokens.shape == (8, seq_len + 1) and coarse.shape == (8,)
    assert int(tokens.max()) < 1024 and sorted(np.unique(arrays.coarse).tolist()) == sorted(
        set(table.column("coarse").to_pylist()))
    # complete and current: a rerun reads nothing and rewrites nothing; another sequence length repacks
    written = {f: f.stat().st_mtime_ns for f in (tmp_path / "packed" / "data").iterdir()}
    assert pack(source, tok_dir / "tokenizer.json", seq_len, tmp_path / "packed") == manifest
    assert {f: f.stat().st_mtime_ns for f in (tmp_path / "packed" / "data").iterdir()} == written
    assert pack(source, tok_dir / "tokenizer.json", 32, tmp_path / "packed")["seq_len"] == 32
