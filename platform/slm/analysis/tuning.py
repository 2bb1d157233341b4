"""A rate's optimum from a tuning sweep, and the rule that says which methods the study reruns at their own
(issue 63; docs/results.md, "Each method's own learning rate", where the protocol was committed before any
tuning run).

The input is a sweep crossed with a rate axis (``sweep.axes``): for each (method, size, seed) a loss at every
rate of a log grid — the fully trained proxy's valid loss (``proxy_losses``: the macro loss, or a per-domain
run's loss on its own domain) or a specialization's loss (``specialized_losses``). Then:

- **the optimum** (``optimum``): per seed, the vertex of the parabola through the seed's lowest point and its
  two grid neighbours, in log2 of the rate (clamped to that bracket: a parabola that opens downward, or a
  minimum at the grid's edge, gives the lowest point itself, flagged ``at_edge`` for the latter); the optimum
  is the mean of the seeds' vertices, its 95% interval the percentile bootstrap of that mean over the seeds
  resampled with replacement (with two seeds, the range of their vertices);
- **the gain** over the reference rate (the second edition's: 1e-2 for pretraining, 1e-3 for specialization):
  per seed, the loss at the reference less the loss at the grid rate nearest the optimum; its mean and 95% t
  interval; **the seed noise**: the standard deviation over seeds of the loss at the reference;
- **the rule**: a method is rerun at its own rate (the grid rate nearest its optimum) when its optimum is more
  than one grid step from the reference, or its mean gain is larger than its seed noise. A seed whose lowest
  point is at the grid's edge first extends the grid by one step on that side.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slm.analysis.stats import half_width

REFERENCE_RATE = 1e-2  # the second edition's pretraining rate, for every method and size
SPECIALIZE_REFERENCE_RATE = 1e-3  # and its specialization rate
BOOTSTRAP = 10_000


@dataclass(frozen=True)
class Optimum:
    """One (method, size)'s rate: what the rule reads, and why."""

    method: str
    size: str
    seeds: int
    rates: tuple[float, ...]  # the grid
    optimum: float  # the rate: 2 ** (mean of the seeds' vertices in log2)
    low: float  # its 95% bootstrap interval
    high: float
    nearest: float  # the grid rate nearest the optimum (in log2): the rate a rerun uses
    at_edge: bool  # a seed's lowest loss at the grid's first or last rate: extend the grid first
    loss_at_reference: float  # mean over seeds
    loss_at_nearest: float
    gain: float  # mean over seeds of loss(reference) − loss(nearest); > 0: the own rate is better
    gain_low: float | None  # its 95% t interval (None at one seed)
    gain_high: float | None
    seed_noise: float | None  # standard deviation over seeds of the loss at the reference (None at one seed)
    steps_from_reference: float  # |log2(optimum / reference)| in grid steps
    at: tuple[tuple[str, Any], ...] = ()  # the sweep's other axes' values (the transfer's parametrization)
    reference: float = REFERENCE_RATE  # the rate the gain and the distance are measured from

    @property
    def rerun(self) -> bool:
        """The rule: more than one grid step from the reference, or a gain beyond the seed noise."""
        beyond_noise = self.seed_noise is not None and self.gain > self.seed_noise
        return self.steps_from_reference > 1 or beyond_noise

    def reason(self) -> str:
        if self.at_edge:
            return "a seed's lowest loss is at the grid's edge: extend the grid by one step on that side first"
        why = []
        if self.steps_from_reference > 1:
            why.append(f"its optimum is {self.steps_from_reference:.2f} grid steps from {self.reference:g}")
        if self.seed_noise is not None and self.gain > self.seed_noise:
            why.append(f"its gain {self.gain:.4f} exceeds its seed noise {self.seed_noise:.4f}")
        if why:
            return f"rerun at {self.nearest:g}: " + "; ".join(why)
        noise = "unknown (one seed)" if self.seed_noise is None else f"{self.seed_noise:.4f}"
        return (f"left at {self.reference:g}: its optimum is {self.steps_from_reference:.2f} grid steps away and its gain "
                f"{self.gain:+.4f} is within its seed noise {noise}")


def vertex(rates: list[float], losses: list[float]) -> tuple[float, bool]:
    """One seed's optimum in log2(rate): the parabola's vertex through the lowest point and its neighbours,
    clamped to them; and whether the lowest point is at the grid's edge. A non-finite loss (a diverged run) is
    worse than any finite one."""
    xs = [math.log2(r) for r in rates]
    ys = [y if math.isfinite(y) else math.inf for y in losses]
    i = min(range(len(ys)), key=ys.__getitem__)
    if i in (0, len(ys) - 1):
        return xs[i], True
    (x0, x1, x2), (y0, y1, y2) = xs[i - 1:i + 2], ys[i - 1:i + 2]
    if not all(math.isfinite(y) for y in (y0, y1, y2)):
        return x1, False
    # the parabola through three points: its vertex (Lagrange form's derivative set to zero)
    denominator = (x0 - x1) * (x0 - x2) * (x1 - x2)
    a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / denominator
    b = (x2 * x2 * (y0 - y1) + x1 * x1 * (y2 - y0) + x0 * x0 * (y1 - y2)) / denominator
    if a <= 0:
        return x1, False
    return min(max(-b / (2 * a), x0), x2), False


