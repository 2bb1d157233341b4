"""The seed papers' claims, evaluated from a sweep's results table (``slm report`` writes ``claims.md``).

The protocol, fixed before any study outcome is looked at (docs/budgets.md, "The claims check"):

- **The rows come from the plan, not from the table.** Each claim lists the comparisons the sweep's plan
  (``plan.json``, ``slm sweep --dry-run``) says it needs, at every planned seed. A planned row the table
  lacks makes the comparison inconclusive and names the row. A run that **failed** — a non-finite
  measure, or a perplexity no better than a uniform guess over the vocabulary (≥ its size) — is a result,
  not a gap and not a verdict: it is counted in its comparison's test at the uniform guess's perplexity
  (the worst a model can be said to score), so the test and Holm's adjustment weigh it like any seed,
  and ``claims.md`` lists it to be rerun or reported (issue 45: a divergence used to decide its
  comparison outside the test).
- **Each comparison is a t test at 95%** (``slm.analysis.stats``): the difference ``b − a`` of the measure
  (lower is better; positive when a is better) with its 95% interval — a paired t over seeds where the
  seed pairs the data (two specializations of one domain at one seed read the same in-domain subset in
  the same order), Welch's t where it does not (before specialization: different pretraining runs), a
  one-sample t against a fixed bound (C5).
- **What a comparison expects of a against b**, with the bound its interval must clear:
    - ``lower``: a is better. Holds when the interval lies above 0; does not hold when it lies below 0.
    - ``not lower``: a is not better than b by more than the margin m. Holds when the interval lies
      below +m·b; does not hold when it lies above +m·b.
    - ``not higher``: a is not worse than b by more than m. Holds above −m·b; does not hold below −m·b.
    - ``tie``: within ±m·b of each other (two one-sided tests). Holds when the interval lies inside
      ±m·b; does not hold when it lies wholly outside; otherwise inconclusive.
  An interval that straddles its bound is inconclusive: absence of evidence is not evidence.
- **A claim** holds when every planned comparison holds: an intersection-union test, whose chance of a
  false "holds" is at most the 2.5% of one one-sided test, with no correction needed. It does not hold
  when any comparison's refutation survives Holm's step-down over the claim's comparisons, which keeps
  the chance of a false "does not hold" at most 5% when every comparison is true. Otherwise (including a
  missing row or an untestable part of the design) it is inconclusive.

Revised in issue 45 before any second-edition run (the first study's ``claims.md`` keeps the rules it was
computed with): C2's second arm is the growth of the advantage with the budget, not a 2% equivalence the
design could not meet; C4 compares at matched compute (the rival at a budget costing at least the student);
a failed run counts in the test; ``claims.md`` names the rows behind the refutations of more than one claim.

``tests/analysis/test_claims.py`` simulates tables of known effects and measures each rule's error rates;
``slm.analysis.power`` gives a design's power per claim from the noise of a measured table.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from slm.analysis import stats
from slm.analysis.results import total_flops
from slm.analysis.stats import ALPHA, Difference
from slm.artifacts import atomic_write_text
from slm.methods import BASELINE, SLM_IS, SLM_MIX, SLM_PN, SOUP
from slm.records.plan import Plan, Setting, seed_suffix

Expectation = Literal["lower", "not lower", "not higher", "tie"]
Verdict = Literal["holds", "does not hold", "inconclusive"]
MEASURES = {"perplexity": "ppl after specialization", "perplexity_before": "ppl before specialization",
            "steps_share": "steps to the baseline's final loss ÷ its steps",
            "perplexity_ratio": "ppl after specialization ÷ generic's"}

# The equivalence margin of "tie", "not lower" and "not higher", relative to b's mean: Plan-Early Table 5's
# most frequent cluster's expert against the best expert chosen after fine-tuning all, 17.32 vs 16.98 ppl
# (2.0%), which the paper calls the same quality.
MARGIN = 0.02
# C3: the soup reaches the generic model's loss at the largest budget in at most this share of its steps
# (Soup-of-Experts: "~2× faster" at 350M; 0.6 leaves room for our scale). Tested at exactly this budget.
SOUP_REACH_SHARE = 0.6
# C5: SALT "matches the baseline at < 70% of its steps" (the SALT paper).
SALT_STEPS_SHARE = 0.7


# ----------------------------------------------------------------------------------------- the design


@dataclass(frozen=True)
class CurveRun:
    """A pretraining run whose evaluations C5 reads (``curves.parquet``)."""

    name: str
    role: str  # large or salt
    seed: int | None


@dataclass
class Design:
    """What a sweep's plan measures. Every comparison a claim makes is built from here."""

    settings: list[Setting]
    seeds: list[int | None]
    small: str
    large: str | None
    curve_runs: list[CurveRun] = field(default_factory=list)
    entropy: dict[str, float] = field(default_factory=dict)  # each domain's coarse histogram entropy (nats)
    vocab_size: int = 0  # a uniform guess's perplexity: what a failed run counts as (0: unknown)

    @classmethod
    def of(cls, plan: Plan) -> Design:
        """From a sweep's plan (``slm.records.plan``; its ``plan.json`` through ``Plan.from_json``)."""
        settings: dict[str, Setting] = {}
        seeds: list[int | None] = []
        for t in plan.trials:
            settings.setdefault(t.setting, t.as_setting())
            if t.seed not in seeds:
                seeds.append(t.seed)
        runs = [CurveRun(r.name, r.role, r.seed) for r in plan.runs if r.role in ("large", "salt")]
        return cls(list(settings.values()), sorted(seeds, key=lambda s: -1 if s is None else s), plan.small,
                   plan.large, runs, dict(plan.histogram_entropy), plan.vocab_size)

    def grid(self, **where) -> list[Setting]:
        return self.find(role="grid", **where)

    def find(self, **where) -> list[Setting]:
        return [p for p in self.settings if all(getattr(p, k) == v for k, v in where.items())]

    def one(self, **where) -> Setting | None:
        found = self.find(**where)
        if len(found) > 1:
            raise ValueError(f"claims: {len(found)} planned settings match {where}: the plan has an axis the claim "
                             f"does not fix ({[p.setting for p in found]})")
        return found[0] if found else None

    def axis(self, name: str) -> list:
        return sorted({getattr(p, name) for p in self.grid()})

    @property
    def methods(self) -> list[str]:
        return self.axis("method")


