"""A design's power per claim, before it runs: ``slm sweep SPEC --dry-run --noise-from TABLE``.

The noise comes from a table a sweep already measured (its folder: ``results.parquet`` and ``plan.json``):
its claims are evaluated by the current rules (``slm.analysis.claims``) and each comparison's interval gives
the **noise of one seed's difference**, relative to b's mean: ``se·√n / b`` (for a paired t, the spread of
the per-seed differences; for Welch's t with n seeds a side, that of one seed's a − b). A claim's noise
is the median of its comparisons' of the same measure and expectation (C2's two arms differ), so a
design with other budgets, domains or seeds borrows the level of noise, not the rows.

The power is then simulated on the new design's own comparisons, through the same rules (``judge`` and
``settle``): each comparison draws per-seed values whose true difference is ``effect`` × b's level in the
direction the claim expects — a better than b for "lower" and "not higher", worse for "not lower" — and 0
for "tie", with the measured noise; the claim's power is the share of simulated tables in which it
**holds** (every comparison holds). ``seeds_for`` is the fewest seeds at which that
share reaches 80%, searched over a ladder of seed counts. This is a model of the noise, not a promise:
the rows of the new design may be noisier or quieter than the old ones.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from slm.analysis import stats
from slm.analysis.claims import Claim, Comparison, Design, evaluate, judge, settle
from slm.records.plan import Plan

TARGET = 0.8  # the power a design is sized for
SEED_LADDER = (3, 4, 5, 6, 8, 10, 12, 15, 20, 30)
EFFECTS = (0.05, 0.10)  # the true advantages (relative) at which power is printed


@dataclass(frozen=True)
class Noise:
    """One kind of comparison's noise in a measured table: the median over its comparisons."""

    claim: str
    measure: str
    expected: str
    paired: bool
    relative_sd: float  # a seed's difference's standard deviation ÷ b's mean
    comparisons: int  # how many it is the median of


def comparison_noise(c: Comparison, seeds: int) -> float | None:
    """A seed's difference's standard deviation relative to b's mean, from the comparison's interval (Welch:
    ``seeds`` a side, the table's)."""
    if c.low is None or c.df is None or not c.b_mean:
        return None
    n = round(c.df) + 1 if c.test in ("paired t", "one-sample t") else seeds
    se = (c.high - c.low) / 2 / stats.half_width(1.0, c.df)
    return se * math.sqrt(n) / abs(c.b_mean)


MAX_SEEDS = 1000  # seeds_to_decide's search stops here


def seeds_to_decide(c: Comparison, noise: float, tested: int) -> tuple[str, int | None]:
    """("holds" | "refuted", the seeds at which the comparison's measured difference, taken as the truth with
    ``noise`` (a seed's difference's standard deviation relative to b's mean: `comparison_noise`), is decided with
    TARGET power — held at 95% (the claims check's rule for a comparison to hold), or refuted past a Bonferroni
    bound on Holm's adjustment over the claim's ``tested`` comparisons; None beyond MAX_SEEDS). A t approximation
    (the Welch comparisons' degrees of freedom taken as n − 1)."""
    reference = {"lower": 0.0, "not higher": -c.bound, "not lower": c.bound}[c.expected]
    delta = c.difference - reference
    in_favour = delta > 0 if c.expected in ("lower", "not higher") else delta < 0
    alpha = stats.ALPHA if in_favour else stats.ALPHA / tested
    spread = noise * abs(c.b_mean)

    def t_quantile(df: float, probability: float) -> float:
        return stats.half_width(1.0, df, level=2 * probability - 1)

    needed = next((n for n in range(2, MAX_SEEDS + 1)
                   if abs(delta) / (spread / math.sqrt(n)) >= t_quantile(n - 1, 1 - alpha / 2) + t_quantile(n - 1, TARGET)),
                  None)
    return ("holds" if in_favour else "refuted"), needed


def measured_noise(rows: list[dict], plan: Plan, curves: list[dict] | None = None) -> list[Noise]:
    """Each claim's noise, by measure and expectation, from a measured table and its plan."""
    design = Design.of(plan)
    seeds = len(design.seeds)
    out: dict[tuple, list[tuple[float, bool]]] = {}
    for claim in evaluate(rows, design, curves):
        for c in claim.comparisons:
            sd = comparison_noise(c, seeds)
            if sd is not None and math.isfinite(sd):
                out.setdefault((claim.id, c.measure, c.expected), []).append((sd, c.test != "Welch t"))
    return [Noise(cid, measure, expected, all(p for _, p in v), statistics.median(sd for sd, _ in v), len(v))
            for (cid, measure, expected), v in sorted(out.items())]


@dataclass(frozen=True)
class ClaimPower:
    claim: str
    comparisons: int
    seeds: int
    noise: str  # the noise it was simulated with, in words
    power: dict[str, float]  # effect (e.g. "5%") → P(holds)
    seeds_for: dict[str, int | None]  # effect → fewest seeds of SEED_LADDER reaching TARGET (None: more than 30)
    untested: list[str]


def noise_for(noises: list[Noise], claim: str, c: Comparison) -> Noise | None:
    """The measured noise a comparison of ``claim`` is simulated with: its own kind's; for a kind the table
    could not measure (C4 when no rival matched the student's cost), the noisiest of the same measure and
    expectation in the other claims, or failing that of the same claim."""
    exact = [x for x in noises if (x.claim, x.measure, x.expected) == (claim, c.measure, c.expected)]
    if exact:
        return exact[0]
    borrowed = [x for x in noises if (x.measure, x.expected) == (c.measure, c.expected)] or \
        [x for x in noises if x.claim == claim]
    return max(borrowed, key=lambda x: x.relative_sd) if borrowed else None


