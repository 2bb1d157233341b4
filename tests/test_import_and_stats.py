"""`slm corpus import` and the stats job on a real local Ray, over real text."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slm.config import ConfigError
from slm.corpus import documents
from slm.data import tokenizers
from slm.data.importer import CorpusImportError, import_corpus
from slm.data.stats import corpus_stats
from tests.conftest import _real_texts

pytestmark = pytest.mark.ray
REPO = Path(__file__).parents[1]


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

    # Files of at least corpus.shard_docs documents, as the bundled shards (Ray Data wrote one per block):
    # each split of these few hundred documents is one file.
    assert [len(s["files"]) for r in records.values() for s in r["splits"].values()] == [1] * 5

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
    with pytest.raises(CorpusImportError, match=r"bad.jsonl:1: no field 'text' \(fields: \['content'\]\); pass --text-column"):
        import_corpus(str(bad), tmp_path / "c")
    assert not (tmp_path / "c" / "generic").exists()
    typed = tmp_path / "typed.jsonl"
    typed.write_text(json.dumps({"text": 5}) + "\n")
    with pytest.raises(CorpusImportError, match=r"typed.jsonl:1: 'text' is a JSON int, not text"):
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
@pytest.mark.parametrize("name, content, why", [
    ("table.csv", "text\nhello\n", r"table.csv: nothing to import \(table.csv: not a supported file"),
    ("empty.jsonl", "", r"empty.jsonl: nothing to import \(empty.jsonl: empty\)"),
    ("blank.jsonl", " \n\n  \n", r"blank.jsonl: nothing to import \(blank.jsonl: empty\)"),
    ("legal", None, r"domains/legal already exists; pass --replace to overwrite it"),
    ("notext.parquet", pa.table({"content": ["a real sentence"], "id2": [1]}),
     r"notext.parquet: no column 'text' \(columns: \['content', 'id2'\]\); pass --text-column$"),
    ("numbers.parquet", pa.table({"text": [1, 2]}), r"numbers.parquet: column 'text' is int64, not text$"),
])
def test_an_import_refused_before_ray_starts(slm_cli, tmp_path, name, content, why):
    """Issue 32: these were refused only after Ray had started (16-33 s), in a Ray Data traceback or not."""
    import re

    corpus = tmp_path / "corpus"
    (corpus / "domains" / "legal" / "train").mkdir(parents=True)
    given = tmp_path / name
    if content is None:
        pq.write_table(pa.table({"text": ["a real document"]}), given := tmp_path / "legal.parquet")
    elif isinstance(content, pa.Table):  # the schema, from the footer: no Ray needed
        pq.write_table(content, given)
    else:
        given.write_text(content)
    proc = slm_cli("corpus", "import", str(given), "--domain", "legal" if content is None else "notes",
                   f"corpus.dir={corpus}", check=False)
    assert proc.returncode == 1 and "[ray]" not in proc.stdout  # no Ray started
    assert re.search(why, proc.stderr) and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_an_error_raised_inside_ray_data_is_our_one_line(slm_cli, tmp_path):
    """Issue 32: a Parquet file without the text column failed inside a Ray Data UDF: the user saw Ray's
    `UserCodeException: UDF failed to process a data block …`, our line ~40 lines up. A local file's
    schema is now checked before Ray starts; a remote one (here a file:// URI, which is handed to Ray Data
    as it is, as s3:// is) is still found inside the read."""
    pq.write_table(pa.table({"content": ["a real sentence"], "id2": [1]}), tmp_path / "notext.parquet")
    proc = slm_cli("corpus", "import", f"file://{tmp_path / 'notext.parquet'}", "--domain", "notes",
                   f"corpus.dir={tmp_path / 'corpus'}", "ray.include_dashboard=false", check=False)
    assert proc.returncode == 1 and "[ray] started" in proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"slm: corpus import: {tmp_path / 'notext.parquet'}: no column 'text' (columns: ['content', 'id2']); "
        "pass --text-column"), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "UserCodeException" not in proc.stderr, proc.stderr[-3000:]


def test_import_inputs_are_checked_before_reading(tmp_path):
    from slm.data.importer import input_files

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
    from slm.data.importer import input_files

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

    from slm.data.importer import _normalize_batch

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