def trial_name(setting: str, seed: int | None) -> str:
    return setting if seed is None else f"{setting}-seed{seed}"


class Measured:
    """The results table's rows by (setting, seed), and the vocabulary that says which runs failed."""

    def __init__(self, rows: list[dict], vocab_size: int = 0):
        self.rows = {(r["setting"], r["seed"]): r for r in rows}
        self.vocab_size = vocab_size

    def values(self, p: Setting, measure: str, seeds: list[int | None]) -> tuple[list[float], list[str]]:
        """``measure`` at each planned seed, and the trials the table lacks."""
        values, missing = [], []
        for seed in seeds:
            r = self.rows.get((p.setting, seed))
            if r is None or r.get(measure) is None:
                missing.append(trial_name(p.setting, seed))
            else:
                values.append(float(r[measure]))
        return values, missing

    def cost(self, p: Setting, seeds: list[int | None]) -> float | None:
        """C_total for one domain (generic + per-domain FLOPs; a distilled student's includes its teacher's),
        the same at every seed; ``None`` when the table has no row of the setting."""
        found = [self.rows[(p.setting, s)] for s in seeds if (p.setting, s) in self.rows]
        return statistics.fmean(total_flops(r) for r in found) if found else None


# ---------------------------------------------------------------------------------------- comparisons


@dataclass
class Comparison:
    part: str  # which condition of the claim, in words
    a: str  # setting names (the table's ``setting`` column)
    b: str
    measure: str
    expected: Expectation  # of a against b
    margin: float  # relative to b's mean (0 for "lower")
    test: str  # paired t, Welch t, one-sample t, one seed, missing, failed (untestable)
    a_mean: float | None = None
    a_ci: float | None = None  # half the 95% interval of a's mean over seeds
    b_mean: float | None = None
    b_ci: float | None = None
    difference: float | None = None  # b − a: positive when a is lower (better)
    low: float | None = None  # the difference's 95% interval
    high: float | None = None
    df: float | None = None
    p_hold: float | None = None  # the evidence for the expectation (2 × one-sided; < 0.05: holds)
    p_refute: float | None = None  # the evidence against it, before and after Holm's adjustment
    p_refute_adjusted: float | None = None
    verdict: Verdict = "inconclusive"
    note: str = ""  # missing rows, a failed run, how a best expert was chosen
    group: str = ""  # the domain, where a claim is read per domain
    failed: list[str] = field(default_factory=list)  # the runs that failed (trial names), counted in the test
    identity: bool = False  # b's value is a's at every seed: the comparison is a model against itself

    @property
    def bound(self) -> float:
        return self.margin * (self.b_mean or 0.0)


IDENTITY = "by identity: b's value is a's at every seed (the same model scored twice)"


def bounds_p(expected: Expectation, d: Difference, bound: float) -> tuple[float, float]:
    """(p for the expectation, p against it) of the difference ``d`` with the margin ``bound`` (absolute)."""
    if expected == "lower":
        return d.p_above(0.0), d.p_below(0.0)
    if expected == "not lower":
        return d.p_below(bound), d.p_above(bound)
    if expected == "not higher":
        return d.p_above(-bound), d.p_below(-bound)
    return max(d.p_above(-bound), d.p_below(bound)), min(d.p_above(bound), d.p_below(-bound))


