"""The seed papers' claims, evaluated from a sweep's results table (``slm report`` writes ``claims.md``).

Each claim is a set of comparisons between two settings of the table (rows folded over seeds:
``slm.tune.results.aggregate``). A comparison states what the claim expects of setting ``a`` against
setting ``b`` on one measure (lower is better: perplexity after specialization, or before it) and gets a
verdict from the difference ``d = b − a`` and its standard error (``table.separable``: ``|d| ≥ 2·se``):

- ``lower``: a is better. Holds when ``d`` is separable and positive; does not hold when separable and
  negative; a difference within noise is inconclusive.
- ``not lower`` / ``not higher``: a does not beat b / a is not worse than b. Does not hold only when a
  separable difference goes the wrong way; a tie holds.
- ``tie``: holds within noise, does not hold when separable.

A comparison whose spread is unknown (a setting at one seed) is inconclusive whatever its sign. A claim
holds when every comparison holds, does not hold when any does not, and is inconclusive otherwise —
including when the table lacks the rows it needs, which the claim then names.

Which rows each claim uses is fixed here, before any study is run (the protocol, not the outcome): the
small model is the sweep's smallest size, "the largest / smallest pretraining budget" the largest /
smallest ``pretrain_steps`` of the sweep, and so on, as each function says.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from slm.artifacts import atomic_write_text
from slm.methods import BASELINE, DISTILLED, SLM_IS, SLM_MIX, SLM_PN, SOUP
from slm.tune.results import difference, finite, menu, separable, standard_error

Expectation = Literal["lower", "not lower", "not higher", "tie"]
Verdict = Literal["holds", "does not hold", "inconclusive"]
MEASURES = {"perplexity": "ppl after specialization", "perplexity_before": "ppl before specialization",
            "steps_share": "steps to the baseline's final loss ÷ its steps"}


@dataclass
class Comparison:
    part: str  # which condition of the claim, in words
    a: str  # setting names (the table's ``setting`` column)
    b: str
    measure: str  # "perplexity" or "perplexity_before"
    expected: Expectation  # of a against b
    a_value: float
    b_value: float
    difference: float  # b − a: positive when a is lower (better)
    se: float | None
    verdict: Verdict


@dataclass
class Claim:
    id: str
    source: str
    statement: str
    comparisons: list[Comparison] = field(default_factory=list)
    missing: str = ""  # why the table cannot test it, when it cannot
    verdict: Verdict = "inconclusive"


def compare(part: str, a: dict, b: dict, expected: Expectation, measure: str = "perplexity") -> Comparison:
    d, se = difference(a, b, measure)
    apart = separable(d, se)
    if apart is None:
        verdict: Verdict = "inconclusive"
    elif expected == "lower":
        verdict = "inconclusive" if not apart else ("holds" if d > 0 else "does not hold")
    elif expected == "not lower":
        verdict = "does not hold" if apart and d > 0 else "holds"
    elif expected == "not higher":
        verdict = "does not hold" if apart and d < 0 else "holds"
    else:
        verdict = "does not hold" if apart else "holds"
    return Comparison(part, a["setting"], b["setting"], measure, expected, a[measure], b[measure], d, se, verdict)


def overall(comparisons: list[Comparison]) -> Verdict:
    verdicts = {c.verdict for c in comparisons}
    if not comparisons:
        return "inconclusive"
    if "does not hold" in verdicts:
        return "does not hold"
    return "holds" if verdicts == {"holds"} else "inconclusive"


class Grid:
    """The sweep's axes, read off its rows: the small size, the budgets, the domains."""

    def __init__(self, rows: list[dict]):
        self.rows = [r for r in rows if finite(r["perplexity"])]
        self.sizes = sorted({r["size"] for r in self.rows}, key=lambda s: min(r["params"] for r in self.rows
                                                                                if r["size"] == s))
        self.pretrain = sorted({r["pretrain_steps"] for r in self.rows})
        self.specialize = sorted({r["specialize_steps"] for r in self.rows})
        self.domain_tokens = sorted({r["domain_tokens"] for r in self.rows})
        self.domains = sorted({r["domain"] for r in self.rows})
        self.methods = sorted({r["method"] for r in self.rows})

    def find(self, **where) -> list[dict]:
        return [r for r in self.rows if all(r[k] == v for k, v in where.items())]

    def one(self, **where) -> dict | None:
        found = self.find(**where)
        if len(found) > 1:
            raise ValueError(f"claims: {len(found)} settings match {where}: the table has an axis the claim "
                             f"does not fix ({[r['setting'] for r in found]})")
        return found[0] if found else None


