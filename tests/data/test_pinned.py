"""Pinned cluster assignments on the embedded mini corpus: reused whole, on a corpus that drifted, grown
in parts, and refused when made from something else (real Ray, real embeddings, real text)."""

from __future__ import annotations

import shutil
from dataclasses import asdict, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from slm.config import ConfigError
from slm.data.cluster import assign, cluster
from slm.data.config import ClusterConfig
from slm.data.embed import load_embedder, normalize, resolve_dtype
from slm.data.importer import import_corpus
from slm.data.pinned import CENTROIDS_KEY, HEADER_KEY, Pinned, cluster_pinned, content_keys, write_pinned
from tests.conftest import embed_config_for_tests

pytestmark = pytest.mark.ray

CFG = ClusterConfig(k=4, fine_k=2, sample_size=1500, seed=3)
EMBED = replace(embed_config_for_tests(), splits=["all", "train"])


def clusters_by_id(folder) -> dict[str, tuple[int, int]]:
    t = pq.read_table(folder / "assignments", columns=["id", "coarse", "leaf"]).to_pydict()
    return dict(zip(t["id"], zip(t["coarse"], t["leaf"], strict=True), strict=True))


@pytest.fixture(scope="module")
def pinned(embedded, tmp_path_factory):
    """The mini corpus clustered by the k-means, and pinned."""
    root = tmp_path_factory.mktemp("pinned")
    cluster(embedded[0], CFG, root / "fitted")
    header = write_pinned(root / "fitted", root / "pinned.parquet", CFG, EMBED, {"test": True})
    return root, header


def test_pinned_assignments_reproduce_the_fitted_ones_without_embedding(pinned, mini_corpus_dir, embedded):
    root, header = pinned
    file = Pinned.read(root / "pinned.parquet")
    assert file.fingerprint == header["fingerprint"]
    assert header["windows"] == embedded[1]["windows"] >= header["distinct"] == file.table.num_rows
    cfg = replace(CFG, assignments=str(root / "pinned.parquet"), max_unpinned=0.0)
    manifest = cluster_pinned(mini_corpus_dir, cfg, EMBED, root / "reused")
    assert manifest["windows"] == embedded[1]["windows"] and manifest["embedded"] == 0
    assert clusters_by_id(root / "reused") == clusters_by_id(root / "fitted")
    a, b = np.load(root / "fitted" / "centroids.npz"), np.load(root / "reused" / "centroids.npz")
    np.testing.assert_array_equal(a["fine"], b["fine"])
    assert cluster_pinned(mini_corpus_dir, cfg, EMBED, root / "reused")["complete"]  # current: skipped


def drifted_corpus(mini_corpus_dir, root):
    """The mini corpus with two generic documents edited and one added: windows the file lacks."""
    generic = pq.read_table(sorted((mini_corpus_dir / "generic").glob("*.parquet")), columns=["text"])
    texts = generic.column("text").to_pylist()
    # The edit at the end goes to the longest document: its windows before the edit stay as they were
    # (a one-window document would have none), whatever corpus the tests were given.
    longest = max(range(len(texts)), key=lambda i: len(texts[i]))
    texts[longest] = texts[longest] + " An added closing sentence, as in a package's new version."
    rewritten = 1 if longest == 0 else 0
    texts[rewritten] = "Rewritten: " + texts[rewritten]
    texts.append("A document that no earlier build had. " * 30)
    pq.write_table(pa.table({"text": texts}), root / "generic.parquet")
    corpus = root / "corpus"
    import_corpus(str(root / "generic.parquet"), corpus)
    for domain in ("legal", "medical", "code"):
        shutil.copytree(mini_corpus_dir / "domains" / domain, corpus / "domains" / domain)
    return corpus


