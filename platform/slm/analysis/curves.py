"""Loss-vs-budget curves fitted through fully trained budgets, with intervals: L(x) = E + A·x^−α.

``x`` is a budget (steps, tokens or FLOPs) and L a loss; each point carries its seed. The fit follows
published practice (OLMo-core's ``model_ladder/analysis/scaling_laws.py``, Epoch AI's Chinchilla
replication, Porian et al.'s ``fit_loss_with_saturation``): a Huber loss (δ = 1e-3) on log residuals,
minimized by L-BFGS-B from a grid of starting points, E kept under the lowest measured loss.

**Seeds are the replication unit.** Budgets of one seed share its trunk (a WSD run's branches) and its
data order, so their errors are correlated; resampling points would pretend otherwise. The curve is the
fit through every point; its uncertainty comes from the same fit through each seed alone: for any
quantity q read off a curve (the loss at a budget, the change over a doubling, where two curves cross),
the interval is q(all) ± t(n−1)·sd(q per seed)/√n. With three seeds t(2) = 4.30: wide, as it should be
(a percentile bootstrap over three seeds has ten distinct resamples and covers far less than it says;
``tests/analysis/test_curves.py`` measures the coverage of this rule on a known curve).

**Identification.** Three parameters need at least four distinct budgets, a fit whose E and α are off
their bounds and, with several seeds, an E whose interval across seeds excludes 0; otherwise the
saturating form is not identified and, with at least three budgets, the curve is the power law
L = A·x^−α (E = 0, two parameters), labelled so. With fewer than three budgets nothing
is fitted. Outside the measured budgets every number is an extrapolation and says so.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np
from scipy import optimize, stats
from threadpoolctl import ThreadpoolController

HUBER_DELTA = 1e-3
ALPHA_BOUNDS = (1e-3, 3.0)
LOG_A_BOUNDS = (-30.0, 30.0)
EXTRAPOLATION_LIMIT = 1e6  # how far beyond the largest budget a saturation or crossing is looked for

Form = Literal["saturating", "power law"]


@dataclass(frozen=True)
class Point:
    x: float  # the budget
    y: float  # the loss measured there
    seed: int | None = None


@dataclass(frozen=True)
class Params:
    """L(x) = E + A·(x/x0)^−α; ``x0`` the geometric middle of the measured budgets (a scale, not a choice)."""

    E: float
    A: float
    alpha: float
    x0: float

    def __call__(self, x) -> np.ndarray | float:
        return self.E + self.A * (np.asarray(x, dtype=float) / self.x0) ** -self.alpha


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float
    extrapolated: bool = False  # outside the measured budgets

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Fit:
    """One curve: the fit through every point, and through each seed's points alone."""

    form: Form | None  # None: not fitted (too few budgets)
    params: Params | None
    per_seed: dict[int, Params]
    budgets: tuple[float, ...]  # the distinct measured budgets
    seeds: tuple[int, ...]
    why: str  # why this form: identified, or what kept the saturating form from being identified
    seed_sd: float  # the spread of one seed's loss at a measured budget (pooled over budgets)
    seed_dof: int  # … and its degrees of freedom
    level: float = 0.95
    points: tuple[Point, ...] = field(default=(), repr=False)

    @property
    def fitted(self) -> bool:
        return self.params is not None

    @property
    def span(self) -> tuple[float, float]:
        return min(self.budgets), max(self.budgets)

    def inside(self, x: float) -> bool:
        lo, hi = self.span
        return lo * (1 - 1e-9) <= x <= hi * (1 + 1e-9)

    def _t(self) -> float:
        return float(stats.t.ppf(0.5 + self.level / 2, len(self.per_seed) - 1))

    def across_seeds(self, value: float, per_seed: list[float], extrapolated: bool, log: bool = False) -> Interval:
        """``value`` ± t·sd(per seed)/√n; on a log scale for budgets (a crossing, a saturation budget)."""
        n = len(per_seed)
        if n < 2 or not all(math.isfinite(v) for v in per_seed):
            return Interval(value, -math.inf if not log else 0.0, math.inf, extrapolated)
        if log:
            half = self._t() * float(np.std(np.log(per_seed), ddof=1)) / math.sqrt(n)
            return Interval(value, value * math.exp(-half), value * math.exp(half), extrapolated)
        half = self._t() * float(np.std(per_seed, ddof=1)) / math.sqrt(n)
        return Interval(value, value - half, value + half, extrapolated)

    def loss(self, x: float) -> Interval:
        """The mean loss at budget ``x`` (a confidence interval for the curve; across seeds)."""
        self._require()
        return self.across_seeds(float(self.params(x)), [float(p(x)) for p in self.per_seed.values()], not self.inside(x))

    def predict_mean(self, x: float, runs: int) -> Interval:
        """Where the mean of ``runs`` new seeds' losses at ``x`` falls: the curve's own uncertainty and the
        seeds' spread (a prediction interval)."""
        curve = self.loss(x)
        n = len(self.per_seed)
        if n < 2 or not self.seed_dof:
            return curve
        # two independent variances, each with its own degrees of freedom: Welch–Satterthwaite's t
        v_curve, v_runs = ((curve.high - curve.value) / self._t()) ** 2, self.seed_sd ** 2 / runs
        dof = (v_curve + v_runs) ** 2 / (v_curve ** 2 / (n - 1) + v_runs ** 2 / self.seed_dof)
        half = float(stats.t.ppf(0.5 + self.level / 2, dof)) * math.sqrt(v_curve + v_runs)
        return Interval(curve.value, curve.value - half, curve.value + half, curve.extrapolated)

    def change_over_doubling(self, x: float) -> Interval:
        """(L(x) − L(x/2)) / L(x/2): the relative change over the doubling that ends at ``x``."""
        self._require()

        def change(p: Params) -> float:
            return float((p(x) - p(x / 2)) / p(x / 2))

        return self.across_seeds(change(self.params), [change(p) for p in self.per_seed.values()],
                                 not (self.inside(x) and self.inside(x / 2)))

    def saturation_budget(self, threshold: float) -> Interval | None:
        """The budget from which a doubling changes the loss by less than ``threshold`` (relative), or None
        when the curve does not get there within ``EXTRAPOLATION_LIMIT`` × the largest budget, and for a
        power law, whose change per doubling (2^−α − 1) is the same at every budget: it places no budget."""
        self._require()
        if self.form == "power law":
            return None
        found = _saturation(self.params, threshold, self.span)
        if found is None:
            return None
        per_seed = [_saturation(p, threshold, self.span) for p in self.per_seed.values()]
        per_seed = [math.inf if v is None else v for v in per_seed]
        return self.across_seeds(found, per_seed, not self.inside(found), log=True)

    def _require(self) -> None:
        if not self.fitted:
            raise ValueError(f"no curve: {self.why}")

    def to_json(self) -> dict:
        return {"form": self.form, "why": self.why, "budgets": list(self.budgets), "seeds": list(self.seeds),
                "params": asdict(self.params) if self.params else None,
                "per_seed": {str(s): asdict(p) for s, p in self.per_seed.items()},
                "seed_sd": self.seed_sd, "seed_dof": self.seed_dof, "level": self.level}


