"""`slm advise`: which method and size win for given budgets, from a sweep's measured rows.

A row is admissible when, for N domains,

- its served model costs ≤ the inference budget (FLOPs per token);
- it used ≤ the in-domain tokens the user has;
- its generic pretraining ≤ the pretraining budget (SLM-is has none: C_generic = 0);
- its per-domain cost (specialization, plus SLM-is's domain-specific pretraining) ≤ the
  specialization budget;

and the answer is the admissible setting of lowest mean specialized perplexity over its seeds, exact
ties broken by C_total(N) = C_generic + N·C_specialization. Every other method and size is then held
against it at its own best admissible setting, with the difference's 95% interval (a paired t over the
seeds where the seed pairs their data, Welch's t otherwise: ``slm.analysis.results.compare``): those within
noise of the answer form **the tie**, named first; **the margin** is over the best setting outside it; the
rest are listed with their gap. With one seed per setting no difference has an error and the advice says
the spread is unknown (``slm.analysis.results``).
Budgets are in FLOPs (or device-seconds with ``unit="device_seconds"``). The measured answer extrapolates
nothing: a request beyond every measured row is answered with the best measured row and a plain statement
that the request lies outside the sweep.

Beside it, **the curves' answer** (``slm.analysis.ladder``, FLOPs only): each family's fitted loss-vs-pretraining
curve read at exactly the pretraining the budgets allow it, with its 95% interval across seeds, labelled an
extrapolation when that lies outside the budgets the family was measured at; the margin to the best other
method or size, paired by seed; and where each pair of methods' curves cross (or that they do not).
"""

from __future__ import annotations

import math
from pathlib import Path

from slm.analysis import ladder
from slm.analysis.results import aggregate, compare, menu, ppl
from slm.analysis.stats import separable
from slm.methods import display
from slm.records.table import read_table


def _cost(r: dict, what: str, unit: str) -> float:
    suffix = "flops" if unit == "flops" else "device_seconds"
    return r[f"{what}_{suffix}"]


def advise(rows: list[dict], *, pretrain_budget: float, specialization_budget: float, inference_budget: float,
           domain_tokens: int, domains: int = 1, unit: str = "flops", domain: str | None = None,
           families: list[ladder.Family] | None = None) -> dict:
    """The measured answer and the curves' at these budgets; ``families``: ``rows``' fitted families
    (``ladder.families``) when the caller has them."""
    if unit not in ("flops", "device_seconds"):
        raise ValueError(f"unit must be 'flops' or 'device_seconds', got {unit!r}")
    if domains < 1:
        raise ValueError(f"--domains must be at least 1, got {domains}")
    trials = rows
    rows = menu(aggregate(rows))
    domain = one_domain(rows, domain)
    rows = [r for r in rows if r["domain"] == domain]
    if not rows:
        raise ValueError(f"no measured row for domain {domain!r}")

    def total(r):
        return _cost(r, "generic", unit) + domains * _cost(r, "per_domain", unit)

    # Each budget: what a row spends of it, and the user's limit. A row is admissible within every limit.
    value = {"inference": lambda r: r["inference_flops_per_token"], "domain_tokens": lambda r: r["domain_tokens"],
             "pretrain": lambda r: _cost(r, "generic", unit), "specialization": lambda r: _cost(r, "per_domain", unit)}
    limit = {"inference": inference_budget, "domain_tokens": domain_tokens, "pretrain": pretrain_budget,
             "specialization": specialization_budget}
    admissible = [r for r in rows if not over_budget(r, value, limit)]
    notes = []
    measured = {k: (min(spend(r) for r in rows), max(spend(r) for r in rows)) for k, spend in value.items()}
    for key, (low, high) in measured.items():
        if limit[key] > high:
            notes.append(f"the {key} budget {limit[key]:.3g} is above everything measured (max {high:.3g}): "
                         f"a larger model or longer run could do better, but the sweep did not measure it")
        if limit[key] < low:
            notes.append(f"the {key} budget {limit[key]:.3g} is below everything measured (min {low:.3g})")
    from_curves = curve_advice(trials, families, domain=domain, **limit) if unit == "flops" else None
    if not admissible:
        return {"domain": domain, "answer": None, "evidence": [], "excluded": excluded(rows, None, value, limit),
                "notes": notes + ["no measured row fits all the budgets: the request lies outside what was measured; "
                                  "widen the sweep (smaller sizes, fewer steps) to answer it"], "curves": from_curves}
    ranked = sorted(admissible, key=lambda r: (r["perplexity"], total(r)))
    best = ranked[0]
    evidence = [{**{k: r[k] for k in ("trial", "method", "size", "pretrain_steps", "domain", "domain_tokens",
                                      "specialize_steps", "perplexity", "perplexity_se", "n", "accuracy")},
                 "total": total(r)} for r in ranked[:5]]
    # Each other method and size at its best admissible setting, against the answer.
    rivals, seen = [], {(best["method"], best["size"])}
    for r in ranked[1:]:
        if (r["method"], r["size"]) in seen:
            continue
        seen.add((r["method"], r["size"]))
        d = compare(best, r)
        low, high = d.interval() if d.testable else (None, None)
        rivals.append({"runner_up": r["trial"], "trial": r["trial"], "method": r["method"], "size": r["size"],
                       "perplexity": r["perplexity"], "perplexity_se": r["perplexity_se"], "n": r["n"],
                       "difference": d.estimate, "se": d.se, "low": low, "high": high, "df": d.df, "test": d.test,
                       "separable": separable(d)})
    tied = [x["trial"] for x in rivals if x["separable"] is False]
    # the margin: over the best setting outside the tie (None when every rival is within noise)
    margin = next((x for x in rivals if x["separable"] is not False), None)
    if best["n"] < 2:
        notes.append("one seed per setting: the spread is unknown, so is whether the margin is real "
                     "(rerun the sweep with sweep.seeds, e.g. [0, 1, 2])")
    return {"domain": domain, "answer": {"method": best["method"], "size": best["size"], "trial": best["trial"],
                       "perplexity": best["perplexity"], "perplexity_se": best["perplexity_se"], "n": best["n"],
                       "accuracy": best["accuracy"], "total": total(best), "unit": unit, "domains": domains,
                       "margin": margin, "tie": bool(tied), "tied_with": tied, "rivals": rivals},
            "evidence": evidence, "excluded": excluded(rows, best, value, limit), "notes": notes,
            "curves": from_curves}