def optimum(method: str, size: str, by_seed: dict[int, dict[float, float]], seed: int = 0,
            at: tuple[tuple[str, Any], ...] = (), reference: float = REFERENCE_RATE) -> Optimum:
    """The optimum, gain and noise of one (method, size) from each seed's loss at each grid rate
    (``by_seed[seed][rate]``), against ``reference``; every seed must have every rate."""
    rates = sorted(next(iter(by_seed.values())))
    for s, losses in by_seed.items():
        if sorted(losses) != rates:
            raise ValueError(f"{method} {size}: seed {s} has rates {sorted(losses)}, not the grid {rates}")
    if reference not in rates:
        raise ValueError(f"{method} {size}: the grid {rates} lacks the reference rate {reference:g}")
    seeds = sorted(by_seed)
    fits = [vertex(rates, [by_seed[s][r] for r in rates]) for s in seeds]
    xs = [x for x, _ in fits]
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(xs, k=len(xs))) for _ in range(BOOTSTRAP))
    lo, hi = means[int(0.025 * BOOTSTRAP)], means[int(0.975 * BOOTSTRAP) - 1]
    x = statistics.fmean(xs)
    step = math.log2(rates[1] / rates[0])
    nearest = min(rates, key=lambda r: abs(math.log2(r) - x))
    gains = [by_seed[s][reference] - by_seed[s][nearest] for s in seeds]
    gain = statistics.fmean(gains)
    if len(seeds) > 1:
        h = half_width(statistics.stdev(gains) / math.sqrt(len(gains)), len(gains) - 1)
        gain_low, gain_high = gain - h, gain + h
        noise = statistics.stdev(by_seed[s][reference] for s in seeds)
    else:
        gain_low = gain_high = noise = None
    return Optimum(method, size, len(seeds), tuple(rates), 2 ** x, 2 ** lo, 2 ** hi, nearest,
                   any(edge for _, edge in fits), statistics.fmean(by_seed[s][reference] for s in seeds),
                   statistics.fmean(by_seed[s][nearest] for s in seeds), gain, gain_low, gain_high, noise,
                   abs(x - math.log2(reference)) / step, at, reference)


Key = tuple[str, str, tuple[tuple[str, Any], ...]]  # (method, size, the other axes' values)


def proxy_losses(curves: list[dict], runs: dict[str, dict], axis: str, budget: int
                 ) -> dict[Key, dict[int, dict[float, float]]]:
    """From a tuning sweep's curves table: each (method, size, other axes' values)'s fully trained loss at
    pretraining ``budget`` (a cooldown branch's final evaluation, or the trunk's at its own length), by seed
    and rate. The measure is the macro valid loss, or a per-domain run's loss on its domain (``domain_loss``:
    SLM-is is trained for it). ``runs``: the plan's runs by name (their axes and length)."""
    out: dict[Key, dict[int, dict[float, float]]] = {}
    for c in curves:
        name, _, branch = c["run"].partition("@")
        run = runs.get(name)
        if run is None or (int(branch) if branch else run["steps"]) != budget or c["step"] != budget:
            continue
        axes = dict(map(tuple, run["axes"]))
        rate = axes.pop(axis)
        loss = c.get("domain_loss") if run["domain"] else c["loss"]
        key = (run["method"], run["size"], tuple(sorted(axes.items())))
        out.setdefault(key, {}).setdefault(run["seed"], {})[rate] = loss if loss is not None else math.nan
    return out


def specialized_losses(rows: list[dict], axis: str) -> dict[Key, dict[int, dict[float, float]]]:
    """From a tuning sweep's results table: each (method, size, other axes' values)'s specialized loss (log
    perplexity, the mean over its domains), by seed and the rate ``axis`` (a column of the table)."""
    cells: dict[tuple[Key, int, float], list[float]] = {}
    for r in rows:
        ppl = r["perplexity"]
        others = tuple(sorted((k, r[k]) for k in r if "." in k and k != axis))
        cells.setdefault(((r["method"], r["size"], others), r["seed"], r[axis]), []).append(
            math.log(ppl) if ppl is not None and math.isfinite(ppl) and ppl > 0 else math.nan)
    out: dict[Key, dict[int, dict[float, float]]] = {}
    for (key, seed, rate), losses in cells.items():
        out.setdefault(key, {}).setdefault(seed, {})[rate] = statistics.fmean(losses)
    return out


def optima(losses: dict[Key, dict[int, dict[float, float]]], reference: float = REFERENCE_RATE) -> list[Optimum]:
    """``optimum`` of every (method, size, other axes' values), against ``reference``."""
    return [optimum(method, size, by_seed, at=at, reference=reference)
            for (method, size, at), by_seed in sorted(losses.items(), key=repr)]