def failed(value: float, vocab_size: int) -> bool:
    """A run that failed: a non-finite measure, or a perplexity no better than a uniform guess over the
    vocabulary (when the plan records its size)."""
    return not math.isfinite(value) or bool(vocab_size) and value >= vocab_size


def counted(values: list[float], ceiling: float) -> list[float]:
    """``values`` with each failed one counted at ``ceiling``, a uniform guess's perplexity (none when it is 0)."""
    return [ceiling if ceiling and failed(x, ceiling) else x for x in values]


def failed_note(runs: list[str], ceiling: int) -> str:
    return f"failed: {', '.join(runs)} ({f'counted as a uniform guess, {ceiling:,} ppl' if ceiling else 'not tested: rerun it'})"


def judge(part: str, a: str, b: str, va: list[float], vb: list[float], expected: Expectation, measure: str, *,
          paired: bool, margin: float = 0.0, group: str = "", note: str = "", against_bound: bool = False,
          seeds: list[int | None] | None = None, vocab_size: int = 0, b_trials: list[str] | None = None) -> Comparison:
    """A comparison of a's values against b's (per seed, in the same seed order when ``paired``).
    ``against_bound``: b is a fixed number (one value), tested with a one-sample t. A failed value
    (``failed``) of a perplexity is counted at the uniform guess's perplexity, ``vocab_size``; without one
    (or for another measure) the comparison is not tested and is inconclusive, naming the run (b's runs are
    named ``b_trials`` when b is not one setting: C6's best expert)."""
    c = Comparison(part, a, b, measure, expected, margin, "", group=group, note=note)
    seeds = seeds if seeds is not None else list(range(max(len(va), len(vb))))
    ceiling = vocab_size if measure in ("perplexity", "perplexity_before") else 0
    names = {"a": [trial_name(a, s) for s in seeds], "b": b_trials or [trial_name(b, s) for s in seeds]}
    sides = (("a", va),) if against_bound else (("a", va), ("b", vb))
    c.failed = [names[side][i] for side, values in sides for i, x in enumerate(values) if failed(x, ceiling)]
    # C6 on a domain where every seed's best expert is the most frequent cluster's: it "holds" by identity, a fact
    # about the choice, not evidence of two experts within the margin; claims.md says so.
    c.identity = paired and not against_bound and len(va) > 0 and list(va) == list(vb)
    if c.identity:
        note = "; ".join(filter(None, [note, IDENTITY]))
        c.note = note
    if c.failed:
        c.note = " ".join(filter(None, [note, failed_note(c.failed, ceiling)]))
        if not ceiling:
            c.test = "failed"
            return c
        va, vb = counted(va, ceiling), (vb if against_bound else counted(vb, ceiling))
    c.a_mean, c.a_ci = statistics.fmean(va), stats.mean_interval(va)
    c.b_mean, c.b_ci = statistics.fmean(vb), stats.mean_interval(vb)
    d = stats.one_sample(va, vb[0]) if against_bound else stats.paired(va, vb) if paired else stats.welch(va, vb)
    c.test, c.difference, c.df = d.test, d.estimate, d.df
    if d.testable:
        c.low, c.high = d.interval()
        c.p_hold, c.p_refute = bounds_p(expected, d, c.bound)
    return c


def missing(part: str, a: str, b: str, expected: Expectation, measure: str, rows: list[str], margin: float = 0.0,
            group: str = "") -> Comparison:
    return Comparison(part, a, b, measure, expected, margin, "missing", group=group,
                      note=f"the table has no row {', '.join(rows)}")


def compare(part: str, a: Setting, b: Setting, expected: Expectation, table: Measured, seeds: list[int | None], *,
            measure: str = "perplexity", paired: bool = True, margin: float = 0.0, group: str = "") -> Comparison:
    """Two planned settings at every planned seed."""
    va, miss_a = table.values(a, measure, seeds)
    vb, miss_b = table.values(b, measure, seeds)
    if miss_a or miss_b:
        return missing(part, a.setting, b.setting, expected, measure, miss_a + miss_b, margin, group)
    return judge(part, a.setting, b.setting, va, vb, expected, measure, paired=paired, margin=margin, group=group,
                 seeds=seeds, vocab_size=table.vocab_size)


# --------------------------------------------------------------------------------------------- claims


@dataclass
class Claim:
    id: str
    source: str
    statement: str
    comparisons: list[Comparison] = field(default_factory=list)
    untested: list[str] = field(default_factory=list)  # parts of the claim the design cannot test, and why
    verdict: Verdict = "inconclusive"
    groups: dict[str, Verdict] = field(default_factory=dict)  # per domain, where the claim is read per domain
    rule: str = ""


def combine(comparisons: list[Comparison], untested: list[str]) -> Verdict:
    verdicts = [c.verdict for c in comparisons]
    if "does not hold" in verdicts:
        return "does not hold"
    if comparisons and not untested and all(v == "holds" for v in verdicts):
        return "holds"
    return "inconclusive"


