"""Two editions side by side (issue 63): the second edition's committed claims beside themselves and beside a copy
with one comparison moved — matched by condition, the changed verdict marked, why said from the rows."""
import copy
import json
import shutil
from pathlib import Path

import pytest

from slm.analysis.editions import markdown, read_claims, side_by_side, write_side_by_side

ROOT = Path(__file__).resolve().parents[2]
STUDY2 = ROOT / "benchmarks/results/study2_report"


@pytest.fixture(scope="module")
def claims() -> list[dict]:
    return read_claims(STUDY2)


def test_an_edition_beside_itself_changes_nothing(claims):
    pairs = side_by_side(claims, claims)
    assert [p.id for p in pairs] == [c["id"] for c in claims]
    assert sum(len(p.comparisons) for p in pairs) == sum(len(c["comparisons"]) for c in claims) == 60
    assert not any(p.changed or p.only_before or p.only_after for p in pairs)
    for c in (c for p in pairs for c in p.comparisons if c.tested):
        assert not c.changed and c.why == "neither side left its interval"


def test_a_moved_comparison_is_marked_and_explained(claims):
    after = copy.deepcopy(claims)
    c1 = next(c for c in after if c["id"] == "C1")
    moved = next(c for c in c1["comparisons"] if c["verdict"] == "holds")
    before_verdict = moved["verdict"]
    moved["b_mean"] = moved["b_mean"] - 3 * moved["b_ci"]  # b leaves its interval
    moved["low"], moved["high"] = moved["low"] - moved["high"], moved["high"] * 2  # the interval widens
    moved["verdict"] = "inconclusive"
    c1["verdict"] = "holds" if c1["verdict"] != "holds" else "inconclusive"
    dropped = c1["comparisons"].pop()  # a comparison the new edition lacks
    pairs = {p.id: p for p in side_by_side(claims, after)}
    assert pairs["C1"].changed and not any(p.changed for k, p in pairs.items() if k != "C1")
    pair = next(c for c in pairs["C1"].comparisons if c.part == moved["part"])
    assert pair.changed and (pair.before.verdict, pair.after.verdict) == (before_verdict, "inconclusive")
    assert pair.why.startswith("b moved") and "widened" in pair.why and "a moved" not in pair.why
    assert pairs["C1"].only_before == [dropped["part"]]
    text = markdown(list(pairs.values()), "study2", "own")
    assert f"| C1 | {moved['part']} | **{before_verdict}** | **inconclusive** |" in text
    assert f"| C1 | {dropped['part']} | (only in study2) |" in text


def test_the_report_writes_it_beside_the_other_edition(tmp_path, claims):
    """`slm report --tables … --out OUT --beside EARLIER` writes OUT/report/side_by_side.md (here: the committed
    report set beside a copy of itself)."""
    after = tmp_path / "own_report"
    shutil.copytree(STUDY2 / "report", after / "report")
    out = write_side_by_side(STUDY2, after)
    text = out.read_text()
    assert out == after / "report" / "side_by_side.md" and "**yes**" not in text
    assert text.count("| no |") == len(claims)
    with pytest.raises(FileNotFoundError, match="no claims"):
        write_side_by_side(tmp_path / "missing", after)
    assert json.loads((after / "report" / "claims.json").read_text()) == claims


def test_the_own_rate_edition_compares_the_second_editions_conditions():
    """The rerun at each method's own rates plans the same 60 comparisons, by condition, as the second edition
    (its setting names differ: they carry the rates), so every one is set beside its earlier value."""
    from slm.analysis.claims import Design, evaluate
    from slm.analysis.report import read_plan

    def conditions(folder: str) -> set[tuple[str, str]]:
        claims = evaluate([], Design.of(read_plan(ROOT / folder)))
        return {(c.id, x.part) for c in claims for x in c.comparisons}

    second, own = conditions("benchmarks/results/study2"), conditions("benchmarks/results/study2_own")
    assert len(second) == 60 and own == second