@dataclass(frozen=True)
class RateProposal:
    """What ``slm rate`` answers for a size under a parametrization, from a transfer sweep's optima."""

    size: str
    parametrization: str
    transfers: bool
    rate: float | None  # the base size's optimum, when the parametrization transfers
    low: float | None
    high: float | None
    base: str
    drift: dict[str, float]  # each measured size's optimum, log2 steps from the base's (signed)
    extrapolated: bool  # the size is outside the measured widths or depths

    def text(self) -> str:
        drift = ", ".join(f"{s} {d:+.2f}" for s, d in self.drift.items())
        sizes = ", ".join(self.drift)
        if not self.transfers:
            return (f"no rate proposed for {self.size} under {self.parametrization}: the optimum did not carry across "
                    f"the measured sizes (its drift from {self.base}, in factor-2 steps: {drift}; the rule allows ±1) — "
                    f"tune the rate at {self.size} itself")
        where = ("an extrapolation beyond the measured sizes" if self.extrapolated
                 else "within the measured sizes")
        return (f"{self.size} under {self.parametrization}: peak rate {self.rate:.3g} (95% {self.low:.3g} to "
                f"{self.high:.3g}), the optimum at {self.base}, which carried to {sizes} within one factor-2 step "
                f"(drift {drift}); {where}")


def propose_rate(found: list[Optimum], size: str, parametrization: str, base: str = "d1",
                 key: str = "pretrain.model.parametrization", method: str = "generic") -> RateProposal:
    """The rule of docs/results.md ("Transfer across width and depth"): under ``parametrization`` the rate
    transfers when every measured size's optimum is within one grid step of ``base``'s; then ``size`` gets the
    base's optimum and interval, labelled an extrapolation beyond the measured widths or depths; otherwise none.
    The transfer is of one method's rate (``method``: the generic model, which the transfer sweep trains); a size
    with several optima of that method under the parametrization (another axis crossed) is refused, not picked."""
    from slm.models.config import size_config

    mine: dict[str, Optimum] = {}
    for o in found:
        if o.method == method and dict(o.at).get(key, "sp") == parametrization:
            if o.size in mine:
                raise ValueError(f"{method} at {o.size} under {parametrization} has several optima "
                                 f"({mine[o.size].at} and {o.at}): a transfer sweep crosses only the rate")
            mine[o.size] = o
    if base not in mine:
        raise ValueError(f"no optimum of {base} under {parametrization} among {sorted({(o.size, o.at) for o in found}, key=repr)}")
    b = mine[base]
    step = math.log2(b.rates[1] / b.rates[0])
    drift = {s: math.log2(o.optimum / b.optimum) / step for s, o in sorted(mine.items()) if s != base}
    transfers = all(abs(d) <= 1 for d in drift.values())
    shapes = [size_config(s) for s in mine]
    target = size_config(size)
    width = lambda m: m.width or 64 * m.depth  # noqa: E731
    extrapolated = width(target) > max(map(width, shapes)) or target.depth > max(m.depth for m in shapes)
    return RateProposal(size, parametrization, transfers, b.optimum if transfers else None,
                        b.low if transfers else None, b.high if transfers else None, base, drift, extrapolated)


def markdown(found: list[Optimum], what: str) -> str:
    reference = found[0].reference if found else REFERENCE_RATE
    lines = [f"| method | size | at | seeds | optimum (95%) | nearest grid rate | loss at {reference:g} | loss there "
             "| gain (95%) | seed noise | decision |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for o in found:
        gain = f"{o.gain:+.4f}" + ("" if o.gain_low is None else f" [{o.gain_low:+.4f}, {o.gain_high:+.4f}]")
        noise = "—" if o.seed_noise is None else f"{o.seed_noise:.4f}"
        at = ", ".join(f"{k.rsplit('.', 1)[-1]} {v}" for k, v in o.at) or "—"
        lines.append(f"| {o.method} | {o.size} | {at} | {o.seeds} | {o.optimum:.3g} [{o.low:.3g}, {o.high:.3g}] | {o.nearest:g} "
                     f"| {o.loss_at_reference:.4f} | {o.loss_at_nearest:.4f} | {gain} | {noise} | {o.reason()} |")
    return f"{what}\n\n" + "\n".join(lines) + "\n"


def rate_from_tables(tables: str | Path, size: str, parametrization: str,
                     axis: str = "pretrain.train.optim.lr") -> RateProposal:
    """``slm rate``: from a transfer sweep's tables (its plan and curves), the optima of every measured size at
    its longest proxy budget, and ``propose_rate``'s answer for ``size``."""
    import json

    from slm.records.table import read_curves

    tables = Path(tables)
    plan = json.loads((tables / "plan.json").read_text())
    runs = {r["name"]: r for r in plan["runs"] if any(k == axis for k, _ in r.get("axes", ()))}
    if not runs:
        raise ValueError(f"{tables}: no run of this sweep has the axis {axis}: not a tuning sweep")
    budget = max(r["steps"] for r in runs.values())
    return propose_rate(optima(proxy_losses(read_curves(tables), runs, axis, budget)), size, parametrization)
