"""`slm corpus import` and the stats job on a real local Ray, over real text."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from slm.corpus import documents
from slm.corpus.importer import CorpusImportError, import_corpus
from slm.data import tokenizers
from slm.data.stats import corpus_stats
from tests.conftest import _real_texts

pytestmark = pytest.mark.ray


def test_import_counts_and_content(user_corpus):
    out, records, legal, medical = user_corpus
    generic = records["generic"]
    assert generic["records"] == len(legal) + 2 and generic["empty"] == 2
    table = pq.read_table(sorted((out / "generic").glob("*.parquet"))).to_pydict()
    assert sorted(table["text"]) == sorted(documents.normalize(t) for t in legal)
    assert all(i == documents.doc_id(t) for i, t in zip(table["id"], table["text"], strict=True))
    assert set(table["domain"]) == {"generic"} and set(table["source"]) == {"generic.jsonl"}

    med = records["med"]
    assert med["splits"]["train"]["documents"] + med["splits"]["valid"]["documents"] == len(medical)
    valid_ids = pq.read_table(sorted((out / "domains/med/valid").glob("*.parquet"))).column("id").to_pylist()
    assert valid_ids and all(documents.in_valid_split(i, 0.2) for i in valid_ids)

    notes = records["notes"]
    assert notes["records"] == 42 and notes["empty"] == 1 and notes["decode_errors"] == 1
    assert notes["replaced_chars"] == 3
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and set(manifest["imports"]) == {"generic", "med", "notes"}


def test_import_refuses_to_overwrite_and_names_bad_input(user_corpus, tmp_path):
    out, *_ = user_corpus
    with pytest.raises(CorpusImportError, match="already exists; pass --replace"):
        import_corpus(str(out / "generic"), out)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"content": "a real sentence"}) + "\n")
    with pytest.raises(Exception, match=r"bad.jsonl: no column 'text' \(columns: \['content'\]\)"):
        import_corpus(str(bad), tmp_path / "c")
    assert not (tmp_path / "c" / "generic").exists()
    typed = tmp_path / "typed.jsonl"
    typed.write_text(json.dumps({"text": 5}) + "\n")
    with pytest.raises(Exception, match=r"typed.jsonl: a row's 'text' is int, not text"):
        import_corpus(str(typed), tmp_path / "d")


def test_stats_match_a_direct_count(user_corpus):
    out, records, legal, medical = user_corpus
    rows = corpus_stats(out)
    by_key = {(r["domain"], r["split"], r["source"]): r for r in rows}
    tok = tokenizers.load(tokenizers.EMBEDDER)
    expected_tokens = sum(len(e.ids) for e in tok.encode_batch(
        [documents.normalize(t) for t in legal], add_special_tokens=False))
    generic = by_key[("generic", "all", "generic.jsonl")]
    assert generic["documents"] == len(legal) and generic["tokens"] == expected_tokens
    assert generic["chars"] == sum(len(documents.normalize(t)) for t in legal)
    med = [r for k, r in by_key.items() if k[0] == "med"]
    assert sum(r["documents"] for r in med) == len(medical)
    assert {r["split"] for r in med} == {"train", "valid"}


def test_import_with_an_empty_split_fails_and_writes_nothing(ray_local, tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"text": "A single real sentence about a patient's fever."}) + "\n")
    with pytest.raises(CorpusImportError, match=r"split of domain 'tiny' would be empty"):
        import_corpus(str(path), tmp_path / "c", "tiny", valid_fraction=0.5)
    assert not list((tmp_path / "c").rglob("*.parquet"))
    assert not (tmp_path / "c" / "manifest.json").exists()


# What `slm corpus import` reads, checked before Ray starts (issue 19): these need no Ray.
def test_import_inputs_are_checked_before_reading(tmp_path):
    from slm.corpus.importer import input_files

    with pytest.raises(CorpusImportError, match=r"nosuch.jsonl: no such file or folder"):
        input_files(str(tmp_path / "nosuch.jsonl"))
    with pytest.raises(CorpusImportError, match=r"\*.jsonl: the pattern matches no file"):
        input_files(str(tmp_path / "*.jsonl"))
    array = tmp_path / "array.json"
    array.write_text(json.dumps([{"text": "a"}, {"text": "b"}]))
    with pytest.raises(CorpusImportError, match=r"array.json: a JSON array, not JSON Lines.*jq -c"):
        input_files(str(array))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(CorpusImportError, match=r"nothing to import \(empty.jsonl: empty\)"):
        input_files(str(empty))


def test_a_folder_of_mixed_formats_is_read_whole_and_the_rest_listed(tmp_path):
    from slm.corpus.importer import input_files

    folder = tmp_path / "mixed"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.jsonl").write_text(json.dumps({"text": "one"}) + "\n")
    (folder / "b.json").write_text(json.dumps({"text": "two"}) + "\r\n")
    pq.write_table(__import__("pyarrow").table({"text": ["three"]}), folder / "c.parquet")
    (folder / "sub" / "d.txt").write_text("four")
    (folder / "e.csv").write_text("text\nfive\n")
    (folder / "f.jsonl").write_text("\n")
    files, skipped = input_files(str(folder))
    assert {k: sorted(Path(f).name for f in v) for k, v in files.items()} == {
        "jsonl": ["a.jsonl", "b.json"], "parquet": ["c.parquet"], "text": ["d.txt"]}
    assert sorted((Path(f).name, why.split(" (")[0]) for f, why in skipped) == [
        ("e.csv", "not a supported file"), ("f.jsonl", "empty")]
    globbed, _ = input_files(str(folder / "*.json*"))
    assert sorted(Path(f).name for f in globbed["jsonl"]) == ["a.jsonl", "b.json"]  # f.jsonl: empty


def test_a_mixed_folder_imports_every_document(ray_local, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.jsonl").write_text(json.dumps({"text": "The first real sentence of the corpus."}) + "\n")
    (folder / "b.json").write_text(json.dumps({"text": "A second one, with a CRLF line end."}) + "\r\n")
    pq.write_table(__import__("pyarrow").table({"text": ["A third, from a Parquet file."]}), folder / "c.parquet")
    (folder / "d.txt").write_text("A fourth, a plain text file.")
    (folder / "e.csv").write_text("text\nnot read\n")
    record = import_corpus(str(folder), tmp_path / "corpus")
    assert record["format"] == "jsonl+parquet+text" and record["files"] == 4 and record["records"] == 4
    assert [Path(s["file"]).name for s in record["skipped"]] == ["e.csv"]
    texts = pq.read_table(sorted((tmp_path / "corpus" / "generic").glob("*.parquet"))).column("text").to_pylist()
    assert sorted(texts) == sorted(["The first real sentence of the corpus.", "A second one, with a CRLF line end.",
                                    "A third, from a Parquet file.", "A fourth, a plain text file."])


def test_a_huge_record_is_split_into_documents_as_the_bundled_build_splits(corpus_dir):
    """Issue 19: a 30 MB single document was imported whole; records longer than corpus.max_doc_chars
    are split at paragraph boundaries (documents.split_long, the bundled build's), counted per record."""
    import pyarrow as pa

    from slm.corpus.importer import _normalize_batch

    paragraphs = [t for t in _real_texts(corpus_dir, "legal", 40) if t.strip()]
    huge = "\n\n".join(paragraphs)
    assert len(huge) > 50_000
    batch = pa.table({"path": ["a.jsonl", "a.jsonl", "a.jsonl"], "text": [huge, "A short record.", ""]})
    rows = _normalize_batch(batch, "text", "a.jsonl", "generic", max_chars=8000).to_pylist()
    pieces = [r for r in rows if r["text"] and r["text"] != "A short record."]
    assert len(pieces) > len(huge) // 8000 and all(len(r["text"]) <= 8000 for r in pieces)
    assert sum(r["_first"] for r in rows) == 3 and [r["_empty"] for r in rows].count(True) == 1
    words = "".join(documents.normalize(huge).split())
    assert "".join("".join(r["text"].split()) for r in pieces) == words  # every character but whitespace, in order
    assert len({r["id"] for r in pieces}) == len(pieces)


def test_a_bad_json_lines_file_is_named_with_its_line(tmp_path):
    """Issue 19: a malformed line, non-UTF-8 bytes, a byte-order mark or a non-object line gave a
    ~300-line traceback naming no file or line (Ray Data's reader); the import names both."""
    from slm.corpus.importer import diagnose_jsonl

    good = json.dumps({"text": "A sentence."})
    cases = {
        "malformed.jsonl": (f"{good}\n{{\"text\": \"cut off\n{good}\n".encode(), ":2: not JSON"),
        "latin1.jsonl": (f"{good}\n\n".encode() + '{"text": "caf\xe9"}\n'.encode("latin-1"), ":3: not UTF-8"),
        "bom.jsonl": (b"\xef\xbb\xbf" + f"{good}\r\n".encode(), ":1: starts with a UTF-8 byte-order mark"),
        "number.jsonl": (f"{good}\n42\n".encode(), ":2: a JSON int, not an object"),
    }
    for name, (content, expected) in cases.items():
        (tmp_path / name).write_bytes(content)
        assert diagnose_jsonl(tmp_path / name).startswith(f"{tmp_path / name}{expected}"), name
    (tmp_path / "fine.jsonl").write_text(f"{good}\r\n\n{good}\n")
    assert diagnose_jsonl(tmp_path / "fine.jsonl") is None


def test_an_import_of_a_malformed_file_names_the_line_and_writes_nothing(ray_local, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "One real sentence."}) + "\n{\"text\": \"cut off\n")
    with pytest.raises(CorpusImportError, match=r"bad.jsonl:2: not JSON .*nothing was imported"):
        import_corpus(str(bad), tmp_path / "c")
    assert not (tmp_path / "c" / "generic").exists()