def _need(grid: Grid, claim: Claim, methods: list[str], budgets: bool = False) -> bool:
    absent = [m for m in methods if m not in grid.methods]
    if absent:
        claim.missing = f"the table has no {', '.join(absent)} rows (methods in it: {', '.join(grid.methods)})"
    elif budgets and len(grid.pretrain) < 2:
        claim.missing = f"the table has one pretraining budget ({grid.pretrain}); the claim compares two"
    return not claim.missing


def c1(grid: Grid) -> Claim:
    claim = Claim("C1", "Plan-Early", "With the smallest in-domain data size, SLM-is is the best small model on "
                  "each domain (at the largest pretraining budget, at each specialization budget: SLM-is against "
                  "the best other method of the same size).")
    if not _need(grid, claim, [SLM_IS]) or len(grid.methods) < 2:
        claim.missing = claim.missing or "the table has no method but SLM-is to compare with"
        return claim
    small, tokens, pretrain = grid.sizes[0], grid.domain_tokens[0], grid.pretrain[-1]
    for domain in grid.domains:
        for steps in grid.specialize:
            cell = grid.find(size=small, domain=domain, domain_tokens=tokens, pretrain_steps=pretrain,
                             specialize_steps=steps)
            ours = [r for r in cell if r["method"] == SLM_IS]
            others = [r for r in cell if r["method"] != SLM_IS]
            if ours and others:
                best = min(others, key=lambda r: r["perplexity"])
                claim.comparisons.append(compare(
                    f"{domain}, {tokens:,} in-domain tokens, {steps} specialization steps: SLM-is vs the best "
                    f"other ({best['method']})", ours[0], best, "lower"))
    return claim


def c2(grid: Grid) -> Claim:
    claim = Claim("C2", "Plan-Early", "At the largest pretraining budget and smallest specialization budget, "
                  "SLM-mix and SLM-pn beat the generic small model; at the smallest pretraining budget they do not "
                  "(on each domain and in-domain data size).")
    if not _need(grid, claim, [BASELINE, SLM_MIX, SLM_PN], budgets=True):
        return claim
    small, steps = grid.sizes[0], grid.specialize[0]
    for domain in grid.domains:
        for tokens in grid.domain_tokens:
            for pretrain, expected in ((grid.pretrain[-1], "lower"), (grid.pretrain[0], "not lower")):
                at = dict(size=small, domain=domain, domain_tokens=tokens, pretrain_steps=pretrain,
                          specialize_steps=steps)
                generic = grid.one(method=BASELINE, **at)
                for method in (SLM_MIX, SLM_PN):
                    row = grid.one(method=method, **at)
                    if row and generic:
                        claim.comparisons.append(compare(
                            f"{domain}, {tokens:,} tokens, {pretrain} pretraining steps: {method} vs generic",
                            row, generic, expected))
    return claim