def domains_of(rows: list[dict]) -> list[str]:
    return sorted({r["domain"] for r in rows})


def one_domain(rows: list[dict], domain: str | None) -> str:
    """The domain an advice is for: the one asked, or the table's only one. Perplexities of different domains are
    not comparable (issue 64: asked without a domain, the advice crowned medical, the easiest, and listed a legal
    soup as next best), so a table of several domains needs one named: ``advise_each`` answers each."""
    have = domains_of(rows)
    if domain is not None:
        if domain not in have:
            raise ValueError(f"no measured row for domain {domain!r} (the table has {', '.join(have)})")
        return domain
    if len(have) != 1:
        raise ValueError(f"the table has {len(have)} domains ({', '.join(have)}): name one (domain=…, --domain), "
                         "or ask advise_each for an answer per domain")
    return have[0]


def advise_each(rows: list[dict], domain: str | None = None, **kwargs) -> list[dict]:
    """``advise`` for the domain asked, or for every domain of the table, one answer each."""
    families = kwargs.pop("families", None)
    if families is None and kwargs.get("unit", "flops") == "flops":
        families = ladder.families(rows)  # fitted once for every domain's answer
    asked = [domain] if domain is not None else domains_of(menu(aggregate(rows)))
    return [advise(rows, domain=d, families=families, **kwargs) for d in asked]