def settle(claim: Claim) -> Claim:
    """Each comparison's verdict (Holm over the claim's refutations) and the claim's."""
    tested = [c for c in claim.comparisons if c.p_refute is not None]  # not missing, untestable or one seed
    for c, adjusted in zip(tested, stats.holm([c.p_refute for c in tested]), strict=True):
        c.p_refute_adjusted = adjusted
        c.verdict = "holds" if c.p_hold < ALPHA else "does not hold" if adjusted < ALPHA else "inconclusive"
    claim.verdict = combine(claim.comparisons, claim.untested)
    groups = sorted({c.group for c in claim.comparisons if c.group})
    claim.groups = {g: combine([c for c in claim.comparisons if c.group == g], claim.untested) for g in groups}
    claim.rule = (f"holds when all {len(claim.comparisons)} planned comparisons hold (each at 95%); does not hold "
                  f"when any refutation survives Holm's adjustment over the {len(tested)} with an interval; "
                  "otherwise inconclusive")
    return claim


def c1(design: Design, table: Measured) -> Claim:
    claim = Claim("C1", "Plan-Early", "With the smallest in-domain data size, SLM-is is the best small model on each "
                  "domain, and beats the large model: at the largest pretraining budget and each specialization budget, "
                  "SLM-is is lower than every other method of the smallest size, and than the large generic model "
                  "specialized on the same data (where the plan has it, `sweep.distill`).")
    others = [m for m in design.methods if m != SLM_IS]
    if SLM_IS not in design.methods or not others:
        claim.untested.append(f"the plan has no {SLM_IS} or no other method to compare it with (methods: "
                              f"{', '.join(design.methods)})")
        return claim
    small, tokens, top = design.small, design.axis("domain_tokens")[0], design.axis("pretrain_steps")[-1]
    if not design.find(role="teacher"):
        claim.untested.append("against the large model: the plan has no specialized large model (sweep.distill "
                              "with sweep.large_size)")
    for domain in design.axis("domain"):
        for steps in design.axis("specialize_steps"):
            cell = dict(domain=domain, domain_tokens=tokens, specialize_steps=steps)
            ours = design.one(method=SLM_IS, size=small, pretrain_steps=top, role="grid", **cell)
            if ours is None:  # a part of the design (jobs/study/parts.yaml) may hold SLM-is for some domains only
                claim.untested.append(f"{domain}, {steps} steps: the plan has no SLM-is trial")
                continue
            rivals = [design.one(method=m, size=small, pretrain_steps=top, role="grid", **cell) for m in others]
            rivals += design.find(role="teacher", **cell)  # at the large runs' own length (sweep.large_steps)
            for rival in filter(None, rivals):
                what = f"the large model ({rival.size})" if rival.role == "teacher" else rival.method
                claim.comparisons.append(compare(f"{domain}, {tokens:,} tokens, {steps} steps: SLM-is vs {what}",
                                                 ours, rival, "lower", table, design.seeds, group=domain))
    return claim


def c2(design: Design, table: Measured) -> Claim:
    claim = Claim("C2", "Plan-Early", "SLM-mix and SLM-pn pay off with pretraining: at the largest pretraining budget "
                  "and the smallest specialization budget they are lower than the generic small model, and their "
                  "advantage over it grows with the budget — the ratio of their perplexity to generic's, per seed, "
                  "is lower at the largest budget than at the smallest (on each domain and in-domain data size). "
                  "Read per domain beside its histogram entropy: Plan-Early found that PN and mix did not win on the "
                  "domains whose cluster histogram has the highest entropy.")
    absent = [m for m in (BASELINE, SLM_MIX, SLM_PN) if m not in design.methods]
    budgets = design.axis("pretrain_steps")
    if absent or len(budgets) < 2:
        claim.untested.append(f"the plan has no {', '.join(absent)} settings" if absent else
                              f"the plan has one pretraining budget ({budgets}); the claim compares two")
        return claim
    small, steps = design.small, design.axis("specialize_steps")[0]
    for domain in design.axis("domain"):
        for tokens in design.axis("domain_tokens"):
            at = dict(size=small, domain=domain, domain_tokens=tokens, specialize_steps=steps, role="grid")
            generic = {p: design.one(method=BASELINE, pretrain_steps=p, **at) for p in (budgets[0], budgets[-1])}
            for method in (SLM_MIX, SLM_PN):
                ours = {p: design.one(method=method, pretrain_steps=p, **at) for p in (budgets[0], budgets[-1])}
                label = f"{domain}, {tokens:,} tokens"
                claim.comparisons.append(compare(f"{label}, {budgets[-1]} pretraining steps: {method} vs generic",
                                                 ours[budgets[-1]], generic[budgets[-1]], "lower", table,
                                                 design.seeds, group=domain))
                claim.comparisons.append(growth(f"{label}: {method} ÷ generic at {budgets[-1]} vs at {budgets[0]} "
                                                "pretraining steps", ours, generic, table, design.seeds, domain))
    return claim