def test_a_failed_domain_import_leaves_the_corpus_as_it_was(ray_local, corpus_dir, tmp_path):
    """Issue 19: `--replace` with an empty new valid split left train at 1 document beside the old valid
    split, the manifest still saying 189; a new domain's failed import left train files without a
    manifest entry. The domain is staged whole and swapped in with one rename."""
    texts = _real_texts(corpus_dir, "medical", 30)
    source = tmp_path / "notes.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    out = tmp_path / "corpus"
    with pytest.raises(CorpusImportError, match="valid split of domain 'fresh' would be empty"):
        import_corpus(str(source), out, "fresh", valid_fraction=0.0)
    assert not (out / "domains" / "fresh").exists()
    first = import_corpus(str(source), out, "kept", valid_fraction=0.3)
    before = {p.relative_to(out).as_posix(): p.read_bytes() for p in (out / "domains" / "kept").rglob("*.parquet")}
    manifest = (out / "manifest.json").read_text()
    with pytest.raises(CorpusImportError, match="would be empty"):
        import_corpus(str(source), out, "kept", valid_fraction=0.0, replace=True)
    after = {p.relative_to(out).as_posix(): p.read_bytes() for p in (out / "domains" / "kept").rglob("*.parquet")}
    assert after == before and (out / "manifest.json").read_text() == manifest
    assert first["splits"]["train"]["documents"] + first["splits"]["valid"]["documents"] == len(set(texts))
    assert not [p for p in (out / "domains").iterdir() if p.name.startswith(".")]  # no staging left behind


def test_a_document_given_twice_is_kept_once_and_counted(ray_local, corpus_dir, tmp_path):
    """Issue 19: 50 rows of 5 distinct texts were imported as 50 documents; the bundled build keeps one
    of each (by content hash) and so does the import, counting the rest."""
    texts = [t for t in _real_texts(corpus_dir, "legal", 5) if t.strip()]
    source = tmp_path / "repeated.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts * 10))
    record = import_corpus(str(source), tmp_path / "c")
    assert record["records"] == 10 * len(texts) and record["duplicates"] == 9 * len(texts)
    assert record["splits"]["all"]["documents"] == len(texts)