def test_every_json_lines_line_is_a_record_or_says_why():
    """Issue 19: a malformed line, non-UTF-8 bytes, a byte-order mark with CRLF, a lone surrogate or a
    non-object line made Ray Data's reader fail with a ~300-line traceback naming no file or line.
    Line by line: a BOM and CRLF read as editors read them, bad bytes and lone surrogates become U+FFFD
    (counted), and a line that is not a record says why."""
    import io

    from slm.data.importer import _lines, line_schema, parse_line

    good = json.dumps({"text": "A sentence."}).encode()
    assert list(_lines(io.BytesIO(b"a\nbb\n\nccc"), chunk=2)) == [b"a", b"bb", b"", b"ccc"]
    assert list(_lines(io.BytesIO(b"x" * 10 + b"\n"), chunk=3)) == [b"x" * 10]
    row = parse_line(b"\xef\xbb\xbf" + good + b"\r", 1, "text")
    assert (row["text"], row["_error"], row["_decode_errors"]) == ("A sentence.", None, 0)
    assert parse_line(b"  \r", 4, "text") is None  # a blank line: no row, but it keeps its number
    latin1 = parse_line('{"text": "caf\xe9"}'.encode("latin-1"), 3, "text")
    assert (latin1["text"], latin1["_decode_errors"], latin1["_replaced_chars"]) == ("caf\ufffd", 1, 1)
    lone = parse_line(b'{"text": "a \\ud800 b \\ud83d\\ude00"}', 2, "text")  # a lone and a paired surrogate
    assert (lone["text"], lone["_decode_errors"], lone["_replaced_chars"]) == ("a \ufffd b \U0001F600", 1, 1)
    errors = {
        b'{"text": "cut off': "not JSON: Unterminated string starting at (column 10)",
        b"42": "a JSON int, not an object with a 'text' field",
        b'{"body": "x"}': "no field 'text' (fields: ['body']); pass --text-column",
        b'{"text": ["x"]}': "'text' is a JSON list, not text",
    }
    for raw, why in errors.items():
        row = parse_line(raw, 7, "text")
        assert row["text"] is None and row["_line"] == 7 and row["_error"].startswith(why), (raw, row)
        assert row["_raw"] == raw.decode()
    assert pa.Table.from_pylist([row, latin1], schema=line_schema("text")).num_rows == 2


def test_bad_lines_are_quarantined_with_file_and_line_or_stop_the_import(ray_local, tmp_path):
    """`--on-error skip` (the default): the records imported, each bad line in <corpus>/quarantine/<role>
    with its file, line and why, counted in the manifest; `--on-error fail`: the lines named, nothing
    written. A truncated Parquet file is passed over with why (or fails, naming it)."""
    texts = [f"Record number {i} of a small real-looking file, with a sentence or two." for i in range(6)]
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps({"text": t}) + "\r\n"
                                                                 for t in texts[:2]).encode())
    (folder / "mixed.jsonl").write_bytes(
        (json.dumps({"text": texts[2]}) + "\n{\"text\": \"cut off\n\n42\n").encode()
        + '{"text": "caf\xe9 au lait, a non-UTF-8 line"}\n'.encode("latin-1")
        + (json.dumps({"text": texts[3]}) + "\n").encode())
    pq.write_table(pa.table({"text": texts[4:]}), folder / "whole.parquet")
    (folder / "cut.parquet").write_bytes((folder / "whole.parquet").read_bytes()[:-20])

    with pytest.raises(CorpusImportError, match=r"cut.parquet: not a readable Parquet file.*nothing was imported"):
        import_corpus(str(folder), tmp_path / "c", on_error="fail")
    (folder / "cut.parquet").unlink()
    with pytest.raises(CorpusImportError) as err:
        import_corpus(str(folder), tmp_path / "c", on_error="fail")
    assert "mixed.jsonl:2: not JSON" in str(err.value) and "mixed.jsonl:4: a JSON int" in str(err.value)
    assert "nothing was imported" in str(err.value) and not (tmp_path / "c").exists()

    (folder / "cut.parquet").write_bytes((folder / "whole.parquet").read_bytes()[:-20])
    record = import_corpus(str(folder), tmp_path / "c")
    assert [s["file"] for s in record["skipped"]] == [str(folder / "cut.parquet")]
    assert (record["records"], record["quarantined"], record["decode_errors"]) == (9, 2, 1)
    imported = pq.read_table(sorted((tmp_path / "c" / "generic").glob("*.parquet"))).column("text").to_pylist()
    assert sorted(imported) == sorted(texts + ["caf\ufffd au lait, a non-UTF-8 line"])
    quarantined = [json.loads(line) for f in sorted((tmp_path / "c" / record["quarantine"]).glob("*.json*"))
                   for line in f.read_text().splitlines()]
    assert sorted((Path(q["file"]).name, q["line"], q["error"][:10]) for q in quarantined) == [
        ("mixed.jsonl", 2, "not JSON: "), ("mixed.jsonl", 4, "a JSON int")]
    assert json.loads((tmp_path / "c" / "manifest.json").read_text())["imports"]["generic"]["quarantined"] == 2