def growth(part: str, ours: dict[int, Setting], generic: dict[int, Setting], table: Measured,
           seeds: list[int | None], group: str) -> Comparison:
    """C2's second arm: per seed, a method's perplexity over generic's at the largest budget (a) against the
    same ratio at the smallest (b), "lower", paired over seeds (a seed's budgets are one run's snapshots or
    branches, and its specializations read the same in-domain subset). A failed run enters its ratio as a
    uniform guess's perplexity, as in ``judge``."""
    small, large = sorted(ours)
    values, gaps, failures = {}, [], []
    vocab = table.vocab_size
    for budget in (small, large):
        mine, miss_m = table.values(ours[budget], "perplexity", seeds)
        base, miss_b = table.values(generic[budget], "perplexity", seeds)
        gaps += miss_m + miss_b
        failures += [trial_name(p.setting, seed) for p, v in ((ours[budget], mine), (generic[budget], base))
                     for seed, x in zip(seeds, v, strict=False) if failed(x, vocab)]
        values[budget] = [m / g for m, g in zip(counted(mine, vocab), counted(base, vocab), strict=False)]
    a, b = f"{ours[large].setting} ÷ {generic[large].setting}", f"{ours[small].setting} ÷ {generic[small].setting}"
    if gaps:
        return missing(part, a, b, "lower", "perplexity_ratio", gaps, group=group)
    c = judge(part, a, b, values[large], values[small], "lower", "perplexity_ratio", paired=True, group=group,
              seeds=seeds)
    if failures and vocab:
        c.failed, c.note = failures, failed_note(failures, vocab)
    return c


def c3(design: Design, table: Measured) -> Claim:
    claim = Claim("C3", "Soup-of-Experts", "Θ(domain histogram), instantiated without fine-tuning, has a lower domain "
                  "loss than the generic model at equal pretraining steps (each budget), and reaches the generic "
                  f"model's loss at the largest budget in ≤ {SOUP_REACH_SHARE:g}× its steps: the soup at exactly "
                  f"{SOUP_REACH_SHARE:g}× the largest budget is not higher than the generic model at the largest, "
                  f"by more than {MARGIN:.0%}. Before specialization; Welch's t (different pretraining runs).")
    if any(m not in design.methods for m in (BASELINE, SOUP)):
        claim.untested.append(f"the plan has no {BASELINE} or no {SOUP} settings")
        return claim
    # Before specialization the in-domain data size and specialization budget do not matter: the rows at
    # the smallest of each are the pretrained models' own evaluation.
    at = dict(size=design.small, domain_tokens=design.axis("domain_tokens")[0],
              specialize_steps=design.axis("specialize_steps")[0], role="grid")
    budgets = design.axis("pretrain_steps")
    top, reach = budgets[-1], round(SOUP_REACH_SHARE * budgets[-1])
    if reach not in budgets:
        claim.untested.append(f"the reach: no pretraining budget at {SOUP_REACH_SHARE:g}× the largest ({reach} "
                              f"steps; budgets {budgets}): add it to sweep.pretrain_steps")
    for domain in design.axis("domain"):
        for pretrain in budgets:
            claim.comparisons.append(compare(
                f"{domain}, {pretrain} pretraining steps: soup vs generic", design.one(method=SOUP, domain=domain,
                                                                                      pretrain_steps=pretrain, **at),
                design.one(method=BASELINE, domain=domain, pretrain_steps=pretrain, **at), "lower", table,
                design.seeds, measure="perplexity_before", paired=False, group=domain))
        if reach in budgets:
            claim.comparisons.append(compare(
                f"{domain}: soup at {reach} steps vs generic at {top}",
                design.one(method=SOUP, domain=domain, pretrain_steps=reach, **at),
                design.one(method=BASELINE, domain=domain, pretrain_steps=top, **at), "not higher", table,
                design.seeds, measure="perplexity_before", paired=False, margin=MARGIN, group=domain))
    return claim