@dataclass(frozen=True)
class Saturation:
    """Whether a curve has saturated at its largest measured budget: the change over the doubling that ends
    there (``change``), decided against ``threshold`` only when its whole interval is on one side
    (``saturated``: True, False, or None when the interval straddles it), and the budget from which a
    doubling would change the loss by less (``budget``; None: not within EXTRAPOLATION_LIMIT × the largest)."""

    largest: float
    change: Interval
    threshold: float
    saturated: bool | None
    budget: Interval | None
    form: Form

    def to_json(self) -> dict:
        searched = self.budget is None and self.form == "saturating"
        return {"form": self.form, "largest": self.largest, "change": self.change.to_json(), "threshold": self.threshold,
                "saturated": self.saturated, "budget": self.budget.to_json() if self.budget else None,
                "budget_beyond": self.largest * EXTRAPOLATION_LIMIT if searched else None}


def saturation(fit: Fit, threshold: float) -> Saturation:
    largest = fit.span[1]
    change = fit.change_over_doubling(largest)
    if -threshold < change.low and change.high < threshold:
        saturated: bool | None = True
    elif change.high <= -threshold or change.low >= threshold:
        saturated = False
    else:
        saturated = None
    return Saturation(largest, change, threshold, saturated, fit.saturation_budget(threshold), fit.form)


def _saturation(p: Params, threshold: float, span: tuple[float, float]) -> float | None:
    def excess(log_x: float) -> float:
        x = math.exp(log_x)
        return abs(float((p(x) - p(x / 2)) / p(x / 2))) - threshold

    lo, hi = math.log(span[0]), math.log(span[1] * EXTRAPOLATION_LIMIT)
    if excess(lo) <= 0:
        return span[0]
    if excess(hi) > 0:
        return None
    return math.exp(optimize.brentq(excess, lo, hi, xtol=1e-6))


# ------------------------------------------------------------------------------------------ fitting