def test_an_import_of_a_malformed_file_names_the_line_and_writes_nothing(ray_local, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "One real sentence."}) + "\n{\"text\": \"cut off\n")
    with pytest.raises(CorpusImportError, match=r"bad.jsonl:2: not JSON: Unterminated.*nothing was imported"):
        import_corpus(str(bad), tmp_path / "c", on_error="fail")
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


def test_a_domain_brings_its_own_valid_split(ray_local, corpus_dir, tmp_path):
    """Issue 19: `--domain` always re-split by hash. `--valid PATH` is the valid split, whole; a document
    in both inputs leaves train (no document in both splits); the record says which was used."""
    texts = _real_texts(corpus_dir, "legal", 24)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:20]))
    (tmp_path / "valid.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[19:]))
    record = import_corpus(str(tmp_path / "train.jsonl"), tmp_path / "c", "contracts",
                           valid=str(tmp_path / "valid.jsonl"), max_doc_chars=None)
    split = {s: set(pq.read_table(sorted((tmp_path / "c" / "domains" / "contracts" / s).glob("*.parquet")),
                                  columns=["text"]).column("text").to_pylist()) for s in ("train", "valid")}
    normal = [documents.normalize(t) for t in texts]
    assert split["valid"] == set(normal[19:]) and split["train"] == set(normal[:19])
    assert record["valid_split"]["from"] == "file" and record["valid_split"]["dropped_from_train"] == 1
    assert record["valid_split"]["records"] == 5
    with pytest.raises(CorpusImportError, match="--valid is a domain's valid split"):
        import_corpus(str(tmp_path / "train.jsonl"), tmp_path / "c", valid=str(tmp_path / "valid.jsonl"))


def test_a_domain_imported_into_the_bundled_corpus_goes_through_a_job_that_builds_it(ray_local, corpus_dir, tmp_path,
                                                                                      capsys):
    """Issue 46: after `slm corpus import … --domain mydomain` into the bundled corpus, a job whose stages
    include `corpus` (the study's spec) was refused — "no domain 'mydomain' in the bundled corpus … add one
    with `slm corpus import --domain`" — and the build itself refused a corpus holding imports. The build
    keeps the imports when its bundled part is current, and the check knows them."""
    from slm.corpus.build import build
    from slm.job import load_job
    from slm.pipeline import check_domains
    from slm.stages import STAGES

    corpus = tmp_path / "corpus"
    shutil.copytree(corpus_dir, corpus, ignore=shutil.ignore_patterns(".staging"))
    texts = _real_texts(corpus_dir, "legal", 40)
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    import_corpus(str(tmp_path / "mine.jsonl"), corpus, "mydomain", valid_fraction=0.3)
    spec = REPO / "jobs" / "sweeps" / "study.yaml"
    cfg = load_job(spec, [f"corpus.dir={corpus}", "sweep.domains=[mydomain]", "resample.domains=[mydomain]",
                          "resample.domain=mydomain"])
    assert "corpus" in cfg.stages
    check_domains(cfg)  # accepted: it was imported
    before = {p.relative_to(corpus): p.read_bytes() for p in (corpus / "domains" / "mydomain").rglob("*.parquet")}
    result = STAGES.get("corpus")(cfg, tmp_path)
    assert "mydomain" in result["domains"] and result["imported"] == ["mydomain"]
    assert "with the imported mydomain kept; nothing to do" in capsys.readouterr().out
    assert {p.relative_to(corpus): p.read_bytes() for p in (corpus / "domains" / "mydomain").rglob("*.parquet")} == before
    unknown = load_job(spec, [f"corpus.dir={corpus}", "sweep.domains=[nosuch]"])
    with pytest.raises(ConfigError, match=r"no domain 'nosuch' in the bundled corpus or the domains imported into "):
        check_domains(unknown)
    # the bundled part stale (a setting changed): a rebuild would drop the import, so it is refused, saying why
    with pytest.raises(ValueError, match=r"holds imported data \(mydomain\), which a rebuild would replace"):
        build(replace(cfg.corpus, valid_fraction=0.2))