def c4(design: Design, table: Measured) -> Claim:
    claim = Claim("C4", "Plan-Early", "Distillation loses to PN and mix once the teacher's cost is counted: at each "
                  "cell of the distillation trials, SLM-mix and SLM-pn of the student's size are lower than the "
                  "distilled student at matched compute — each at its smallest pretraining budget whose total cost "
                  "for one domain (generic + per-domain FLOPs) is at least the student's, the teacher's pretraining "
                  "and specialization counted in the student's. The budget is chosen by cost, never by outcome.")
    students = design.find(role="distill")
    if not students:
        claim.untested.append("the plan has no distillation trials (sweep.distill with sweep.large_size)")
        return claim
    for rival_method in (SLM_MIX, SLM_PN):
        if rival_method not in design.methods:
            claim.untested.append(f"the plan has no {rival_method} settings")
    for student in students:
        cell = dict(size=student.size, domain=student.domain, domain_tokens=student.domain_tokens,
                    specialize_steps=student.specialize_steps)
        label = f"{student.domain}, {student.domain_tokens:,} tokens, {student.specialize_steps} steps"
        budget = table.cost(student, design.seeds)
        for rival_method in (SLM_MIX, SLM_PN):
            rivals = design.grid(method=rival_method, **cell)
            if not rivals:
                continue
            costs = {p.setting: table.cost(p, design.seeds) for p in [student, *rivals]}
            unknown = [name for name, cost in costs.items() if cost is None]
            if unknown:  # the choice by cost needs every candidate's cost
                claim.comparisons.append(missing(f"{label}: {rival_method} vs distilled", rival_method, student.setting,
                                                 "lower", "perplexity", unknown, group=student.domain))
                continue
            # Matched compute (issue 45): the first study compared rivals that cost less than the student, and
            # its "does not hold" read the student's extra compute as the rivals' advantage.
            matched = [p for p in rivals if costs[p.setting] >= budget]
            if not matched:
                top = max(rivals, key=lambda p: costs[p.setting])
                claim.untested.append(f"{label}: no {rival_method} budget costs as much as the student ({budget:.3g} "
                                      f"FLOPs; its largest, {top.pretrain_steps} steps, {costs[top.setting]:.3g})")
                continue
            rival = min(matched, key=lambda p: costs[p.setting])
            claim.comparisons.append(compare(
                f"{label}: {rival_method} at {rival.pretrain_steps} pretraining steps ({costs[rival.setting]:.3g} "
                f"FLOPs, {costs[rival.setting] / budget:.2f}× the student's) vs distilled ({budget:.3g})", rival,
                student, "lower", table, design.seeds, group=student.domain))
    return claim


def reach_step(curve: list[dict], target: float) -> float | None:
    """The step at which an evaluated loss curve first reaches ``target``, linear between the two
    evaluations around the crossing (the first evaluation's step when it starts below); ``None`` if never."""
    previous = None
    for point in curve:
        if math.isfinite(point["loss"]) and point["loss"] <= target:
            if previous is None:
                return float(point["step"])
            fall = (previous["loss"] - target) / (previous["loss"] - point["loss"])
            return previous["step"] + fall * (point["step"] - previous["step"])
        previous = point if math.isfinite(point["loss"]) else previous
    return None


def c5(design: Design, curves: list[dict]) -> Claim:
    claim = Claim("C5", "SALT", "A smaller teacher used for the first ~15–20% of steps lets a larger student reach the "
                  "baseline's final quality (its macro valid loss at its last step) in fewer than "
                  f"{SALT_STEPS_SHARE:g}× the baseline's steps: per seed, the step at which the SALT run's loss "
                  "reaches the baseline's final loss, linear between evaluations, over the baseline's steps (a run "
                  "that never reaches it, or fails, counts as 1.0); their mean against the bound, one-sample t.")
    runs = {(r.role, r.seed): r.name for r in design.curve_runs}
    seeds = [s for s in design.seeds if ("large", s) in runs and ("salt", s) in runs]
    if not seeds:
        claim.untested.append("the plan has no SALT run beside its large baseline (sweep.salt_kd_share with "
                              "sweep.large_size)")
        return claim
    by_run: dict[str, list[dict]] = {}
    for point in curves:
        by_run.setdefault(point["run"], []).append(point)
    absent = [runs[(role, s)] for s in seeds for role in ("large", "salt") if runs[(role, s)] not in by_run]
    salt_name = runs[("salt", seeds[0])].removesuffix(seed_suffix(seeds[0]))
    bound = f"the bound {SALT_STEPS_SHARE:g}"
    if absent:
        claim.comparisons.append(missing("steps share", salt_name, bound, "lower", "steps_share", absent))
        return claim
    # A loss no better than a uniform guess's, log(vocabulary), is a failed run, as a perplexity ≥ the vocabulary is.
    ceiling = math.log(design.vocab_size) if design.vocab_size else 0.0
    shares, every, failed_salt, failed_base = [], set(), [], []
    for seed in seeds:
        base = sorted(by_run[runs[("large", seed)]], key=lambda p: p["step"])
        salt = sorted(by_run[runs[("salt", seed)]], key=lambda p: p["step"])
        every |= {b["step"] - a["step"] for a, b in zip(salt, salt[1:], strict=False)}
        target, total = base[-1]["loss"], base[-1]["step"]
        if failed(target, ceiling):  # no target to reach: the seed cannot be scored
            failed_base.append(runs[("large", seed)])
        elif failed(salt[-1]["loss"], ceiling):  # a failed SALT run never counts as having reached it
            failed_salt.append(runs[("salt", seed)])
            shares.append(1.0)
        else:
            reached = reach_step(salt, target)
            shares.append(reached / total if reached is not None else 1.0)
    if failed_base:
        claim.comparisons.append(Comparison(
            "steps share", salt_name, bound, "steps_share", "lower", 0.0, "failed", failed=failed_base,
            note=f"the baseline failed: {', '.join(failed_base)} (its final loss is the target; not tested: rerun it)"))
        return claim
    part = (f"{len(seeds)} seed(s), evaluated every {', '.join(map(str, sorted(every))) or '?'} steps; per seed "
            f"{', '.join(f'{x:.3f}' for x in shares)}")
    comparison = judge(part, salt_name, bound, shares, [SALT_STEPS_SHARE], "lower", "steps_share", paired=False,
                       against_bound=True)
    if failed_salt:
        comparison.failed = failed_salt
        comparison.note = f"failed: {', '.join(failed_salt)} (counted as 1.0: never reached)"
    claim.comparisons.append(comparison)
    return claim


