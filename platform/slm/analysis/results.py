"""A sweep's results table (``slm.records.table``: one row per trial, one setting at one seed) folded over
seeds into one row per setting with the mean and its standard error.

Two folded settings differ by ``compare(a, b, trials)``: a paired t over their seeds where the seed pairs
their data (the same domain, in-domain data size and specialization budget: at a seed both read the same
in-domain subset and are scored on the same valid rows), Welch's t on their means, standard errors and seed
counts otherwise (``difference``); *separable* when its 95% interval excludes zero (``slm.analysis.stats``, the
one definition of "within noise" that the claims check, `slm advise` and the report share). A difference
that is not separable is reported as a tie, never ranked. A setting measured at one seed has no spread:
its standard error is ``None`` and nothing about it is called separable or a tie. Every table shows a
setting as its mean and the 95% t interval of that mean over its seeds (``ppl``), one convention in
summary.md, the report's page, claims.md and `slm advise`.
"""

from __future__ import annotations

import math
import statistics

from slm.analysis.stats import Difference, half_width, paired, welch_from_summary
from slm.records.table import axis_columns, finite

# Averaged over a setting's seeds (FLOPs are equal across seeds; device-seconds are not).
MEANS = ["pretrain_flops", "pretrain_device_seconds", "generic_flops", "generic_device_seconds", "specialize_flops",
         "specialize_device_seconds", "per_domain_flops", "per_domain_device_seconds", "perplexity", "accuracy",
         "perplexity_before", "accuracy_before"]
# The same for every seed of a setting.
SETTING = ["method", "size", "expert", "params", "inference_flops_per_token", "pretrain_steps", "domain",
           "domain_tokens", "specialize_steps"]


def menu(rows: list[dict]) -> list[dict]:
    """The settings a user chooses among (plots, summaries, ``slm advise``): not the C6 experiment's
    every-expert fine-tunings, which only a look at the valid split after fine-tuning them all could pick."""
    return [r for r in rows if r.get("expert") is None]


def aggregate(rows: list[dict]) -> list[dict]:
    """One row per setting: the mean of every measured column over its finished seeds, the standard error
    of the perplexity, accuracy and before-specialization perplexity means (``None`` at one seed),
    ``seeds`` and ``n``. ``trial`` names the
    setting, so that code written for per-trial rows reads these unchanged."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if finite(r["perplexity"]):
            groups.setdefault(r["setting"], []).append(r)
    out = []
    for setting, group in sorted(groups.items()):
        first = group[0]
        for key in SETTING:
            if any(r[key] != first[key] for r in group):
                raise ValueError(f"results table: setting {setting!r} has different {key!r} across its seeds "
                                 f"({sorted({str(r[key]) for r in group})}): the table mixes two sweeps")
        row = {key: first[key] for key in SETTING + axis_columns(group)}
        row.update({key: statistics.fmean(r[key] for r in group) for key in MEANS})
        se = [r.get("eval_loss_se") for r in group]  # absent from tables written before issue 28
        row["eval_loss_se"] = statistics.fmean(se) if all(finite(x) for x in se) else None
        for key in ("perplexity", "accuracy", "perplexity_before"):
            row[f"{key}_se"] = standard_error([r[key] for r in group])
        row.update(trial=setting, setting=setting, seeds=sorted(r["seed"] for r in group if r["seed"] is not None),
                   n=len(group))
        # the specialized perplexity at each of ``seeds``, for a paired comparison (``compare``)
        by_seed = {r["seed"]: r["perplexity"] for r in group}
        row["perplexity_by_seed"] = [by_seed[s] for s in row["seeds"]]
        out.append(row)
    return out


def total_flops(r: dict, domains: int = 1) -> float:
    """C_total(N) = C_generic + N·C_specialization (SLM-is: N·(its pretraining + specialization))."""
    return r["generic_flops"] + domains * r["per_domain_flops"]


def ppl(r: dict) -> str:
    """A setting's perplexity for a table: its mean and the 95% t interval of that mean over its seeds (n), or
    its one value."""
    if r["perplexity_se"] is None:
        return f"{r['perplexity']:.2f} (n={r['n']})"
    h = half_width(r["perplexity_se"], r["n"] - 1)
    return f"{r['perplexity']:.2f} [{r['perplexity'] - h:.2f}, {r['perplexity'] + h:.2f}] (n={r['n']})"


def standard_error(values: list[float]) -> float | None:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None


def difference(a: dict, b: dict, key: str = "perplexity") -> Difference:
    """``b − a`` of two folded settings (Welch's t; no interval unless both are measured at ≥ 2 seeds)."""
    return welch_from_summary(a[key], a[f"{key}_se"], a["n"], b[key], b[f"{key}_se"], b["n"])


PAIRING = ("domain", "domain_tokens", "specialize_steps")  # what the seed pairs: the subset and the rows scored


def compare(a: dict, b: dict, key: str = "perplexity") -> Difference:
    """``b − a`` of two folded settings: a paired t over their seeds when the seed pairs their data (the same
    ``PAIRING`` cell and the same seeds, specialized perplexities), Welch's t (``difference``) otherwise."""
    seeds = a["seeds"]
    if key == "perplexity" and len(seeds) >= 2 and seeds == b["seeds"] and all(a[k] == b[k] for k in PAIRING):
        return paired(a["perplexity_by_seed"], b["perplexity_by_seed"])
    return difference(a, b, key)
