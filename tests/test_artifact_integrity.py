"""Every artifact checked before it is trusted (issue 32): a stage's manifest records its files' sizes and
hashes; what reads them stops, in one line naming the file, when a file was zeroed, truncated or swapped.
The artifacts are the real ones the data stages made for the training tests (`train_run`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from slm.artifacts import ArtifactError, changed_files, check_recorded, describe_files, verify, write_manifest


def corrupt(path: Path, how: str, other: Path | None = None) -> None:
    data = path.read_bytes()
    if how == "zeroed":  # in place, same size: only the hash can tell
        path.write_bytes(bytes(len(data)))
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "swapped":  # another file of the same artifact in its place
        path.write_bytes(other.read_bytes())
    else:
        raise ValueError(how)


def test_a_manifest_records_its_stage_s_files_and_verify_names_what_differs(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.bin").write_bytes(b"x" * 100)
    (tmp_path / "data" / "b.bin").write_bytes(b"y" * 100)
    (tmp_path / ".lock").write_text("")  # hidden: not the stage's
    (tmp_path / "arrays").mkdir()  # another stage's output, with its own manifest
    (tmp_path / "arrays" / "t.npy").write_bytes(b"z")
    write_manifest(tmp_path / "arrays", {"stage": "arrays"})
    manifest = write_manifest(tmp_path, {"stage": "pack"})
    assert sorted(manifest["files"]) == ["data/a.bin", "data/b.bin"]
    assert manifest["files"] == describe_files(tmp_path)
    verify(tmp_path, "remake")
    for how in ("zeroed", "truncated", "swapped"):
        corrupt(tmp_path / "data" / "a.bin", how, tmp_path / "data" / "b.bin")
        with pytest.raises(ArtifactError) as err:
            verify(tmp_path, "rm -r it and rerun")
        message = str(err.value)
        assert message.startswith(f"{tmp_path / 'data' / 'a.bin'}: ") and message.endswith("remake it: rm -r it and rerun")
        assert "\n" not in message
        if how == "truncated":
            assert "50 bytes, its stage wrote 100" in message
            verify(tmp_path, "…", hashes=False, only=["data/b.bin"])  # the others still pass
        (tmp_path / "data" / "a.bin").write_bytes(b"x" * 100)
    (tmp_path / "data" / "b.bin").unlink()
    with pytest.raises(ArtifactError, match=r"b.bin: missing"):
        verify(tmp_path, "…", hashes=False)


def test_a_manifest_never_records_a_changed_file_its_stage_did_not_write(tmp_path):
    """Issue 44: a stage that keeps earlier files rewrote its manifest with a damaged file's hash."""
    for name in ("a.bin", "b.bin"):
        (tmp_path / name).write_bytes(name.encode() * 50)
    first = write_manifest(tmp_path, {"stage": "s"})
    assert changed_files(tmp_path) == {}
    corrupt(tmp_path / "a.bin", "zeroed")
    (tmp_path / "c.bin").write_bytes(b"new")
    assert list(changed_files(tmp_path)) == ["a.bin"]
    with pytest.raises(ArtifactError, match=r"a.bin: changed since its stage wrote it .*not recorded over"):
        write_manifest(tmp_path, {"stage": "s"}, written=lambda rel: rel == "c.bin")
    assert (tmp_path / "manifest.json").read_text().count("a.bin") == 1  # the old record stands
    assert first["files"]["a.bin"]["sha256"] in (tmp_path / "manifest.json").read_text()
    second = write_manifest(tmp_path, {"stage": "s"}, written=lambda rel: rel in ("a.bin", "c.bin"))  # remade
    assert sorted(second["files"]) == ["a.bin", "b.bin", "c.bin"] and changed_files(tmp_path) == {}