def c6(design: Design, table: Measured) -> Claim:
    claim = Claim("C6", "Plan-Early, Table 5", "Fine-tuning the most frequent cluster's expert is within "
                  f"{MARGIN:.0%} of the best expert chosen after fine-tuning all (SLM-mix, at the cell of the largest "
                  "pretraining budget, smallest in-domain data size and specialization budget). The best expert is "
                  "chosen for each seed on the other seeds' perplexities (never on the rows it is scored on); "
                  "paired t over seeds.")
    experts = design.find(role="experts")
    if not experts:
        claim.untested.append("the plan fine-tunes only the most frequent cluster's expert (sweep.all_experts)")
        return claim
    if len(design.seeds) < 2:
        claim.untested.append("one seed: the best expert cannot be chosen on other seeds")
        return claim
    for domain in sorted({p.domain for p in experts}):
        mine = [p for p in experts if p.domain == domain]
        cell = {k: getattr(mine[0], k) for k in ("method", "size", "pretrain_steps", "domain_tokens",
                                                 "specialize_steps")}
        chosen = design.one(domain=domain, role="grid", **cell)
        values = {p.setting: table.values(p, "perplexity", design.seeds) for p in [chosen, *mine]}
        absent = [name for _, miss in values.values() for name in miss]
        part = f"{domain}: the most frequent cluster's expert vs the best of {len(mine)} fine-tuned"
        if absent:
            claim.comparisons.append(missing(part, chosen.setting, "the best expert", "tie", "perplexity", absent,
                                             MARGIN, domain))
            continue
        a, b, picks, trials = values[chosen.setting][0], [], [], []
        for i, seed in enumerate(design.seeds):
            best = min(mine, key=lambda p: mean_without(values[p.setting][0], i, table.vocab_size))  # noqa: B023
            picks.append(f"seed {seed}: expert {best.expert}")
            b.append(values[best.setting][0][i])
            trials.append(trial_name(best.setting, seed))
        claim.comparisons.append(judge(part, chosen.setting, f"the best expert ({'; '.join(picks)})", a, b, "tie",
                                       "perplexity", paired=True, margin=MARGIN, group=domain,
                                       note="best expert chosen on the other seeds", seeds=design.seeds,
                                       vocab_size=table.vocab_size, b_trials=trials))
    return claim


def mean_without(values: list[float], i: int, vocab_size: int = 0) -> float:
    """The mean of every value but the ``i``-th (inf when one of them failed): C6's choice for seed i."""
    others = [v for j, v in enumerate(values) if j != i]
    return math.inf if any(failed(v, vocab_size) for v in others) else statistics.fmean(others)


def evaluate(rows: list[dict], design: Design, curves: list[dict] | None = None) -> list[Claim]:
    """Every claim's verdict from a sweep's results table (a row per trial, at each seed), its plan and its
    pretraining curves."""
    table = Measured(rows, design.vocab_size)
    return [settle(c) for c in (c1(design, table), c2(design, table), c3(design, table), c4(design, table),
                                c5(design, curves or []), c6(design, table))]


# ---------------------------------------------------------------------------------------------- output