def _huber(r: np.ndarray) -> np.ndarray:
    a = np.abs(r)
    return np.where(a <= HUBER_DELTA, 0.5 * r ** 2, HUBER_DELTA * (a - 0.5 * HUBER_DELTA))


def _fit_points(x: np.ndarray, y: np.ndarray, x0: float, form: Form, around: Params | None = None
                ) -> tuple[Params, float]:
    """The best of a grid of L-BFGS-B starts: parameters and the objective's value. The power law is a
    linear fit in log space (a convex objective): one start. The saturating form trades E against α over
    long flat valleys: the whole grid, every time (a seed's fit started only from the pooled optimum would
    stay near it, and the seeds' spread, which the intervals are, would shrink); ``around``, a fit through
    more points, is one start more."""
    u, log_y, y_min = np.log(x / x0), np.log(y), float(y.min())
    e_max = 0.999 * y_min

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        e, log_a, alpha = (theta if form == "saturating" else (0.0, *theta))
        power = np.exp(log_a - alpha * u)
        pred = e + power
        r = np.log(pred) - log_y
        psi = np.clip(r, -HUBER_DELTA, HUBER_DELTA) / pred  # the Huber loss's derivative, through log
        grad = np.array([psi.sum(), (psi * power).sum(), -(psi * power * u).sum()])
        return float(_huber(r).sum()), (grad if form == "saturating" else grad[1:])

    if form == "power law":
        grid = [(0.0, around.alpha if around else 0.2)]
    else:
        grid = [(e0, alpha0) for e0 in (0.0, 0.5 * y_min, 0.9 * y_min) for alpha0 in (0.05, 0.2, 0.5, 1.0, 2.0)]
        if around is not None:
            grid.append((min(around.E, 0.9 * y_min), around.alpha))
    bounds = ([(0.0, e_max)] if form == "saturating" else []) + [LOG_A_BOUNDS, ALPHA_BOUNDS]
    best: tuple[float, np.ndarray] | None = None
    for e0, alpha0 in grid:
        # log A from the start's E and α: the mean over points of log(y − E) + α·u
        log_a0 = float(np.mean(np.log(np.maximum(y - e0, 1e-12)) + alpha0 * u))
        start = np.array([e0, log_a0, max(alpha0, ALPHA_BOUNDS[0])] if form == "saturating"
                         else [log_a0, max(alpha0, ALPHA_BOUNDS[0])])
        res = optimize.minimize(objective, start, method="L-BFGS-B", jac=True, bounds=bounds)
        if best is None or res.fun < best[0]:
            best = (float(res.fun), res.x)
    theta = best[1]
    e, log_a, alpha = (theta if form == "saturating" else (0.0, *theta))
    return Params(float(e), float(math.exp(log_a)), float(alpha), x0), best[0]


def _at_bound(p: Params, y_min: float) -> str | None:
    if 1e-3 * y_min >= p.E:
        return "E at 0 (no floor within the measured budgets)"
    if 0.99 * 0.999 * y_min <= p.E:
        return "E at the lowest measured loss"
    if p.alpha <= ALPHA_BOUNDS[0] * 1.01 or p.alpha >= ALPHA_BOUNDS[1] * 0.99:
        return f"α at its bound ({p.alpha:.3g})"
    return None


# A fit is thousands of L-BFGS-B iterations on three parameters: BLAS threads only add their wake-ups, which
# cost most on cores busy with training (docs/budgets.md, benchmarks/results/report_speed.json).
_BLAS = ThreadpoolController()


@_BLAS.wrap(limits=1, user_api="blas")
def fit(points: list[Point], level: float = 0.95) -> Fit:
    """The curve through ``points`` and through each seed's (see the module's docstring)."""
    budgets = tuple(sorted({p.x for p in points}))
    seeds = tuple(sorted({p.seed for p in points if p.seed is not None}))
    sd, dof = _seed_sd(points)
    if len(budgets) < 3:
        why = f"{len(budgets)} budget{'s' * (len(budgets) != 1)}: a curve needs at least 3"
        return Fit(None, None, {}, budgets, seeds, why, sd, dof, level, tuple(points))
    x = np.array([p.x for p in points], dtype=float)
    y = np.array([p.y for p in points], dtype=float)
    if (y <= 0).any() or (x <= 0).any():
        raise ValueError("curves fit positive budgets and losses")
    x0 = float(math.exp(np.mean(np.log(budgets))))
    if len(budgets) >= 4:
        params, _ = _fit_points(x, y, x0, "saturating")
        bound = _at_bound(params, float(y.min()))
        if not bound:
            per_seed = _per_seed(points, seeds, x0, "saturating", params)
            floor = _floor_interval(per_seed, params.E, level)
            if floor is None or floor[0] > 0:
                return Fit("saturating", params, per_seed, budgets, seeds, "identified", sd, dof, level, tuple(points))
            bound = f"E = {params.E:.3g} is within noise of 0 across seeds ({floor[0]:.3g} to {floor[1]:.3g})"
        why = f"the saturating form is not identified: {bound}"
    else:
        why = f"{len(budgets)} budgets for 3 parameters: the saturating form is not identified"
    params, _ = _fit_points(x, y, x0, "power law")
    return Fit("power law", params, _per_seed(points, seeds, x0, "power law", params), budgets, seeds, why, sd, dof,
               level, tuple(points))