@pytest.mark.slow  # ~2.5 minutes on 2 cores: it embeds again
def test_a_drifted_corpus_keeps_its_found_windows_and_assigns_the_new_ones(pinned, mini_corpus_dir, tmp_path):
    root, _ = pinned
    corpus = drifted_corpus(mini_corpus_dir, tmp_path)
    cfg = replace(CFG, assignments=str(root / "pinned.parquet"))
    with pytest.raises(ValueError, match=r"lacks \d+ of this job's \d+ windows .* by source, ") as refused:
        cluster_pinned(corpus, replace(cfg, max_unpinned=0.0), EMBED, tmp_path / "refused")
    assert not (tmp_path / "refused" / "assignments").exists()
    manifest = cluster_pinned(corpus, cfg, EMBED, tmp_path / "drifted")
    new = manifest["embedded"]
    assert 3 <= new <= 10 and f"{new} of" in str(refused.value)  # the three documents' windows, named
    assert manifest["found"] == manifest["windows"] - new
    table = pq.read_table(tmp_path / "drifted" / "assignments")
    fitted = pq.read_table(root / "fitted" / "assignments").to_pydict()
    by_text = dict(zip(fitted["text"], zip(fitted["coarse"], fitted["leaf"], strict=True), strict=True))
    found = table.filter(table.column("pinned")).to_pydict()
    assert all(by_text[t] == (c, leaf) for t, c, leaf in zip(found["text"], found["coarse"], found["leaf"], strict=True))
    # Keyed by content: the edited document is a new id, but its windows before the edit are found.
    assert set(found["id"]) - set(fitted["id"])
    # The new windows: the nearest pinned centroids of their embeddings.
    fresh = table.filter(pc.invert(table.column("pinned")))
    embedder = load_embedder(asdict(replace(EMBED, dtype=resolve_dtype(EMBED.dtype, "cpu"))))
    x = normalize(embedder.encode(fresh.column("text").to_pylist(), EMBED.encode_batch))
    file = Pinned.read(root / "pinned.parquet")
    coarse, leaf = assign(x, file.coarse_centroids, file.fine_centroids)
    assert fresh.column("coarse").to_pylist() == coarse.tolist()
    assert fresh.column("leaf").to_pylist() == leaf.tolist()


@pytest.mark.slow  # ~2.5 minutes on 2 cores: it embeds again
def test_a_file_grows_in_parts_to_the_same_clusters(pinned, mini_corpus_dir, tmp_path):
    """Part 1 pinned a subset; part 2 embeds the rest and writes the union back: every window then has
    the clusters the whole file gives it, and the grown file covers the whole corpus."""
    root, header = pinned
    part1 = tmp_path / "part1"
    shutil.copytree(root / "fitted", part1, ignore=shutil.ignore_patterns("assignments"))
    whole = pq.read_table(root / "fitted" / "assignments")
    pq.write_table(whole.filter(pc.equal(whole.column("domain"), "generic")), tmp_path / "generic-only.parquet")
    (part1 / "assignments").mkdir()
    shutil.move(tmp_path / "generic-only.parquet", part1 / "assignments" / "part.parquet")
    write_pinned(part1, tmp_path / "grown.parquet", CFG, EMBED, {"part": 1})
    assert set(Pinned.read(tmp_path / "grown.parquet").header["by_domain"]) == {"generic"}
    cfg = replace(CFG, assignments=str(tmp_path / "grown.parquet"), max_unpinned=1.0)
    manifest = cluster_pinned(mini_corpus_dir, cfg, EMBED, tmp_path / "part2")
    assert manifest["embedded"] == whole.num_rows - part1_rows(whole)
    grown = write_pinned(tmp_path / "part2", tmp_path / "grown.parquet", cfg, EMBED, {"part": 2})
    assert grown["distinct"] == header["distinct"]
    assert clusters_by_id(tmp_path / "part2") == clusters_by_id(root / "fitted")


def part1_rows(whole: pa.Table) -> int:
    return pc.sum(pc.equal(whole.column("domain"), "generic")).as_py()


def test_a_file_of_other_settings_or_damaged_is_refused(pinned, mini_corpus_dir, tmp_path):
    root, _ = pinned
    path = str(root / "pinned.parquet")
    with pytest.raises(ConfigError, match=r"cluster.k=5 \(the file: 4\)"):
        cluster_pinned(mini_corpus_dir, replace(CFG, k=5, assignments=path), EMBED, tmp_path / "a")
    with pytest.raises(ConfigError, match=r"embed.max_tokens=128 \(the file: 256\)"):
        cluster_pinned(mini_corpus_dir, replace(CFG, assignments=path), replace(EMBED, max_tokens=128), tmp_path / "b")
    table = pq.read_table(path)
    edited = table.set_column(3, "coarse", pc.add(table.column("coarse"), 1))
    pq.write_table(edited, tmp_path / "edited.parquet")
    with pytest.raises(ValueError, match="do not match its recorded fingerprint"):
        Pinned.read(tmp_path / "edited.parquet")
    pq.write_table(table.replace_schema_metadata(None), tmp_path / "plain.parquet")
    with pytest.raises(ValueError, match="is not a pinned assignments file"):
        Pinned.read(tmp_path / "plain.parquet")
    with pytest.raises(FileNotFoundError, match="cluster.assignments: .*missing.parquet does not exist"):
        Pinned.read(tmp_path / "missing.parquet")
    assert HEADER_KEY in table.schema.metadata and CENTROIDS_KEY in table.schema.metadata
    assert len(content_keys(["a"])[0]) == 16
