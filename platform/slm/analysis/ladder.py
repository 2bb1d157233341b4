"""A sweep's settings as curves over their pretraining budget, and what the curves answer between and
beyond the measured budgets: the loss at a user's exact budgets, and where two methods' curves cross.

A **family** is a setting without its pretraining budget — method, size, domain, in-domain tokens,
specialization steps — measured at several pretraining budgets and seeds. Its curve (``slm.analysis.curves``)
is the specialized model's log-perplexity against the pretraining FLOPs. Only fully trained budgets make
a curve worth fitting: snapshots of one cosine run are not models anyone would train at that budget
(``pretrain.train.optim.schedule: wsd`` trains each budget fully, docs/budgets.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slm import methods
from slm.analysis import curves
from slm.analysis.results import menu
from slm.records.table import finite

FAMILY = ("method", "size", "domain", "domain_tokens", "specialize_steps")


@dataclass(frozen=True)
class Family:
    method: str
    size: str
    domain: str
    domain_tokens: int
    specialize_steps: int
    inference_flops_per_token: float
    specialize_flops: float  # per domain, the specialization alone
    per_domain: bool  # its pretraining is chosen for the domain (SLM-is): a per-domain cost, no generic one
    fit: curves.Fit  # log-perplexity against pretraining FLOPs

    @property
    def name(self) -> str:
        return f"{self.method}-{self.size}-{self.domain}-t{self.domain_tokens}-s{self.specialize_steps}"

    @property
    def cell(self) -> tuple:
        """What two families must share to be compared on one axis: all but the method."""
        return self.size, self.domain, self.domain_tokens, self.specialize_steps

    def pretrain_flops_allowed(self, pretrain_budget: float, specialization_budget: float) -> float:
        """The most pretraining this family can buy within the budgets (its curve falls with pretraining):
        the whole pretraining budget, or for a per-domain method what specialization leaves of the
        per-domain budget."""
        return specialization_budget - self.specialize_flops if self.per_domain else pretrain_budget


def families(rows: list[dict]) -> list[Family]:
    """Every family of a results table (one row per trial, each with its seed), with its fitted curve."""
    groups: dict[tuple, list[dict]] = {}
    for r in menu(rows):
        if finite(r["perplexity"]) and r["method"] != methods.DISTILLED:
            groups.setdefault(tuple(r[k] for k in FAMILY), []).append(r)
    out = []
    for key, group in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        points = [curves.Point(float(r["pretrain_flops"]), math.log(r["perplexity"]), r["seed"]) for r in group]
        out.append(Family(*key, inference_flops_per_token=group[0]["inference_flops_per_token"],
                          specialize_flops=sum(r["specialize_flops"] for r in group) / len(group),
                          per_domain=methods.get(key[0]).per_domain, fit=curves.fit(points)))
    return out


@dataclass(frozen=True)
class Prediction:
    family: Family
    pretrain_flops: float  # where on its curve the budgets put it
    loss: curves.Interval  # the mean log-perplexity there (across seeds)

    @property
    def perplexity(self) -> tuple[float, float, float]:
        return math.exp(self.loss.value), math.exp(self.loss.low), math.exp(self.loss.high)


def predict(fams: list[Family], *, pretrain_budget: float, specialization_budget: float, inference_budget: float,
            domain_tokens: int, domain: str | None = None) -> tuple[list[Prediction], list[str]]:
    """Each admissible family's loss at the pretraining the budgets allow it, best first; and why the
    others were left out (one line per reason)."""
    out, left = [], {}
    for f in fams:
        if domain is not None and f.domain != domain:
            continue
        if f.inference_flops_per_token > inference_budget or f.domain_tokens > domain_tokens:
            continue
        if not f.fit.fitted:
            left.setdefault(f"no curve: {f.fit.why}", []).append(f.name)
            continue
        x = f.pretrain_flops_allowed(pretrain_budget, specialization_budget)
        if x <= 0 or f.specialize_flops > specialization_budget:
            left.setdefault("its specialization alone exceeds the specialization budget", []).append(f.name)
            continue
        out.append(Prediction(f, x, f.fit.loss(x)))
    notes = [f"{why}: {', '.join(names)}" for why, names in left.items()]
    return sorted(out, key=lambda p: p.loss.value), notes


def difference(a: Prediction, b: Prediction) -> curves.Interval:
    """b − a in log-perplexity, paired by seed (each seed's curves at the two families' budgets)."""
    fa, fb = a.family.fit, b.family.fit
    value = float(fb.params(b.pretrain_flops) - fa.params(a.pretrain_flops))
    shared = sorted(set(fa.per_seed) & set(fb.per_seed))
    per_seed = [float(fb.per_seed[s](b.pretrain_flops) - fa.per_seed[s](a.pretrain_flops)) for s in shared]
    return fa.across_seeds(value, per_seed, a.loss.extrapolated or b.loss.extrapolated)


@dataclass(frozen=True)
class CellCrossing:
    a: Family
    b: Family
    crossing: curves.Crossing


def crossings(fams: list[Family], against: str = methods.BASELINE) -> list[CellCrossing]:
    """For each method measured in the same cell as ``against`` (the generic model: the papers' question
    is when a method overtakes it), where their curves cross over the pretraining FLOPs both were
    measured at and a decade beyond (or that they do not)."""
    out = []
    fitted = [f for f in fams if f.fit.fitted]
    for a in (f for f in fitted if f.method == against):
        for b in fitted:
            if a.cell != b.cell or a.method == b.method:
                continue
            low = min(a.fit.span[0], b.fit.span[0])
            high = 10 * max(a.fit.span[1], b.fit.span[1])
            out.append(CellCrossing(a, b, curves.crossing(a.fit, b.fit, low, high)))
    return out


def describe_cell(cell: tuple) -> str:
    """``medical, d1, 25,000 tokens, 25 spec. steps``: a family's cell in words, its domain first."""
    size, domain, tokens, steps = cell
    return f"{domain}, {size}, {tokens:,} tokens, {steps} spec. steps"


def describe_crossing(c: CellCrossing) -> str:
    x = c.crossing
    names = {"a": methods.display(c.a.method)[0], "b": methods.display(c.b.method)[0]}  # the papers' names
    if x.at is None:
        lower = names["a"] if c.a.fit.params(x.high) < c.b.fit.params(x.high) else names["b"]
        return (f"{names['a']} and {names['b']}: no crossing in [{x.low:.3g}, {x.high:.3g}] pretraining FLOPs "
                f"({lower} lower throughout; {x.seeds_crossing} of {x.seeds} seeds' curves cross there)")
    at = x.at
    where = "extrapolated, beyond the measured budgets" if at.extrapolated else "within the measured budgets"
    spread = (f"95% interval {at.low:.3g} to {at.high:.3g}" if math.isfinite(at.high) and at.low > 0 else
              "no interval: one seed" if x.seeds < 2 else
              f"no interval: {x.seeds - x.seeds_crossing} of {x.seeds} seeds' curves do not cross in the range")
    return (f"{names['a']} and {names['b']} cross at {at.value:.3g} pretraining FLOPs ({spread}; {where}): "
            f"{names[x.below_after]} is lower beyond it")