def test_a_training_run_records_what_it_wrote_and_checks_an_earlier_run_s_checkpoints(tmp_path):
    """A run under a new configuration trains into the folder of an earlier one: its own model, logs and
    checkpoints are recorded as written; the earlier run's checkpoints must still be what was recorded."""
    from slm.train.trainer import _written_by

    for rel in ("local_train/old-1234/step-00000010/worker-0.pt", "model.safetensors", "summary.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"old" * 40)
    write_manifest(tmp_path, {"stage": "pretrain", "config_hash": "old"})
    new_ckpt = tmp_path / "local_train/new-5678/step-00000010/worker-0.pt"
    new_ckpt.parent.mkdir(parents=True)
    for path in (new_ckpt, tmp_path / "model.safetensors", tmp_path / "summary.json"):
        path.write_bytes(b"new" * 40)  # rewritten by the new run: recorded as written
    written = write_manifest(tmp_path, {"stage": "pretrain", "config_hash": "new"},
                             written=lambda rel: _written_by(rel, "new-5678"))
    assert written["files"]["model.safetensors"]["sha256"] == written["files"][str(new_ckpt.relative_to(tmp_path))]["sha256"]
    corrupt(tmp_path / "local_train/old-1234/step-00000010/worker-0.pt", "zeroed")
    with pytest.raises(ArtifactError, match=r"old-1234/step-00000010/worker-0.pt: changed since its stage wrote it"):
        write_manifest(tmp_path, {"stage": "pretrain", "config_hash": "newer"},
                       written=lambda rel: _written_by(rel, "newer-9abc"))


@pytest.mark.parametrize("how", ["zeroed", "truncated", "swapped"])
def test_a_damaged_model_is_refused_by_what_loads_it_naming_the_file(tmp_path, how):
    """The loaders every command goes through (generate, export, specialize --source, a teacher, a
    sweep's snapshots): a model its run's manifest records is checked before it is read."""
    from slm import methods
    from slm.models.gpt import GPT, PRESETS, load_dense, save_dense

    run = tmp_path / "checkpoints" / "generic-tiny"
    (run / "snapshots").mkdir(parents=True)
    save_dense(GPT(PRESETS["tiny"]), run / "model.safetensors")
    save_dense(GPT(PRESETS["tiny"]), run / "snapshots" / "step-00000010.safetensors")
    write_manifest(run, {"stage": "pretrain"})
    assert check_recorded(run / "model.safetensors") and methods.load_model(run / "model.safetensors")
    corrupt(run / "model.safetensors", how, run / "manifest.json")
    for load in (methods.load_model, load_dense):
        with pytest.raises(ArtifactError) as err:
            load(run / "model.safetensors")
        assert str(err.value).startswith(f"{run / 'model.safetensors'}: ") and "\n" not in str(err.value)
        assert f"rm -r {run}" in str(err.value)
    load_dense(run / "snapshots" / "step-00000010.safetensors")  # its neighbour is whole
    loose = tmp_path / "elsewhere.safetensors"  # no manifest records it: read as it is, and refused if unreadable
    loose.write_bytes((run / "snapshots" / "step-00000010.safetensors").read_bytes()[:1000])
    with pytest.raises(ArtifactError, match=rf"{loose}: not a readable safetensors file"):
        methods.load_model(loose)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.ray
@pytest.mark.parametrize("how", ["zeroed", "truncated", "swapped"])
def test_corrupt_packed_arrays_stop_the_run_naming_the_file(train_run, tmp_path, how):
    from slm.layout import RunLayout
    from slm.train.data import PackedArrays, materialize, packed_arrays

    arrays = packed_arrays(RunLayout.of(train_run), "generic")
    packed = _copy(arrays.parent, tmp_path / "generic")
    corrupt(packed / "arrays" / "coarse.npy", how, packed / "arrays" / "leaf.npy")
    with pytest.raises(ArtifactError, match=r"arrays/coarse.npy: .*remake it: rm -r .*arrays"):
        materialize(packed)  # the driver, as a run starts: the bytes
    if how == "truncated":
        with pytest.raises(ArtifactError, match=r"coarse.npy: \d[\d,]* bytes, its stage wrote"):
            PackedArrays.open(packed / "arrays")  # a worker: the sizes


@pytest.mark.ray
@pytest.mark.parametrize("how", ["zeroed", "truncated", "swapped"])
def test_a_corrupt_packed_parquet_file_stops_the_arrays_being_made(train_run, tmp_path, how):
    from slm.layout import RunLayout
    from slm.train.data import materialize, packed_arrays

    source = packed_arrays(RunLayout.of(train_run), "domain/legal").parent
    packed = _copy(source, tmp_path / "legal")
    shutil.rmtree(packed / "arrays")
    files = sorted((packed / "data").glob("*.parquet"))
    other = sorted((source.parent.parent / "generic" / "data").glob("*.parquet"))[0]  # another set's file
    corrupt(files[0], how, other)
    with pytest.raises(ArtifactError, match=rf"data/{files[0].name}: .*remake it: rm -r .*legal and rerun the job "
                                            r"\(its pack stage makes it again\)"):
        materialize(packed)
    assert not (packed / "arrays").exists()  # nothing made from it


@pytest.mark.ray
@pytest.mark.parametrize("how", ["zeroed", "truncated", "swapped"])
def test_corrupt_embeddings_stop_the_cluster_stage(embedded, tmp_path, how):
    from slm.data.cluster import cluster
    from tests.data.test_cluster_resample import CFG

    embeddings = _copy(embedded[0], tmp_path / "embeddings")
    shards = sorted(embeddings.rglob("*.parquet"))
    corrupt(shards[0], how, shards[-1])
    with pytest.raises(ArtifactError, match=rf"{shards[0].name}: .*its embed stage makes it again"):
        cluster(embeddings, CFG, tmp_path / "clusters")
    assert not (tmp_path / "clusters").exists()


@pytest.mark.ray
@pytest.mark.parametrize("how", ["zeroed", "truncated", "swapped"])
def test_corrupt_assignments_stop_the_histograms_and_resampling(train_run, tmp_path, how):
    from slm.data.histogram import domain_histograms
    from slm.data.resample import resample
    from slm.layout import RunLayout

    clusters = _copy(RunLayout.of(train_run).clusters, tmp_path / "clusters")
    parts = sorted((clusters / "assignments").glob("*.parquet"))
    corrupt(parts[0], how, clusters / "centroids.npz")
    with pytest.raises(ArtifactError, match=rf"assignments/{parts[0].name}: .*its cluster stage makes it again"):
        domain_histograms(clusters, 0.5)
    histograms = json.loads(RunLayout.of(train_run).histograms_json.read_text())
    with pytest.raises(ArtifactError, match=rf"assignments/{parts[0].name}: .*its cluster stage makes it again"):
        resample(clusters, histograms, "legal", 5000, "crisp", tmp_path / "resampled")
    assert not (tmp_path / "resampled").exists()


@pytest.mark.ray
def test_a_damaged_embeddings_shard_is_embedded_again_never_recorded(embedded, mini_corpus_dir, tmp_path, capfd):
    """Issue 44: the embed stage said "10 of 10 shards already complete and current" over a zeroed shard and
    recorded its new hash; the cluster stage then read it. Now the shard is made again, saying so."""
    from slm.data.embed import embed_corpus
    from tests.conftest import embed_config_for_tests

    embeddings = _copy(embedded[0], tmp_path / "embeddings")
    shard = sorted(embeddings.rglob("*.parquet"))[0]
    corrupt(shard, "zeroed")
    embed_corpus(mini_corpus_dir, embed_config_for_tests(), embeddings)
    assert f"{shard}: its bytes changed" in capfd.readouterr().out
    verify(embeddings, "…")
    assert changed_files(embeddings) == {}
    assert pq.read_metadata(shard).num_rows > 0  # readable again, and recorded as made now


@pytest.mark.ray
@pytest.mark.parametrize("how", ["zeroed", "truncated", "swapped"])
def test_corrupt_corpus_shards_stop_the_stages_that_read_them(mini_corpus_dir, tmp_path, how):
    from slm.data.embed import embed_corpus
    from slm.data.stats import corpus_stats
    from tests.conftest import embed_config_for_tests

    corpus = tmp_path / "corpus"
    shutil.copytree(mini_corpus_dir, corpus, ignore=shutil.ignore_patterns("embeddings*"))
    shard = sorted((corpus / "domains" / "legal" / "train").glob("*.parquet"))[0]
    corrupt(shard, how, sorted((corpus / "domains" / "medical" / "train").glob("*.parquet"))[0])
    for read in (lambda: corpus_stats(corpus), lambda: embed_corpus(corpus, embed_config_for_tests(), tmp_path / "e")):
        with pytest.raises(ArtifactError, match=rf"{shard.name}: .*`slm corpus build` .* or `slm corpus import"):
            read()


def test_an_import_checks_the_roles_it_keeps_before_anything_is_read(tmp_path):
    """Issue 44: an import rewrote the corpus manifest over every role's files as found; a damaged shard of
    another role is refused (before Ray starts: `slm corpus import` calls check_import first), the one the
    import replaces is not in question."""
    import pyarrow as pa

    from slm.data.importer import check_import

    corpus = tmp_path / "corpus"
    for rel in ("generic/part-0.parquet", "domains/legal/train/part-0.parquet", "domains/legal/valid/part-0.parquet"):
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"text": [f"{rel} document {i}" for i in range(50)]}), corpus / rel)
    write_manifest(corpus, {"stage": "corpus"}, files=("generic", "domains"))
    given = tmp_path / "new.jsonl"
    given.write_text('{"text": "a new domain document"}\n')
    check_import(str(given), corpus, "medical")  # all whole
    corrupt(corpus / "domains" / "legal" / "train" / "part-0.parquet", "zeroed")
    with pytest.raises(ArtifactError, match=r"legal/train/part-0.parquet: its bytes changed .*slm corpus import"):
        check_import(str(given), corpus, "medical")
    check_import(str(given), corpus, "legal", replace=True)  # the damaged role is the one replaced: fine
