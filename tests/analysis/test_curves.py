"""Loss-vs-budget curves (``slm.analysis.curves``) on a known curve with known noise: the fit recovers it, says
when it is not identified, and its intervals cover at their stated rate (a simulation: seeds share an
offset across budgets, as a WSD trunk's branches do, and each point has its own noise)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slm.analysis import curves

TRUE = curves.Params(E=3.0, A=1.5, alpha=0.5, x0=2000.0)
LADDER = [500, 1000, 2000, 4000, 8000, 16000]


def sample(rng, seeds: int, budgets, curve=TRUE, seed_sd=0.01, point_sd=0.005) -> list[curves.Point]:
    points = []
    for s in range(seeds):
        offset = rng.normal(0, seed_sd)  # one seed's shift, the same at every budget
        points += [curves.Point(b, float(curve(b)) * math.exp(offset + rng.normal(0, point_sd)), s) for b in budgets]
    return points


def test_a_noiseless_curve_is_recovered_with_its_saturation_and_labels():
    points = [curves.Point(b, float(TRUE(b)), s) for s in range(3) for b in LADDER]
    fit = curves.fit(points)
    assert fit.form == "saturating" and fit.why == "identified"
    assert pytest.approx(3.0, rel=1e-3) == fit.params.E and fit.params.alpha == pytest.approx(0.5, rel=1e-2)
    change = fit.change_over_doubling(16000)
    assert change.value == pytest.approx((TRUE(16000) - TRUE(8000)) / TRUE(8000), rel=1e-3)
    assert not change.extrapolated and fit.loss(64000).extrapolated
    budget = fit.saturation_budget(0.01)
    assert budget is not None and budget.value > 16000 and budget.extrapolated
    x = budget.value
    assert abs((TRUE(x) - TRUE(x / 2)) / TRUE(x / 2)) == pytest.approx(0.01, rel=1e-3)


def test_a_fit_that_is_not_identified_says_so_instead_of_printing_a_number():
    rng = np.random.default_rng(1)
    two = curves.fit(sample(rng, 3, [1000, 2000]))
    assert not two.fitted and "at least 3" in two.why
    with pytest.raises(ValueError, match="no curve"):
        two.loss(1500)
    three = curves.fit(sample(rng, 3, [1000, 2000, 4000]))
    assert three.form == "power law" and "not identified" in three.why
    # a pure power law (no floor): E is at 0 or within noise of it, and the power law is what is fitted
    for alpha in (0.05, 0.1, 0.3):
        no_floor = curves.fit(sample(rng, 3, LADDER, curves.Params(E=0.0, A=4.0, alpha=alpha, x0=1.0), 0.001, 0.001))
        assert no_floor.form == "power law" and "not identified" in no_floor.why, (alpha, no_floor.why)
        assert no_floor.params.alpha == pytest.approx(alpha, rel=0.05)
        # a power law's change per doubling is constant (2^−α − 1: −3.4% at α = 0.05), never under 1%
        assert no_floor.saturation_budget(0.01) is None


@pytest.mark.parametrize("seeds", [3, 5])
def test_the_intervals_cover_at_their_stated_rate(seeds):
    """95% intervals, 120 simulated studies each: the curve's interval at a measured budget and at an
    extrapolated one (fitted on the five lower budgets) against the true curve, and the prediction interval
    against the mean of new seeds at the extrapolated budget."""
    rng = np.random.default_rng(seeds)
    n, inside, beyond, predicted = 120, 0, 0, 0
    for _ in range(n):
        points = sample(rng, seeds, LADDER)
        measured = curves.fit(points).loss(3000)
        inside += measured.low <= TRUE(3000) <= measured.high
        lower = curves.fit([p for p in points if p.x < 16000])
        interval = lower.loss(16000)
        beyond += interval.low <= TRUE(16000) <= interval.high
        fresh = np.mean([p.y for p in sample(rng, seeds, [16000])])
        prediction = lower.predict_mean(16000, seeds)
        predicted += prediction.low <= fresh <= prediction.high
    # binomial sd at 95% and n = 120 is 2 points: 0.88 is 3.5 sd below; an interval that always covers
    # (uselessly wide) fails the upper bound
    rates = {"measured": inside / n, "extrapolated": beyond / n, "prediction": predicted / n}
    assert all(0.88 <= r < 1.0 for r in rates.values()), rates


def test_two_curves_cross_where_they_are_equal_with_an_interval_from_the_seeds():
    rng = np.random.default_rng(7)
    steep = curves.Params(E=2.5, A=2.0, alpha=0.8, x0=2000.0)
    a, b = curves.fit(sample(rng, 3, LADDER)), curves.fit(sample(rng, 3, LADDER, steep))
    found = curves.crossing(a, b, 500, 16000)
    exact = curves.crossing(curves.fit([curves.Point(x, float(TRUE(x)), s) for s in range(3) for x in LADDER]),
                            curves.fit([curves.Point(x, float(steep(x)), s) for s in range(3) for x in LADDER]),
                            500, 16000)
    assert exact.at.value == pytest.approx(_solve(TRUE, steep), rel=1e-3)
    assert found.at is not None and found.at.low <= exact.at.value <= found.at.high
    assert found.below_after == "b" and found.seeds_crossing == 3 and not found.at.extrapolated
    none = curves.crossing(a, b, 8000, 16000)
    assert none.at is None and none.below_after is None


def _solve(p: curves.Params, q: curves.Params) -> float:
    from scipy.optimize import brentq

    return math.exp(brentq(lambda u: float(p(math.exp(u)) - q(math.exp(u))), math.log(500), math.log(16000)))


def test_saturation_is_decided_only_when_its_interval_is_on_one_side():
    rng = np.random.default_rng(3)
    flat = curves.Params(E=3.0, A=0.05, alpha=0.5, x0=2000.0)  # −0.4% over 8k → 16k
    steep = curves.Params(E=3.0, A=1.5, alpha=0.5, x0=2000.0)  # −5.5%
    assert curves.saturation(curves.fit(sample(rng, 3, LADDER, flat, 0.001, 0.0005)), 0.01).saturated is True
    result = curves.saturation(curves.fit(sample(rng, 3, LADDER, steep, 0.001, 0.0005)), 0.01)
    assert result.saturated is False and result.change.high < -0.01
    assert result.budget is not None and result.budget.value > 16000 and result.to_json()["budget_beyond"] is None
