"""`slm advise`: which method and size win for given budgets, from a sweep's measured rows.

A row is admissible when, for N domains,

- its served model costs ≤ the inference budget (FLOPs per token);
- it used ≤ the in-domain tokens the user has;
- its generic pretraining ≤ the pretraining budget (SLM-is has none: C_generic = 0);
- its per-domain cost (specialization, plus SLM-is's domain-specific pretraining) ≤ the
  specialization budget;

and the answer is the admissible row of lowest specialized perplexity, ties broken by
C_total(N) = C_generic + N·C_specialization. Budgets are in FLOPs (or device-seconds with
``unit="device_seconds"``). Nothing is extrapolated: a request beyond every measured row is answered
with the best measured row and a plain statement that the request lies outside the sweep.
"""

from __future__ import annotations

from pathlib import Path

from slm.tune.sweep import finite, read_table


def _cost(r: dict, what: str, unit: str) -> float:
    suffix = "flops" if unit == "flops" else "device_seconds"
    return r[f"{what}_{suffix}"]


def advise(rows: list[dict], *, pretrain_budget: float, specialization_budget: float, inference_budget: float,
           domain_tokens: int, domains: int = 1, unit: str = "flops", domain: str | None = None) -> dict:
    if unit not in ("flops", "device_seconds"):
        raise ValueError(f"unit must be 'flops' or 'device_seconds', got {unit!r}")
    if domains < 1:
        raise ValueError(f"--domains must be at least 1, got {domains}")
    rows = [r for r in rows if finite(r["perplexity"]) and (domain is None or r["domain"] == domain)]
    if not rows:
        raise ValueError("no measured row" + (f" for domain {domain!r}" if domain else ""))

    def total(r):
        return _cost(r, "generic", unit) + domains * _cost(r, "per_domain", unit)

    checks = {
        "inference": lambda r: r["inference_flops_per_token"] <= inference_budget,
        "domain_tokens": lambda r: r["domain_tokens"] <= domain_tokens,
        "pretrain": lambda r: _cost(r, "generic", unit) <= pretrain_budget,
        "specialization": lambda r: _cost(r, "per_domain", unit) <= specialization_budget,
    }
    admissible = [r for r in rows if all(c(r) for c in checks.values())]
    notes = []
    measured = {
        "inference": (min(r["inference_flops_per_token"] for r in rows), max(r["inference_flops_per_token"] for r in rows)),
        "domain_tokens": (min(r["domain_tokens"] for r in rows), max(r["domain_tokens"] for r in rows)),
        "pretrain": (min(_cost(r, "generic", unit) for r in rows), max(_cost(r, "generic", unit) for r in rows)),
        "specialization": (min(_cost(r, "per_domain", unit) for r in rows), max(_cost(r, "per_domain", unit) for r in rows)),
    }
    asked = {"inference": inference_budget, "domain_tokens": domain_tokens, "pretrain": pretrain_budget,
             "specialization": specialization_budget}
    for key, (low, high) in measured.items():
        if asked[key] > high:
            notes.append(f"the {key} budget {asked[key]:.3g} is above everything measured (max {high:.3g}): "
                         f"a larger model or longer run could do better, but the sweep did not measure it")
        if asked[key] < low:
            notes.append(f"the {key} budget {asked[key]:.3g} is below everything measured (min {low:.3g})")
    if not admissible:
        return {"answer": None, "evidence": [], "notes": notes + [
            "no measured row fits all the budgets: the request lies outside what was measured; "
            "widen the sweep (smaller sizes, fewer steps) to answer it"]}
    ranked = sorted(admissible, key=lambda r: (r["perplexity"], total(r)))
    best = ranked[0]
    evidence = [{**{k: r[k] for k in ("trial", "method", "size", "pretrain_steps", "domain", "domain_tokens",
                                      "specialize_steps", "perplexity", "accuracy")}, "total": total(r)}
                for r in ranked[:5]]
    return {"answer": {"method": best["method"], "size": best["size"], "trial": best["trial"],
                       "perplexity": best["perplexity"], "accuracy": best["accuracy"], "total": total(best),
                       "unit": unit, "domains": domains},
            "evidence": evidence, "notes": notes}


def format_advice(a: dict) -> str:
    lines = []
    if a["answer"] is None:
        lines.append("No measured configuration fits these budgets.")
    else:
        b = a["answer"]
        lines.append(f"Build {b['method']} at size {b['size']}: specialized perplexity {b['perplexity']:.2f}, "
                     f"top-1 {b['accuracy']:.4f}, C_total({b['domains']}) = {b['total']:.3g} {b['unit']} "
                     f"(measured: {b['trial']}).")
        lines += ["", "Evidence (best admissible rows):", "| trial | method | size | ppl | top-1 | C_total |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {e['trial']} | {e['method']} | {e['size']} | {e['perplexity']:.2f} | {e['accuracy']:.4f} "
                  f"| {e['total']:.3g} |" for e in a["evidence"]]
    lines += [f"Note: {n}." for n in a["notes"]]
    return "\n".join(lines)


def advise_sweep(sweep: str | Path, **kwargs) -> dict:
    return advise(read_table(sweep), **kwargs)