def c3(grid: Grid) -> Claim:
    claim = Claim("C3", "Soup-of-Experts", "Θ(domain histogram), instantiated without fine-tuning, has a lower "
                  "domain loss than the generic model at equal pretraining steps (each budget), and reaches the "
                  "generic model's loss at the largest budget in ≤ 0.6× its steps (the soup at the largest budget "
                  "≤ 0.6× that one is not worse).")
    if not _need(grid, claim, [BASELINE, SOUP]):
        return claim
    # Before specialization the in-domain data size and specialization budget do not matter: the rows at
    # the smallest of each are the pretrained models' own evaluation.
    at = dict(size=grid.sizes[0], domain_tokens=grid.domain_tokens[0], specialize_steps=grid.specialize[0])
    top = grid.pretrain[-1]
    for domain in grid.domains:
        for pretrain in grid.pretrain:
            soup = grid.one(method=SOUP, domain=domain, pretrain_steps=pretrain, **at)
            generic = grid.one(method=BASELINE, domain=domain, pretrain_steps=pretrain, **at)
            if soup and generic:
                claim.comparisons.append(compare(f"{domain}, {pretrain} pretraining steps: soup vs generic, "
                                                 "before specialization", soup, generic, "lower", "perplexity_before"))
        early = [p for p in grid.pretrain if p <= 0.6 * top]
        generic = grid.one(method=BASELINE, domain=domain, pretrain_steps=top, **at)
        soup = grid.one(method=SOUP, domain=domain, pretrain_steps=early[-1], **at) if early else None
        if soup and generic:
            claim.comparisons.append(compare(f"{domain}: soup at {early[-1]} steps vs generic at {top}, before "
                                             "specialization", soup, generic, "not higher", "perplexity_before"))
    if not claim.comparisons and not any(p <= 0.6 * top for p in grid.pretrain):
        claim.missing = f"no pretraining budget ≤ 0.6× the largest ({grid.pretrain})"
    return claim


def c4(grid: Grid) -> Claim:
    claim = Claim("C4", "Plan-Early", "Distillation from a larger teacher does not pay once the teacher's cost is "
                  "counted: at each cell (domain, in-domain data size, specialization budget), the distilled small "
                  "model is not better than the best small model of another method that costs no more in total "
                  "(pretraining + specialization for one domain, the teacher's included).")
    if not _need(grid, claim, [DISTILLED]):
        claim.missing = "the sweep plans no distillation trials (sweep.distill with sweep.large_size)"
        return claim
    for student in grid.find(method=DISTILLED):
        cost = total_cost(student)
        others = [r for r in grid.find(size=student["size"], domain=student["domain"],
                                       domain_tokens=student["domain_tokens"])
                  if r["method"] != DISTILLED and total_cost(r) <= cost]
        if others:
            best = min(others, key=lambda r: r["perplexity"])
            claim.comparisons.append(compare(
                f"{student['domain']}, {student['domain_tokens']:,} tokens, {student['specialize_steps']} steps: "
                f"distilled vs the best at no more cost ({best['method']}, {best['pretrain_steps']} pretraining steps)",
                student, best, "not lower"))
    return claim


def total_cost(r: dict) -> float:
    """C_total for one domain: generic pretraining + the domain's own (specialization; SLM-is: its pretraining)."""
    return r["generic_flops"] + r["per_domain_flops"]


SALT_STEPS_SHARE = 0.8  # C5: the SALT student reaches the baseline's final quality in at most this share of its steps


def c5(curves: list[dict]) -> Claim:
    claim = Claim("C5", "SALT", "A smaller teacher used for the first ~15–20% of steps lets a larger student reach "
                  f"the baseline's final quality (its macro valid loss at its last step) in ≤ {SALT_STEPS_SHARE:g}× "
                  "the baseline's steps: per seed, the first evaluated step at which the SALT run's loss is at or "
                  "below the baseline's final loss, over the baseline's steps (a run that never reaches it counts "
                  "as its whole length, 1.0).")
    runs: dict[str, dict[int | None, list[dict]]] = {"large": {}, "salt": {}}
    for c in curves:
        if c["role"] in runs:
            runs[c["role"]].setdefault(c["seed"], []).append(c)
    seeds = sorted(set(runs["large"]) & set(runs["salt"]), key=lambda s: -1 if s is None else s)
    if not seeds:
        claim.missing = "the sweep has no SALT run beside its large baseline (sweep.salt_kd_share with sweep.large_size)"
        return claim
    shares, interval, name = [], 0, ""
    for seed in seeds:
        base = sorted(runs["large"][seed], key=lambda c: c["step"])
        salt = sorted(runs["salt"][seed], key=lambda c: c["step"])
        target, total = base[-1]["loss"], base[-1]["step"]
        reached = next((c["step"] for c in salt if c["loss"] <= target), None)
        shares.append(reached / total if reached is not None else 1.0)
        interval, name = salt[0]["step"], salt[0]["run"].removesuffix(seed_tail(seed))
    a = {"setting": name, "steps_share": statistics.fmean(shares), "steps_share_se": standard_error(shares)}
    b = {"setting": f"the bound {SALT_STEPS_SHARE:g}", "steps_share": SALT_STEPS_SHARE, "steps_share_se": 0.0}
    claim.comparisons.append(compare(f"{len(seeds)} seed(s), evaluated every {interval} steps; per seed "
                                     f"{', '.join(f'{x:.3f}' for x in shares)}", a, b, "lower", "steps_share"))
    return claim


