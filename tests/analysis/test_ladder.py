"""Advice and crossings from fitted curves (``slm.analysis.ladder``, ``slm advise``'s curve section, the report's
fitted_curves.png): on a results table simulated from known curves (seeds share an offset, each point its
own noise), and on the study's committed table."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import brentq

from slm.analysis import curves, ladder
from slm.analysis.advise import advise, format_advice
from slm.analysis.report import _fitted_figure, curve_lines
from slm.records.table import read_table

BUDGETS = [1e12, 2e12, 4e12, 8e12, 16e12, 32e12]  # pretraining FLOPs
TRUE = {"generic": curves.Params(E=3.0, A=0.5, alpha=0.5, x0=4e12),  # log-perplexity against pretraining FLOPs
        "soup": curves.Params(E=2.85, A=0.9, alpha=0.5, x0=4e12)}
SPECIALIZE = 1e11
STUDY = Path(__file__).parents[2] / "benchmarks" / "results" / "study"


def table(seeds: int = 3, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for method, truth in TRUE.items():
        for s in range(seeds):
            offset = rng.normal(0, 0.01)
            for steps, x in zip(range(100, 700, 100), BUDGETS, strict=True):
                setting = f"{method}-d1-p{steps}-t25000-s25"
                rows.append({
                    "method": method, "size": "d1", "expert": None, "params": 1e5, "inference_flops_per_token": 1e6,
                    "pretrain_steps": steps, "pretrain_flops": x, "pretrain_device_seconds": 1.0, "generic_flops": x,
                    "generic_device_seconds": 1.0, "domain": "legal", "domain_tokens": 25000, "specialize_steps": 25,
                    "specialize_flops": SPECIALIZE, "specialize_device_seconds": 1.0, "per_domain_flops": SPECIALIZE,
                    "per_domain_device_seconds": 1.0,
                    "perplexity": math.exp(float(truth(x)) + offset + rng.normal(0, 0.003)),
                    "accuracy": 0.3, "perplexity_before": 100.0, "accuracy_before": 0.1, "eval_loss_se": 0.0,
                    "setting": setting, "seed": s, "trial": f"{setting}-seed{s}"})
    return rows


def crossing_truth() -> float:
    g, s = TRUE["generic"], TRUE["soup"]
    return math.exp(brentq(lambda u: float(g(math.exp(u)) - s(math.exp(u))), math.log(1e12), math.log(32e12)))


def ask(rows, pretrain_budget):
    return advise(rows, pretrain_budget=pretrain_budget, specialization_budget=1e12, inference_budget=1e7,
                  domain_tokens=25000)


def test_advice_between_the_budgets_is_interpolated_with_its_interval():
    at = 6e12  # between the measured 4e12 and 8e12
    a = ask(table(), at)
    c = a["curves"]
    best = c["answer"]
    truth = {m: math.exp(float(p(at))) for m, p in TRUE.items()}
    winner = min(truth, key=truth.get)
    assert best["method"] == winner and best["pretrain_flops"] == at and not best["extrapolated"]
    assert best["low"] <= truth[winner] <= best["high"]
    assert c["margin"]["method"] != winner and c["margin"]["ratio"] > 1
    # the measured answer is still the nearest measured row below the budget, said as before
    assert a["answer"]["trial"].endswith("p300-t25000-s25")
    text = format_advice(a)
    assert "interpolated within the measured 1e+12-3.2e+13" in text and "EXTRAPOLATED" not in text.split("Next")[0]


def test_advice_from_the_report_s_fits_is_the_advice_that_fits_its_own():
    """The report fits a table's curves once and asks at every budget with them (``families``)."""
    rows = table()
    fams = ladder.families(rows)
    for at in (6e12, 1e14):
        assert advise(rows, pretrain_budget=at, specialization_budget=1e12, inference_budget=1e7, domain_tokens=25000,
                      families=fams) == ask(rows, at)


def test_advice_beyond_the_budgets_is_an_extrapolation_and_says_so():
    a = ask(table(), 1e14)
    best = a["curves"]["answer"]
    assert best["extrapolated"] and best["pretrain_flops"] == 1e14
    assert "EXTRAPOLATED beyond the measured" in format_advice(a)
    # the measured answer says the request is outside the sweep
    assert any("above everything measured" in n for n in a["notes"])


def test_the_crossing_is_found_with_an_interval_that_covers_it():
    fams = ladder.families(table())
    (found,) = ladder.crossings(fams)
    x = found.crossing
    assert x.at is not None and x.at.low <= crossing_truth() <= x.at.high
    assert x.below_after == "b" and found.b.method == "soup" and x.seeds_crossing == 3
    assert "Soup-of-Experts is lower beyond it" in ladder.describe_crossing(found)  # the papers' names


def test_the_report_draws_the_curves_and_lists_them(tmp_path):
    fams = ladder.families(table())
    crossed = ladder.crossings(fams)
    legends = _fitted_figure(tmp_path / "fitted_curves.png", fams, crossed)
    # One entry per family in its own panel, with its form (issue 64: a figure-wide legend listed a family once per
    # form it took across panels, 9 entries for 5 families).
    assert legends and all(len(labels) == len({label.split(" (")[0] for label in labels}) for labels in legends)
    assert all(label.endswith(("(saturating)", "(power law)")) for labels in legends for label in labels)
    assert (tmp_path / "fitted_curves.png").stat().st_size > 10_000
    text = "\n".join(curve_lines(fams, crossed, trained=True))
    assert "generic-d1-legal-t25000-s25 | saturating" in text and "cross at" in text
    assert "snapshots" not in text
    assert "**These budgets are snapshots" in "\n".join(curve_lines(fams, crossed, trained=False))


def test_on_the_study_table_a_grid_of_three_budgets_gives_labelled_power_laws():
    """The study's committed table (3 pretraining budgets, each a cosine snapshot): no saturating fit is
    identified, the power law is said to be one, and the d2 model (one budget) has no curve."""
    rows = read_table(STUDY / "seed0-b") + read_table(STUDY / "seed1-b") + read_table(STUDY / "seed2-b")
    fams = {f.name: f for f in ladder.families(rows)}
    assert sum(len(f.fit.budgets) == 3 for f in fams.values()) >= 4, sorted(fams)
    assert all(f.fit.form == "power law" and "3 budgets for 3 parameters" in f.fit.why
               for f in fams.values() if len(f.fit.budgets) == 3)
    assert all(not f.fit.fitted for f in fams.values() if len(f.fit.budgets) < 3)


@pytest.mark.parametrize("seeds", [1])
def test_one_seed_gives_a_curve_without_an_interval(seeds):
    a = ask(table(seeds=seeds), 6e12)
    best = a["curves"]["answer"]
    assert best["seeds"] == 1 and not math.isfinite(best["high"])
    assert "interval unknown: fewer than two seeds" in format_advice(a)
    (found,) = ladder.crossings(ladder.families(table(seeds=seeds)))
    assert "cross at" in ladder.describe_crossing(found) and "no interval: one seed;" in ladder.describe_crossing(found)
    assert curves.fit([curves.Point(1e12, 3.0, 0)]).why == "1 budget: a curve needs at least 3"
