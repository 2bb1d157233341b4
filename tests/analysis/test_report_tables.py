"""`slm report --tables`: a study's parts read as one (the committed quickstart sweep of issue 28, cut in
two by seed, is the data: real trials, no mock)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from slm.analysis.report import CombineError, report, report_tables
from slm.records.table import SWEEP_TABLES, read_table, write_curve_rows, write_table

SOURCE = Path(__file__).parents[2] / "benchmarks" / "results" / "quickstart_issue28"
RESULTS_STUDY = SOURCE.parent / "study"
DATA = {"sets": {"generic": "a1", "domain/legal": "b2", "valid/legal": "c3"}}


def part(root: Path, name: str, seeds: set[int], data: dict = DATA, drop: str | None = None,
         kernels: dict | None = None) -> Path:
    """A sweep folder holding the committed table's trials and plan at these seeds."""
    folder = root / name
    folder.mkdir(parents=True)
    rows = [r for r in pacsv.read_csv(SOURCE / "results.csv").to_pylist() if r["seed"] in seeds and r["trial"] != drop]
    write_table(rows, folder)
    plan = json.loads((SOURCE / "plan.json").read_text())
    plan["trials"] = [t for t in plan["trials"] if t["seed"] in seeds]
    plan["runs"] = [r for r in plan["runs"] if r["seed"] in seeds]
    plan["data"] = {**data, "fingerprint": json.dumps(data["sets"], sort_keys=True)}
    if kernels:
        plan["kernels"] = kernels
    (folder / "plan.json").write_text(json.dumps(plan))
    write_curve_rows([], folder / "curves.parquet")
    return folder


def test_two_parts_report_as_the_whole_sweep(tmp_path):
    whole = part(tmp_path, "whole", {0, 1, 2})
    expected = report(whole, tmp_path / "whole-report")
    a, b = part(tmp_path / "parts", "seed0", {0}), part(tmp_path / "parts", "seed12", {1, 2})
    combined = report_tables([tmp_path / "parts"], tmp_path / "combined")  # a folder of parts
    assert combined["tables"] == [str(a), str(b)] and combined["missing"] == []
    assert combined["claims"] == expected["claims"]
    assert (tmp_path / "combined" / "report" / "claims.md").read_text() == \
        (tmp_path / "whole-report" / "claims.md").read_text()
    assert sorted(r["trial"] for r in read_table(tmp_path / "combined")) == sorted(r["trial"] for r in read_table(whole))
    assert report_tables([a, b], tmp_path / "again")["claims"] == expected["claims"]


def test_parts_of_other_data_are_refused_naming_the_set(tmp_path):
    a = part(tmp_path, "seed0", {0})
    other = copy.deepcopy(DATA)
    other["sets"]["domain/legal"] = "ff"
    b = part(tmp_path, "seed12", {1, 2}, data=other)
    with pytest.raises(CombineError, match=r"seed12 differs from .*seed0 in \['domain/legal'\]"):
        report_tables([a, b], tmp_path / "out")
    assert not (tmp_path / "out" / "results.parquet").exists()


def test_parts_trained_on_different_kernels_are_refused_naming_them(tmp_path):
    """Issue 63: native kernels differ between CPUs (the same seed trains to other numbers), so parts that
    record different kernels are not one study; parts with the same record combine and keep it."""
    pinned = {"pretrain.train.numerics": "pinned 6a601b1f2020c66e", "specialize.train.numerics": "pinned 6a601b1f2020c66e"}
    native = {**pinned, "pretrain.train.numerics": "native 78e15fc0f11a4820"}
    a, b = part(tmp_path, "seed0", {0}, kernels=pinned), part(tmp_path, "seed12", {1, 2}, kernels=native)
    with pytest.raises(CombineError, match=r"different kernels.*seed0.*pinned 6a60.*seed12.*native 78e1.*numerics=pinned"):
        report_tables([a, b], tmp_path / "out")
    assert not (tmp_path / "out" / "results.parquet").exists()
    c = part(tmp_path, "seed12-pinned", {1, 2}, kernels=pinned)
    report_tables([a, c], tmp_path / "out")
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["kernels"] == pinned


def test_parts_that_train_on_different_sets_combine_where_the_sets_they_share_agree(tmp_path):
    """The parts of one seed (jobs/study/parts.yaml) train on different sets — SLM-is on a resampled set, the
    generic model on all of generic — so each plan's fingerprint is its own; what must agree is every set
    two parts both used. The combined plan records each set once."""
    a = part(tmp_path, "seed0", {0})
    own = {"sets": {"resampled/legal/crisp": "d4", "domain/legal": "b2", "valid/legal": "c3"}}
    b = part(tmp_path, "seed12", {1, 2}, data=own)
    report_tables([a, b], tmp_path / "out")
    combined = json.loads((tmp_path / "out" / "plan.json").read_text())["data"]
    assert combined["sets"] == {**DATA["sets"], **own["sets"]}
    assert combined["fingerprint"] not in (json.dumps(DATA["sets"], sort_keys=True), json.dumps(own["sets"], sort_keys=True))


def test_a_missing_trial_is_named_and_makes_its_comparisons_inconclusive(tmp_path):
    plan = json.loads((SOURCE / "plan.json").read_text())
    lost = next(t["name"] for t in plan["trials"] if t["seed"] == 1)
    a, b = part(tmp_path, "seed0", {0}), part(tmp_path, "seed12", {1, 2}, drop=lost)
    result = report_tables([a, b], tmp_path / "out")
    assert result["missing"] == [lost]
    assert lost in (tmp_path / "out" / "report" / "claims.md").read_text()
    # The whole design's plan names the rows of a part never run.
    design = tmp_path / "design.json"
    design.write_text(json.dumps(plan))
    result = report_tables([a], tmp_path / "out0", plan=design)
    assert result["missing"] == sorted(t["name"] for t in plan["trials"] if t["seed"] != 0)


def test_a_trial_in_two_parts_is_refused(tmp_path):
    a, b = part(tmp_path, "seed01", {0, 1}), part(tmp_path, "seed12", {1, 2})
    with pytest.raises(CombineError, match="is in both"):
        report_tables([a, b], tmp_path / "out")
    assert pq.read_table(a / "results.parquet").num_rows > 0


def test_a_part_with_slm_is_for_one_domain_only_reports(tmp_path):
    """Study part c (committed: SLM-is for code, the soup for every domain) has no SLM-is trial for legal
    or medical: those comparisons of C1 are untested, not a crash (its report stage crashed before)."""
    study = RESULTS_STUDY / "seed0-c"
    folder = tmp_path / "seed0-c"
    folder.mkdir()
    for name in SWEEP_TABLES:
        (folder / name).write_bytes((study / name).read_bytes())
    report(folder, tmp_path / "report")
    assert "legal, 25 steps: the plan has no SLM-is trial" in (tmp_path / "report" / "claims.md").read_text()


def test_the_combined_plan_names_its_parts_the_same_from_any_path(tmp_path, monkeypatch):
    """The committed study report is regenerated from an absolute path in tests and a relative one by hand."""
    part(tmp_path / "parts", "seed0", {0}), part(tmp_path / "parts", "seed12", {1, 2})
    report_tables([tmp_path / "parts"], tmp_path / "absolute")
    monkeypatch.chdir(tmp_path)
    report_tables(["parts"], "relative")
    written = (tmp_path / "absolute" / "plan.json").read_bytes()
    assert written == (tmp_path / "relative" / "plan.json").read_bytes()
    assert json.loads(written)["parts"] == ["seed0", "seed12"]
