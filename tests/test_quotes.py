"""The docs' quoted numbers are the committed tables' (issue 64): every quote block renders to what the docs hold, a
number changed by hand is caught, and a sentence that says more than its comparison fails to render."""
from pathlib import Path

import pytest

from slm.analysis import quote
from slm.analysis.quote import QuoteError, Renderer

ROOT = Path(__file__).resolve().parents[1]
STUDY2 = "benchmarks/results/study2_report"


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    return Renderer(ROOT)


def render(renderer: Renderer, expression: str) -> str:
    """``{{ expression }}`` rendered with ``s`` the second edition's report, as a template sees it."""
    return renderer.env.from_string("{{ " + expression + " }}").render(s=renderer.study(STUDY2))


def test_every_quoted_number_is_the_tables():
    """README.md and docs/*.md as committed are what their templates render from the committed tables now."""
    diffs = quote.check(ROOT)
    assert not diffs, "docs differ from their tables (run `slm docs write` after editing a template):\n" + "\n".join(diffs)


def test_the_quoted_docs_have_blocks():
    """The verdict sections are generated, not typed: the check above covers them."""
    for doc, template in (("docs/results.md", "docs/quotes/results_status.md.j2"),
                          ("docs/results.md", "docs/quotes/study2_verdicts.md.j2"),
                          ("docs/results.md", "docs/quotes/study_verdicts.md.j2"),
                          ("docs/results.md", "docs/quotes/d2_split.md.j2"),
                          ("docs/results.md", "docs/quotes/pilot.md.j2"),
                          ("docs/results.md", "docs/quotes/pilot_wsd.md.j2"),
                          ("docs/results.md", "docs/quotes/pilot_wsd_protocol.md.j2"),
                          ("docs/results.md", "docs/quotes/study_parts.md.j2"),
                          ("docs/results.md", "docs/quotes/study_estimate.md.j2"),
                          ("docs/results.md", "docs/quotes/study_sizing.md.j2"),
                          ("docs/results.md", "docs/quotes/study_plan.md.j2"),
                          ("docs/results.md", "docs/quotes/study_paper_scale.md.j2"),
                          ("docs/results.md", "docs/quotes/study_clusters.md.j2"),
                          ("docs/results.md", "docs/quotes/like_with_like.md.j2"),
                          ("docs/results.md", "docs/quotes/queued_parts.md.j2"),
                          ("docs/results.md", "docs/quotes/c5_parts.md.j2"),
                          ("docs/results.md", "docs/quotes/c5.md.j2"),
                          ("docs/results.md", "docs/quotes/c5_baselines.md.j2"),
                          ("docs/results.md", "docs/quotes/transfer.md.j2"),
                          ("docs/results.md", "docs/quotes/study2_own.md.j2"),
                          ("docs/budgets.md", "docs/quotes/quickstart_issue28.md.j2"),
                          ("docs/budgets.md", "docs/quotes/quickstart_fresh.md.j2"),
                          ("docs/budgets.md", "docs/quotes/eval_sample.md.j2"),
                          ("docs/budgets.md", "docs/quotes/curve_coverage.md.j2"),
                          ("docs/training.md", "docs/quotes/coord_check.md.j2"),
                          ("docs/training.md", "docs/quotes/training_rates.md.j2"),
                          ("README.md", "docs/quotes/readme_quickstart.md.j2"),
                          ("README.md", "docs/quotes/readme_study.md.j2")):
        text = (ROOT / doc).read_text()
        assert template in [b.template for b in quote.blocks(ROOT / doc, text)], doc


def test_a_number_changed_by_hand_is_caught(tmp_path):
    doc = tmp_path / "README.md"
    text = (ROOT / "README.md").read_text()
    assert "795 trials" in text
    doc.write_text(text.replace("795 trials", "796 trials"))
    diffs = quote.check(ROOT, [doc])
    assert len(diffs) == 1 and "-large model at matched compute, 40 runs, 796 trials" in diffs[0]
    assert "+large model at matched compute, 40 runs, 795 trials" in diffs[0]
    quote.write(ROOT, [doc])
    assert doc.read_text() == text