def _num(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _mean(mean: float | None, ci: float | None, digits: int) -> str:
    """A side's mean and its 95% interval over seeds, [low, high]: the convention of every table."""
    if mean is None:
        return "—"
    return f"{mean:.{digits}f} [{mean - ci:.{digits}f}, {mean + ci:.{digits}f}]" if ci is not None else f"{mean:.{digits}f}"


def _p(p: float | None) -> str:
    return "—" if p is None else "< 0.001" if p < 0.001 else f"{p:.3f}"


def _row(c: Comparison) -> str:
    digits = 3 if c.measure == "steps_share" else 2
    diff = "—" if c.difference is None else f"{c.difference:+.{digits}f}"
    if c.low is not None:
        diff += f" [{c.low:+.{digits}f}, {c.high:+.{digits}f}]"
    expected = c.expected + (f" (±{c.margin:.0%}: {c.bound:.{digits}f})" if c.margin else "")
    test = c.test + (f", df {c.df:.3g}" if c.df is not None else "")
    note = f" ({c.note})" if c.note else ""
    return (f"| {c.part}{note} | {c.a} | {c.b} | {MEASURES[c.measure]} | {_mean(c.a_mean, c.a_ci, digits)} | "
            f"{_mean(c.b_mean, c.b_ci, digits)} | {diff} | {expected} | {test} | {_p(c.p_hold)} | "
            f"{_p(c.p_refute_adjusted)} | {c.verdict}{' (by identity)' if c.identity else ''} |")


def markdown(claims: list[Claim], design: Design | None = None) -> str:
    lines = ["# Claims", "",
             "Each claim of the seed papers, evaluated from this sweep's results table and plan by `slm.analysis.claims` "
             "(docs/budgets.md, \"The claims check\", says how to read it). Each side is its mean over seeds with the "
             "95% interval of that mean, [low, high] (the convention of every table); `b − a` is positive when a is lower (better), with its 95% interval; `p holds` is the "
             "evidence for the expectation (< 0.05: the interval clears its bound), `p refutes` the evidence "
             "against it after Holm's adjustment over the claim's comparisons.", "",
             "| claim | source | verdict | comparisons (holds / does not / inconclusive) |", "|---|---|---|---|"]
    for c in claims:
        counts = [sum(x.verdict == v for x in c.comparisons) for v in ("holds", "does not hold", "inconclusive")]
        untested = f"; untested: {'; '.join(c.untested)}" if c.untested else ""
        identical = sum(x.identity for x in c.comparisons)
        if identical:
            untested = f"; {identical} by identity (a model against itself){untested}"
        if c.untested and c.comparisons and all(x.verdict == "holds" for x in c.comparisons):
            untested = f"; every tested comparison holds, but not all of the claim is tested{untested}"
        lines.append(f"| {c.id} | {c.source} | **{c.verdict}** | " +
                     (" / ".join(map(str, counts)) + untested if c.comparisons else f"not tested: {'; '.join(c.untested)}")
                     + " |")
    shared = shared_refutations(claims)
    if shared:
        lines += ["", "**Rows behind the refutations of more than one claim** — one measured fact, not one per claim:", ""]
        lines += [f"- `{row}`: {', '.join(ids)}" for row, ids in shared.items()]
    failures = sorted({f for c in claims for x in c.comparisons for f in x.failed})
    if failures:
        lines += ["", f"**Failed runs** (a non-finite measure or no better than a uniform guess; counted in their "
                      f"tests as a uniform guess — rerun them or report them): {', '.join(failures)}"]
    for c in claims:
        lines += ["", f"## {c.id} ({c.source}): {c.verdict}", "", c.statement, ""]
        if c.untested:
            lines += [f"Not testable with this plan: {u}." for u in c.untested] + [""]
        if not c.comparisons:
            continue
        lines += [f"Rule: {c.rule}.", ""]
        if c.groups:
            entropy = design.entropy if design else {}
            lines += ["| domain | histogram entropy over the coarse clusters (nats) | verdict |", "|---|---:|---|"]
            lines += [f"| {g} | {_num(entropy.get(g), 3)} | {v} |" for g, v in c.groups.items()] + [""]
        lines += ["| condition | a | b | measure | a | b | b − a [95% CI] | expected of a (margin) | test | p holds | "
                  "p refutes (Holm) | verdict |", "|---|---|---|---|---:|---:|---:|---|---|---:|---:|---|"]
        lines += [_row(x) for x in c.comparisons]
    return "\n".join(lines) + "\n"


def shared_refutations(claims: list[Claim]) -> dict[str, list[str]]:
    """Each setting behind a "does not hold" comparison of more than one claim, and those claims: the
    first study's C2, C4 and C6 all rested on one SLM-mix row, and read as three findings."""
    by_row: dict[str, list[str]] = {}
    for claim in claims:
        rows = {row for c in claim.comparisons if c.verdict == "does not hold"
                for side in (c.a, c.b) for row in side.split(" ÷ ") if not row.startswith(("the best", "the bound"))}
        for row in sorted(rows):
            by_row.setdefault(row, []).append(claim.id)
    return {row: ids for row, ids in sorted(by_row.items()) if len(ids) > 1}


def write_claims(rows: list[dict], design: Design, out: Path, curves: list[dict] | None = None) -> list[Claim]:
    claims = evaluate(rows, design, curves)
    atomic_write_text(out / "claims.md", markdown(claims, design))
    atomic_write_text(out / "claims.json", json.dumps([asdict(c) for c in claims], indent=2, allow_nan=True) + "\n")
    return claims