def _per_seed(points: list[Point], seeds: tuple[int, ...], x0: float, form: Form, pooled: Params
              ) -> dict[int, Params]:
    """The same fit through each seed's points alone (seeds with at least three budgets), started from the
    fit through every point."""
    out = {}
    for s in seeds:
        mine = [p for p in points if p.seed == s]
        if len({p.x for p in mine}) >= 3:
            out[s] = _fit_points(np.array([p.x for p in mine], float), np.array([p.y for p in mine], float), x0, form,
                                 pooled)[0]
    return out


def _floor_interval(per_seed: dict[int, Params], E: float, level: float) -> tuple[float, float] | None:
    """E ± t·sd(E per seed)/√n, or None with fewer than two seeds."""
    n = len(per_seed)
    if n < 2:
        return None
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * float(np.std([p.E for p in per_seed.values()], ddof=1)) / math.sqrt(n)
    return E - half, E + half


def _seed_sd(points: list[Point]) -> tuple[float, int]:
    """The spread of one seed's loss around its budget's mean, pooled over budgets (nan with one seed),
    and its degrees of freedom."""
    by_budget: dict[float, list[float]] = {}
    for p in points:
        by_budget.setdefault(p.x, []).append(p.y)
    ss = sum(float(np.sum((np.asarray(v) - np.mean(v)) ** 2)) for v in by_budget.values())
    dof = sum(len(v) - 1 for v in by_budget.values())
    return (math.sqrt(ss / dof) if dof > 0 else math.nan), dof


# ------------------------------------------------------------------------------------------ two curves


@dataclass(frozen=True)
class Crossing:
    """Where curve ``a`` and curve ``b`` cross in ``[low, high]`` (budgets): ``at`` with its interval, or
    ``at`` None (no crossing there); ``seeds_crossing`` of ``seeds`` cross there seed by seed."""

    at: Interval | None
    low: float
    high: float
    below_after: str | None  # which curve is lower after the crossing ("a" or "b")
    seeds_crossing: int
    seeds: int

    def to_json(self) -> dict:
        return {"at": self.at.to_json() if self.at else None, "low": self.low, "high": self.high,
                "below_after": self.below_after, "seeds_crossing": self.seeds_crossing, "seeds": self.seeds}


def _first_crossing(pa: Params, pb: Params, low: float, high: float) -> float | None:
    grid = np.geomspace(low, high, 400)
    diff = np.asarray(pa(grid)) - np.asarray(pb(grid))
    sign = np.sign(diff)
    change = np.nonzero(sign[:-1] * sign[1:] < 0)[0]
    if not len(change):
        return None
    i = int(change[0])
    return math.exp(optimize.brentq(lambda u: float(pa(math.exp(u)) - pb(math.exp(u))),
                                    math.log(grid[i]), math.log(grid[i + 1]), xtol=1e-8))


def crossing(a: Fit, b: Fit, low: float, high: float) -> Crossing:
    """Where ``a`` and ``b`` cross between budgets ``low`` and ``high``; its interval from the seeds both
    curves were fitted at (paired: seed s of a against seed s of b)."""
    a._require()
    b._require()
    at = _first_crossing(a.params, b.params, low, high)
    shared = sorted(set(a.per_seed) & set(b.per_seed))
    per_seed = [_first_crossing(a.per_seed[s], b.per_seed[s], low, high) for s in shared]
    crossed = [v for v in per_seed if v is not None]
    if at is None:
        return Crossing(None, low, high, None, len(crossed), len(shared))
    after = at * 1.01
    below = "a" if a.params(after) < b.params(after) else "b"
    measured = max(a.span[0], b.span[0]) <= at <= min(a.span[1], b.span[1])
    values = [math.inf if v is None else v for v in per_seed]
    interval = a.across_seeds(at, values, not measured, log=True) if len(shared) >= 2 else Interval(at, 0.0, math.inf, not measured)
    return Crossing(interval, low, high, below, len(crossed), len(shared))