def test_a_pilot_number_changed_by_hand_is_caught(tmp_path):
    """The typed history is generated too: the first pilot's table, changed in a copy of docs/results.md, differs."""
    doc = tmp_path / "results.md"
    text = (ROOT / "docs/results.md").read_text()
    assert "| 4,000 | 32.8M | 4.608 | −1.34% | **4.597** | **−0.84%** |" in text
    doc.write_text(text.replace("**4.597**", "**4.497**"))
    (diff,) = quote.check(ROOT, [doc])
    assert "+| 4,000 | 32.8M | 4.608 | −1.34% | **4.597** |" in diff


def test_a_part_is_listed_when_its_part_json_lands(tmp_path):
    """Where a study's parts stand comes from their committed part.json files: every seed × parts.yaml part is
    listed, the landed one with its record, the rest waiting."""
    (tmp_path / "jobs/sweeps").mkdir(parents=True)
    (tmp_path / "jobs/sweeps/toy.yaml").write_text("sweep:\n  seeds: [0, 1]\n")
    (tmp_path / "jobs/toy").mkdir()
    (tmp_path / "jobs/toy/parts.yaml").write_text("parts:\n  a: [generic-d1]\n  b: [generic-d2]\n")
    landed = tmp_path / "benchmarks/results/toy/seed1-a"
    landed.mkdir(parents=True)
    (landed / "part.json").write_text('{"part": "toy-seed1-a", "wall_s": 60.0}')
    parts = Renderer(tmp_path).parts("jobs/sweeps/toy.yaml")
    assert [p.label for p in parts] == ["seed0-a", "seed0-b", "seed1-a", "seed1-b"]
    assert [p.record for p in parts] == [None, None, {"part": "toy-seed1-a", "wall_s": 60.0}, None]
    # A spec without parts.yaml runs one part a seed.
    (tmp_path / "jobs/sweeps/one.yaml").write_text("sweep:\n  seeds: [3]\n")
    assert [(p.label, p.cut) for p in Renderer(tmp_path).parts("jobs/sweeps/one.yaml")] == [("seed3", None)]


def test_c5s_reading_renders_the_rule_on_a_committed_edition(renderer):
    """docs/quotes/c5.md.j2, written before C5's parts ran, says "not yet" until its report lands (the docs as
    committed), and on a report renders the rule's verdict from its claims: tried on the first edition's C5."""
    text = renderer.env.get_template("docs/quotes/c5.md.j2").render(folder="benchmarks/results/study_report")
    assert text.startswith("**The verdict: C5 inconclusive**")
    assert "at **0.834, 1.000, 0.870** of the baseline's steps (1.000: never, at 1 of 3 seeds)" in text
    assert "the refutation's p is 0.058: **inconclusive** at 3 seeds" in text


def test_the_own_rate_reading_sets_two_editions_side_by_side(renderer):
    """docs/quotes/study2_own.md.j2, written before the own-rate edition ran: the first edition beside the second
    (their shared comparisons matched by condition) lists each changed verdict with why; the second beside itself
    changes none; and it refuses parts that did not train pinned (the second edition's native parts)."""
    template = renderer.env.get_template("docs/quotes/study2_own.md.j2")
    text = template.render(folder=STUDY2, before="benchmarks/results/study_report", tables="benchmarks/results/none")
    assert "| C1 | **inconclusive** | **does not hold** | 9 / 0 / 6 → 9 / 3 / 3 | 3 of 15" in text
    assert ("- C1, legal, 25,000 tokens, 25 steps: SLM-is vs soup: inconclusive → **does not hold** "
            "(b moved 31.48 → 27.79 (outside ±0.84); the interval narrowed 0.52×)") in text
    same = template.render(folder=STUDY2, tables="benchmarks/results/none")
    assert "No comparison's verdict changed" in same and "**" not in same.split("| claim |")[1]
    with pytest.raises(QuoteError, match="seed0-a trained pinned"):
        template.render(folder=STUDY2, tables="benchmarks/results/study2")