def simulate(claim: Claim, noises: list[Noise], seeds: int, effect: float, tables: int,
             rng: np.random.Generator) -> float | None:
    """P(the claim holds) over ``tables`` simulated sets of its comparisons at ``seeds`` seeds."""
    plans = []
    for c in claim.comparisons:
        noise = noise_for(noises, claim.id, c)
        if noise is None:
            return None
        paired = c.test in ("paired t", "one-sample t") or (c.test in ("missing", "failed", "one seed")
                                                              and noise.paired)
        # b − a relative to b: positive when a is better
        truth = {"lower": effect, "not higher": effect, "not lower": -effect, "tie": 0.0}[c.expected]
        plans.append((c, noise.relative_sd, paired, truth))
    holds = 0
    for _ in range(tables):
        simulated = []
        for c, sd, paired, truth in plans:
            if c.measure == "steps_share":  # a one-sample t against the bound
                values = list(1.0 - truth + sd * rng.standard_normal(seeds))
                simulated.append(judge(c.part, c.a, c.b, values, [1.0], c.expected, c.measure, paired=False,
                                       margin=c.margin, against_bound=True))
            elif paired:
                diffs = truth + sd * rng.standard_normal(seeds)
                simulated.append(judge(c.part, c.a, c.b, list(1.0 - diffs), [1.0] * seeds, c.expected, c.measure,
                                       paired=True, margin=c.margin))
            else:  # Welch: each side carries half of a seed's difference's variance
                a = 1.0 - truth + sd / math.sqrt(2) * rng.standard_normal(seeds)
                b = 1.0 + sd / math.sqrt(2) * rng.standard_normal(seeds)
                simulated.append(judge(c.part, c.a, c.b, list(a), list(b), c.expected, c.measure, paired=False,
                                       margin=c.margin))
        holds += settle(Claim(claim.id, claim.source, claim.statement, simulated)).verdict == "holds"
    return holds / tables


def design_power(plan: Plan, noises: list[Noise], tables: int = 400, seed: int = 0) -> list[ClaimPower]:
    """Each claim's power on ``plan`` at its seeds, and the seeds each effect needs, at the measured noise.
    The plan's comparisons are read off the claims evaluated on an empty table (every row "missing")."""
    design = Design.of(plan)
    rng = np.random.default_rng(seed)
    out = []
    for claim in evaluate([], design):
        n = len(design.seeds)
        used = sorted({f"{x.measure}, {x.expected}: {x.relative_sd:.1%}" + ("" if x.claim == claim.id else
                                                                          f" (borrowed from {x.claim})")
                       for c in claim.comparisons if (x := noise_for(noises, claim.id, c))})
        power, seeds_for = {}, {}
        for effect in EFFECTS:
            label = f"{effect:.0%}"
            power[label] = simulate(claim, noises, n, effect, tables, rng) if claim.comparisons else None
            seeds_for[label] = None
            if claim.comparisons and power[label] is not None:
                for k in SEED_LADDER:
                    p = power[label] if k == n else simulate(claim, noises, k, effect, tables // 2, rng)
                    if p is not None and p >= TARGET:
                        seeds_for[label] = k
                        break
        out.append(ClaimPower(claim.id, len(claim.comparisons), n, "; ".join(used) or "no measured noise", power,
                              seeds_for, list(claim.untested)))
    return out


def format_power(powers: list[ClaimPower], source: str) -> str:
    lines = [f"power per claim: P(holds) when each comparison's truth is the effect in the direction the claim "
             f"expects (0 for a tie), with the noise of a seed's difference measured in {source}:"]
    for p in powers:
        if not p.comparisons:
            lines.append(f"  {p.claim}: not tested by this plan ({'; '.join(p.untested)})")
            continue
        power = ", ".join(f"{k}: {v:.0%}" if v is not None else f"{k}: no noise measured" for k, v in p.power.items())
        need = ", ".join(f"{k}: {v if v is not None else f'> {SEED_LADDER[-1]}'}" for k, v in p.seeds_for.items())
        untested = f"; untested parts make it inconclusive: {'; '.join(p.untested)}" if p.untested else ""
        lines.append(f"  {p.claim}: {p.comparisons} comparisons at {p.seeds} seeds — power {power}; seeds for "
                     f"{TARGET:.0%}: {need} (noise {p.noise}){untested}")
    return "\n".join(lines)


def format_power_of(result: dict) -> str:
    """``power_from``'s result in words."""
    return format_power([ClaimPower(**c) for c in result["claims"]], result["noise_from"])


def power_from(table_folder: str | Path, plan: Plan, tables: int = 400) -> dict:
    """``--noise-from TABLE``: the noise of the sweep folder ``TABLE`` (results and plan), the power of ``plan``."""
    from slm.analysis.report import read_plan
    from slm.records.table import read_curves, read_table

    folder = Path(table_folder)
    noises = measured_noise(read_table(folder), read_plan(folder), read_curves(folder))
    powers = design_power(plan, noises, tables)
    return {"noise_from": str(folder), "noise": [asdict(n) for n in noises], "claims": [asdict(p) for p in powers]}