def curve_advice(trials: list[dict], families: list[ladder.Family] | None, *, pretrain: float,
                 specialization: float, inference: float, domain_tokens: int, domain: str | None) -> dict:
    """The curves' answer at exactly these budgets (see the module's docstring); ``families``: the table's
    fitted families when the caller has them (fitting is the slow part, and a report asks at every budget)."""
    fams = ladder.families(trials) if families is None else families
    predictions, notes = ladder.predict(fams, pretrain_budget=pretrain, specialization_budget=specialization,
                                        inference_budget=inference, domain_tokens=domain_tokens, domain=domain)

    def entry(p: ladder.Prediction) -> dict:
        ppl_value, low, high = p.perplexity
        return {"family": p.family.name, "method": p.family.method, "size": p.family.size,
                "domain": p.family.domain, "domain_tokens": p.family.domain_tokens,
                "specialize_steps": p.family.specialize_steps, "pretrain_flops": p.pretrain_flops,
                "perplexity": ppl_value, "low": low, "high": high, "extrapolated": p.loss.extrapolated,
                "measured_from": p.family.fit.span[0], "measured_to": p.family.fit.span[1],
                "form": p.family.fit.form, "why": p.family.fit.why, "seeds": len(p.family.fit.per_seed)}

    if not predictions:
        return {"answer": None, "predictions": [], "margin": None, "crossings": [], "notes": notes or [
            "no family of settings within these budgets has a fitted curve"]}
    best = predictions[0]
    margin = None
    rival = next((p for p in predictions if (p.family.method, p.family.size) != (best.family.method, best.family.size)),
                 None)
    if rival is not None:
        d = ladder.difference(best, rival)
        margin = {"runner_up": rival.family.name, "method": rival.family.method, "size": rival.family.size,
                  "ratio": math.exp(d.value), "low": math.exp(d.low), "high": math.exp(d.high),
                  "separable": d.low > 0 or d.high < 0, "extrapolated": d.extrapolated}
    shown = {p.family.cell for p in predictions[:5]}
    cross = [f"{ladder.describe_cell(c.a.cell)}: {ladder.describe_crossing(c)}" for c in ladder.crossings(fams) if c.a.cell in shown]
    return {"answer": entry(best), "predictions": [entry(p) for p in predictions[:5]], "margin": margin,
            "crossings": cross, "notes": notes}


def over_budget(r: dict, value: dict, limit: dict) -> dict[str, dict]:
    """The budgets row ``r`` exceeds: each with what it spends and the limit."""
    return {k: {"value": spend(r), "limit": limit[k]} for k, spend in value.items() if spend(r) > limit[k]}


def excluded(rows: list[dict], best: dict | None, value: dict, limit: dict) -> list[dict]:
    """Per method, its best setting that a budget ruled out although its mean perplexity beats the answer
    (every such setting when there is no answer): which budgets it exceeds, and by how much."""
    out = {}
    for r in sorted(rows, key=lambda r: r["perplexity"]):
        over = over_budget(r, value, limit)
        if over and (best is None or r["perplexity"] < best["perplexity"]) and r["method"] not in out:
            out[r["method"]] = {"trial": r["trial"], "method": r["method"], "size": r["size"],
                                "perplexity": r["perplexity"], "perplexity_se": r["perplexity_se"], "n": r["n"],
                                "over": over}
    return list(out.values())


def format_advice(a: dict) -> str:
    """The advice for one domain; every sentence names it (a table's domains are answered one by one)."""
    lines, on = [], a["domain"]
    if a["answer"] is None:
        lines.append(f"No measured configuration fits these budgets on {on}.")
    else:
        b, m = a["answer"], a["answer"]["margin"]
        name = f"{display(b['method'])[0]} at size {b['size']}"
        if b["tie"]:
            tied = [x for x in b["rivals"] if x["separable"] is False]
            lines.append(f"A tie on {on} at these budgets: {name} has the lowest mean perplexity, within noise of "
                         + ", ".join(f"{display(x['method'])[0]} at size {x['size']} ({gap(x)})" for x in tied)
                         + "; choose among them by cost (C_total below), or add seeds.")
        lines.append(f"{'Cheapest choice of the tie to check first' if b['tie'] else 'Build'} {name} for {on}: specialized "
                     f"perplexity {ppl(b)}, top-1 {b['accuracy']:.4f}, C_total({b['domains']}) = {b['total']:.3g} "
                     f"{b['unit']} (measured: {b['trial']}).")
        if m:
            lines.append(f"Margin on {on} over the best setting outside {'the tie' if b['tie'] else 'it'}: "
                         f"{display(m['method'])[0]} at size {m['size']} ({m['runner_up']}), {gap(m)}.")
        elif b["rivals"]:
            lines.append(f"Every other method and size that fits is within noise of it on {on}.")
        else:
            lines.append(f"No other method or size fits these budgets on {on}.")
        losing = [x for x in b["rivals"] if x is not m and x["separable"] is not False]
        if losing:
            lines += ["", f"Also within the budgets on {on}, and behind it:"]
            lines += [f"- {display(x['method'])[0]} at size {x['size']} ({x['trial']}): {ppl(x)}, {gap(x)}"
                      for x in losing]
        lines += ["", f"Evidence on {on} (best admissible settings; ppl: mean [95% interval over its n seeds]):",
                  "| setting | method | size | ppl | top-1 | C_total |", "|---|---|---|---|---|---|"]
        lines += [f"| {e['trial']} | {display(e['method'])[0]} | {e['size']} | {ppl(e)} | {e['accuracy']:.4f} "
                  f"| {e['total']:.3g} |" for e in a["evidence"]]
    if a["excluded"]:
        lines += ["", f"Ruled out on {on} by a budget although their perplexity is lower:" if a["answer"] else
                  f"Nearest measured settings on {on}, and the budgets they exceed:"]
        for e in a["excluded"]:
            over = "; ".join(f"{k} {o['value']:.3g} > {o['limit']:.3g} ({o['value'] / o['limit']:.2g}×)"
                             if o["limit"] > 0 else f"{k} {o['value']:.3g} > {o['limit']:.3g}"
                             for k, o in e["over"].items())
            lines.append(f"- {display(e['method'])[0]} (`{e['method']}`) at size {e['size']}: {ppl(e)} "
                         f"({e['trial']}); over budget: {over}")
    lines += [f"Note ({on}): {n}." for n in a["notes"]]
    if a.get("curves"):
        lines += ["", *format_curve_advice(a["curves"], on)]
    return "\n".join(lines)