def test_t_interval_is_students():
    """The mean of a few seeds and its 95% Student-t interval, as scipy computes it."""
    from scipy import stats

    values = [-0.02062, -0.00607, 0.00469]
    mean, low, high = quote.t_interval(values)
    expected = stats.t.interval(0.95, len(values) - 1, loc=sum(values) / 3, scale=stats.sem(values))
    assert mean == pytest.approx(sum(values) / 3) and (low, high) == pytest.approx(expected)


def test_an_unclosed_block_names_its_doc_and_line(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("a\nb\n<!-- quote docs/quotes/readme_study.md.j2 (generated) -->\nold\n")
    with pytest.raises(QuoteError, match=r"x.md:3: a quote block with no"):
        quote.check(ROOT, [doc])


def test_prose_cannot_say_more_than_its_comparison(renderer):
    # C1 legal, SLM-is vs generic: generic lower at every seed, the interval clear of zero, but not past Holm.
    generic = 's.cmp("C1", "legal,", "vs generic")'
    assert render(renderer, f"{generic}.require('inconclusive') ~ {generic}.holm") == "Holm p 0.095"
    with pytest.raises(QuoteError, match="the prose says does not hold, the data says inconclusive"):
        render(renderer, f"{generic}.require('does not hold')")
    with pytest.raises(QuoteError, match='"decisively" needs a decided comparison'):
        render(renderer, f"{generic}.decisively")
    # C1 with d2 on code: inconclusive, its interval across zero: no side may be called lower.
    with pytest.raises(QuoteError, match="includes zero: no side is lower"):
        render(renderer, 's.cmp("C1", "code,", "large model").lower')
    # Holm-adjusted p-values as they are, not rounded to a bar (the hand-typed "< 0.001 each" was 0.0016 on code).
    assert render(renderer, 's.cmp("C2", "code,", "16000 pretraining steps: mixture").holm') == "Holm p 0.0016"
    assert render(renderer, 's.cmp("C1", "legal,", "vs projected").decisively') == "decisively"
    # A comparison no claim planned has no Holm adjustment: never "decisively".
    unplanned = 's.unplanned("soup-d1-legal-p16000-t25000-s25", "projected-d1-legal-p16000-t25000-s25")'
    assert render(renderer, f"{unplanned}.diff") == "b − a +2.93 [+2.25, +3.62]"
    with pytest.raises(QuoteError, match="needs a planned comparison"):
        render(renderer, f"{unplanned}.decisively")
    with pytest.raises(QuoteError, match="the prose states: x; the data does not"):
        render(renderer, "check(false, 'x')")


def test_a_fitted_crossing_always_says_fitted(renderer):
    with_interval = render(renderer, 's.crossing("code", "projected").text')
    assert with_interval == "a fitted crossing at 3.0·10¹³ pretraining FLOPs (95% 1.4·10¹³–6.4·10¹³)"
    without = render(renderer, 's.crossing("medical", "projected").text')
    assert without.startswith("a fitted crossing at 8.8·10¹³") and "no interval: 2 of 5 seeds" in without
    assert "no fitted crossing" in render(renderer, 's.crossing("medical", "mixture").text')


def test_a_comparison_named_ambiguously_is_refused(renderer):
    with pytest.raises(QuoteError, match="3 comparisons of C1 name"):
        render(renderer, 's.cmp("C1", "large model")')


@pytest.mark.parametrize(("value", "text"), [(0.00156, "0.0016"), (0.0949, "0.095"), (0.13, "0.13"), (0.0004, "< 0.001"),
                                             (0.058, "0.058")])
def test_pvalue(value, text):
    assert quote.pvalue(value) == text


@pytest.mark.parametrize(("value", "digits", "text"), [(3.02e13, 2, "3.0·10¹³"), (1.16e14, 3, "1.16·10¹⁴"),
                                                       (9.96e12, 2, "1.0·10¹³"), (6.86e14, 2, "6.9·10¹⁴")])
def test_sci(value, digits, text):
    assert quote.sci(value, digits) == text