def seed_tail(seed: int | None) -> str:
    return "" if seed is None else f"-seed{seed}"


def c6(rows: list[dict]) -> Claim:
    claim = Claim("C6", "Plan-Early, Table 5", "Fine-tuning the most frequent cluster's expert is within noise of "
                  "the best expert chosen after fine-tuning all (SLM-mix, at the cell of the largest pretraining "
                  "budget, smallest in-domain data size and specialization budget).")
    experts = [r for r in rows if r.get("expert") is not None]
    if not experts:
        claim.missing = "the sweep fine-tunes only the most frequent cluster's expert (sweep.all_experts)"
        return claim
    grid = Grid(menu(rows))
    for domain in sorted({r["domain"] for r in experts}):
        mine = [r for r in experts if r["domain"] == domain]
        at = {k: mine[0][k] for k in ("method", "size", "pretrain_steps", "domain_tokens", "specialize_steps")}
        chosen = grid.one(domain=domain, **at)
        if chosen:
            best = min(mine, key=lambda r: r["perplexity"])
            claim.comparisons.append(compare(f"{domain}: the most frequent cluster's expert vs the best of {len(mine)} "
                                             f"fine-tuned (expert {best['expert']})", chosen, best, "tie"))
    return claim


def evaluate(rows: list[dict], curves: list[dict] | None = None) -> list[Claim]:
    """Every claim's verdict from the aggregated rows of one sweep and its pretraining curves."""
    grid = Grid(menu(rows))
    claims = [c1(grid), c2(grid), c3(grid), c4(grid), c5(curves or []), c6(rows)]
    for claim in claims:
        claim.verdict = overall(claim.comparisons)
    return claims


def _value(c: Comparison) -> str:
    return f"{c.difference:+.2f} ± {c.se:.2f}" if c.se is not None else f"{c.difference:+.2f} (spread unknown)"


def markdown(claims: list[Claim]) -> str:
    lines = ["# Claims", "",
             "Each claim of the seed papers, evaluated from this sweep's results table by `slm.tune.claims` "
             "(rerun the sweep and the verdicts are recomputed). A comparison's difference is b − a in mean "
             "perplexity ± its standard error over seeds; it is separable at two standard errors.", "",
             "| claim | source | verdict | comparisons (holds / does not / inconclusive) |", "|---|---|---|---|"]
    for c in claims:
        counts = [sum(x.verdict == v for x in c.comparisons) for v in ("holds", "does not hold", "inconclusive")]
        lines.append(f"| {c.id} | {c.source} | **{c.verdict}** | " +
                     (" / ".join(map(str, counts)) if c.comparisons else f"not tested: {c.missing}") + " |")
    for c in claims:
        lines += ["", f"## {c.id} ({c.source}): {c.verdict}", "", c.statement, ""]
        if not c.comparisons:
            lines.append(f"Not tested by this table: {c.missing}.")
            continue
        lines += ["| condition | a | b | measure | a | b | b − a | expected of a | verdict |",
                  "|---|---|---|---|---:|---:|---:|---|---|"]
        lines += [f"| {x.part} | {x.a} | {x.b} | {MEASURES[x.measure]} | {x.a_value:.2f} | {x.b_value:.2f} | "
                  f"{_value(x)} | {x.expected} | {x.verdict} |" for x in c.comparisons]
    return "\n".join(lines) + "\n"


def write_claims(rows: list[dict], out: Path, curves: list[dict] | None = None) -> list[Claim]:
    claims = evaluate(rows, curves)
    atomic_write_text(out / "claims.md", markdown(claims))
    atomic_write_text(out / "claims.json", json.dumps([asdict(c) for c in claims], indent=2) + "\n")
    return claims