def gap(x: dict) -> str:
    """A rival's distance behind the answer, in words, with its interval and test."""
    if x["se"] is None:
        return f"{x['difference']:.2f} ppl behind (spread unknown)"
    return f"{x['difference']:.2f} ppl behind, 95% interval {x['low']:.2f} to {x['high']:.2f} ({x['test']})"


def format_curve_advice(c: dict, on: str) -> list[str]:
    lines = [f"From the fitted curves on {on}, at exactly these budgets (loss vs pretraining FLOPs per family; 95% "
             "intervals across seeds):"]
    if c["answer"] is None:
        return lines + [f"- {n}" for n in c["notes"]]

    def said(e: dict) -> str:
        where = ("EXTRAPOLATED beyond the measured " if e["extrapolated"] else "interpolated within the measured ") \
            + f"{e['measured_from']:.3g}-{e['measured_to']:.3g}"
        spread = (f"{e['low']:.2f} to {e['high']:.2f}" if math.isfinite(e["high"]) and e["low"] > 0
                  else "interval unknown: fewer than two seeds")
        return (f"{display(e['method'])[0]} at size {e['size']} ({e['domain']}, {e['domain_tokens']:,} in-domain tokens, "
                f"{e['specialize_steps']} spec. steps), pretrained with {e['pretrain_flops']:.3g} FLOPs: perplexity "
                f"{e['perplexity']:.2f} ({spread}; {where}; {e['form']}, seeds: {e['seeds']})")

    lines.append(f"Build {said(c['answer'])}.")
    m = c["margin"]
    if m:
        verdict = "separable" if m["separable"] else "a tie (the interval includes 1)"
        lines.append(f"Margin on {on}: {display(m['method'])[0]} at size {m['size']} has {m['ratio']:.3f}× its perplexity (95% interval "
                     f"{m['low']:.3f} to {m['high']:.3f}, paired by seed): {verdict}"
                     + ("; extrapolated" if m["extrapolated"] else "") + ".")
    lines += [f"Next best on {on}:"] + [f"- {said(e)}" for e in c["predictions"][1:]]
    if c["crossings"]:
        lines += [f"Where the curves cross on {on}:"] + [f"- {x}" for x in c["crossings"]]
    lines += [f"Note ({on}): {n}." for n in c["notes"]]
    return lines


def advise_sweep(sweep: str | Path, **kwargs) -> list[dict]:
    """``slm advise``: an answer per domain of the sweep's table (or for the one asked)."""
    return advise_each(read_table(sweep), **kwargs)


def format_each(answers: list[dict]) -> str:
    return "\n\n".join(f"## {a['domain']}\n\n{format_advice(a)}" if len(answers) > 1 else format_advice(a)
                       for a in answers)
