"""What "within noise" means in slm-platform, in one place: the t tests behind `claims.md`, `slm advise`'s
ties and the report's "not separable from the front".

A comparison is a difference ``b − a`` of one measure between two settings, each measured at several
seeds. Its 95% confidence interval comes from a t distribution:

- **paired t** over the seeds both settings share, when the seed pairs their data (two specializations
  of the same domain at the same seed read the same in-domain subset in the same order: ``slm.train.
  trainer.domain_subset``): the mean and standard error of the per-seed differences, ``n − 1`` degrees
  of freedom;
- **Welch's t** otherwise: ``se = √(se_a² + se_b²)`` with the Welch–Satterthwaite degrees of freedom;
- **one-sample t** against a fixed number (C5's bound on SALT's steps).

With 3 seeds the critical values are 4.30 (paired, 2 df) and about 2.78 (Welch, ~4 df), not the normal
1.96 or the rule of thumb 2: a ``|d| ≥ 2·se`` rule calls a true zero difference separable about 11% of
the time at 3 seeds (``tests/analysis/test_claims.py`` measures it).

Every test here reads one interval, so every verdict can be read off the interval shown beside it:
``p_above(bound)`` is the smallest α at which the (1 − α) interval lies wholly above ``bound`` (twice the
one-sided p-value), ``p_below`` the same below. ``p < 0.05`` ⇔ the 95% interval clears the bound.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal

from scipy.special import (  # Student's t CDF and its inverse (scipy.stats.t's, without its overhead)
    stdtr,
    stdtrit,
)

ALPHA = 0.05  # two-sided: every verdict reads the 95% interval
Test = Literal["paired t", "Welch t", "one-sample t", "diverged", "one seed"]


@dataclass(frozen=True)
class Difference:
    """``b − a`` of a measure over seeds: its estimate, standard error and degrees of freedom (``se`` and
    ``df`` are ``None`` when a side has one seed: no interval, no test)."""

    estimate: float
    se: float | None
    df: float | None
    test: Test

    @property
    def testable(self) -> bool:
        return self.se is not None and self.df is not None

    def interval(self, level: float = 1 - ALPHA) -> tuple[float, float]:
        if not self.testable:
            return (-math.inf, math.inf)
        half = half_width(self.se, self.df, level)
        return self.estimate - half, self.estimate + half

    def p_above(self, bound: float) -> float:
        """Evidence that the true difference is above ``bound``: 2 × the one-sided p-value (1 when untestable)."""
        return self._p(self.estimate - bound)

    def p_below(self, bound: float) -> float:
        return self._p(bound - self.estimate)

    def _p(self, distance: float) -> float:
        if not self.testable:
            return 1.0
        if self.se == 0:  # every seed gave the same difference: it is on one side or it is not
            return 0.0 if distance > 0 else 1.0
        return min(1.0, 2 * float(stdtr(self.df, -distance / self.se)))


def half_width(se: float, df: float, level: float = 1 - ALPHA) -> float:
    """Half the two-sided ``level`` t interval of a mean with standard error ``se``."""
    return float(stdtrit(df, 0.5 + level / 2) * se) if se else 0.0


def mean_interval(values: list[float], level: float = 1 - ALPHA) -> float | None:
    """Half the ``level`` t interval of the mean of ``values`` (``None`` at one value)."""
    if len(values) < 2:
        return None
    return half_width(statistics.stdev(values) / math.sqrt(len(values)), len(values) - 1, level)


def paired(a: list[float], b: list[float]) -> Difference:
    """``b − a`` paired by position (the same seed at the same index)."""
    if len(a) != len(b):
        raise ValueError(f"paired: {len(a)} values against {len(b)}")
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    if len(diffs) < 2:
        return Difference(statistics.fmean(diffs), None, None, "one seed")
    return Difference(statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs)), len(diffs) - 1,
                      "paired t")


def welch(a: list[float], b: list[float]) -> Difference:
    """``b − a`` of two independent means."""
    return welch_from_summary(*summary(a), *summary(b))


def summary(values: list[float]) -> tuple[float, float | None, int]:
    """(mean, standard error of the mean or ``None`` at one value, n)."""
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
    return statistics.fmean(values), se, len(values)


def welch_from_summary(mean_a: float, se_a: float | None, n_a: int, mean_b: float, se_b: float | None,
                       n_b: int) -> Difference:
    """Welch's t from each side's mean, standard error and count (a results table's folded rows)."""
    d = mean_b - mean_a
    if se_a is None or se_b is None or n_a < 2 or n_b < 2:
        return Difference(d, None, None, "one seed")
    var_a, var_b = se_a ** 2, se_b ** 2
    se = math.sqrt(var_a + var_b)
    if se == 0:
        return Difference(d, 0.0, float(n_a + n_b - 2), "Welch t")
    df = (var_a + var_b) ** 2 / (var_a ** 2 / (n_a - 1) + var_b ** 2 / (n_b - 1))
    return Difference(d, se, df, "Welch t")


def one_sample(values: list[float], reference: float) -> Difference:
    """``reference − mean(values)``: positive when the values lie below the reference."""
    if len(values) < 2:
        return Difference(reference - statistics.fmean(values), None, None, "one seed")
    return Difference(reference - statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values)),
                      len(values) - 1, "one-sample t")


def separable(d: Difference) -> bool | None:
    """Whether the 95% interval of a difference excludes zero; ``None`` when it has no interval."""
    if not d.testable:
        return None
    return min(d.p_above(0.0), d.p_below(0.0)) < ALPHA


def holm(p_values: list[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input's order: rejecting where the adjusted value is
    < α keeps the chance of any false rejection among them ≤ α."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
