"""`slm report SWEEP`: the frontier plots (Plan-Early's figures) and a Markdown summary of a sweep.

Everything is computed on settings — a sweep's trials folded over their seeds (``slm.tune.results``):
each point is a setting's mean perplexity with error bars of ± one standard error. Plots (PNG,
matplotlib), specialized perplexity on the y axis, one colour per method, Pareto-optimal points (no
other setting is both cheaper and better on the means) ringed in black, and the points that are not
separable from the front (within two standard errors of a front point that costs no more) ringed in
dashed grey:

- ``pretrain_cost.png``: vs pretraining FLOPs (the generic part; SLM-is has none, it is plotted at the
  cost of its domain-specific pretraining, which it pays per domain);
- ``specialize_cost.png``: vs per-domain FLOPs (specialization, plus SLM-is's pretraining);
- ``inference_size.png``: vs total FLOPs for one domain, one panel per served model size;
- ``domain_tokens.png``: vs total FLOPs for one domain, one panel per in-domain data size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from slm import methods
from slm.artifacts import atomic_path, atomic_write_text
from slm.tune.claims import write_claims
from slm.tune.results import aggregate, difference, finite, menu, ppl, read_curves, read_table, separable


def pareto(rows: list[dict], cost: str, quality: str = "perplexity") -> list[dict]:
    """Rows no other row beats on both ``cost`` and ``quality`` (lower is better for both)."""
    ok = [r for r in rows if finite(r[cost]) and finite(r[quality])]
    front = []
    for r in ok:
        dominated = any(o[cost] <= r[cost] and o[quality] <= r[quality] and (o[cost], o[quality]) != (r[cost], r[quality])
                        for o in ok)
        if not dominated:
            front.append(r)
    return sorted(front, key=lambda r: r[cost])


def near_front(rows: list[dict], cost: str, quality: str = "perplexity") -> list[dict]:
    """Rows off the Pareto front that no row beats by a separable margin at no more cost: on these seeds
    they may belong to the front. Rows with an unknown spread (one seed) are never marked."""
    ok = [r for r in rows if finite(r[cost]) and finite(r[quality])]
    on_front = {id(r) for r in pareto(ok, cost, quality)}
    near = []
    for r in ok:
        if id(r) in on_front:
            continue
        beating = [o for o in ok if o is not r and o[cost] <= r[cost] and o[quality] <= r[quality]]
        if all(separable(*difference(o, r, quality)) is False for o in beating):
            near.append(r)
    return sorted(near, key=lambda r: r[cost])


def total_flops(r: dict, domains: int = 1) -> float:
    """C_total(N) = C_generic + N·C_specialization (SLM-is: N·(its pretraining + specialization))."""
    return r["generic_flops"] + domains * r["per_domain_flops"]


def _scatter(ax, rows: list[dict], cost, title: str, xlabel: str) -> None:
    for r in rows:
        r["_x"] = cost(r)
    for method in sorted({r["method"] for r in rows}):
        mine = [r for r in rows if r["method"] == method]
        ax.errorbar([r["_x"] for r in mine], [r["perplexity"] for r in mine],
                    yerr=[r["perplexity_se"] or 0.0 for r in mine], fmt="o", capsize=3, label=method, alpha=0.8,
                    color=methods.display(method)[1])
    front = pareto(rows, "_x")
    ax.scatter([r["_x"] for r in front], [r["perplexity"] for r in front], s=140, facecolors="none",
               edgecolors="black", label="Pareto-optimal")
    near = near_front(rows, "_x")
    if near:
        ax.scatter([r["_x"] for r in near], [r["perplexity"] for r in near], s=140, facecolors="none",
                   edgecolors="gray", linestyles="--", label="within noise of the front")
    ax.plot([r["_x"] for r in front], [r["perplexity"] for r in front], color="black", lw=0.8, ls="--")
    _log_x(ax, [r["_x"] for r in rows if finite(r["_x"])])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("specialized perplexity")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)


def _log_x(ax, xs: list[float]) -> None:
    """A log x axis with a few short labels: matplotlib labels every minor tick of a span under a decade
    with long 2.2×10¹² labels that overlap."""
    from matplotlib import ticker  # matplotlib only when drawing (see _figure)

    ax.set_xscale("log")
    if not xs:
        return
    lo, hi = min(xs), max(xs)
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    if hi < lo * 10:  # under a decade: no power of ten may fall inside; put four ticks across the data
        ax.set_xticks(np.geomspace(lo, hi, 4) if hi > lo else [lo])
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.2g}"))


def _figure(path: Path, panels: list[tuple[str, list[dict]]], cost, xlabel: str) -> None:
    # matplotlib only when drawing, and its file backend chosen before pyplot loads (no display here).
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels, strict=True):
        _scatter(ax, rows, cost, title, xlabel)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def report(sweep: str | Path, out: str | Path | None = None) -> dict:
    sweep = Path(sweep)
    trials = read_table(sweep)
    every = aggregate(trials)
    rows = menu(every)
    if not rows:
        raise ValueError(f"{sweep}: the results table has no finished trial to report")
    out = Path(out) if out else sweep / "report"
    out.mkdir(parents=True, exist_ok=True)
    pre = lambda r: r["generic_flops"] or r["pretrain_flops"]  # noqa: E731 (SLM-is: its per-domain pretraining)
    _figure(out / "pretrain_cost.png", [("vs pretraining cost", rows)], pre, "pretraining FLOPs")
    _figure(out / "specialize_cost.png", [("vs per-domain cost", rows)], lambda r: r["per_domain_flops"],
            "per-domain FLOPs (specialization; SLM-is: + its pretraining)")
    _figure(out / "inference_size.png",
            [(f"served size {s} ({next(r['params'] for r in rows if r['size'] == s) / 1e6:.2f}M params)",
              [r for r in rows if r["size"] == s]) for s in sorted({r["size"] for r in rows})],
            total_flops, "total FLOPs for one domain")
    _figure(out / "domain_tokens.png",
            [(f"{t:,} in-domain tokens", [r for r in rows if r["domain_tokens"] == t])
             for t in sorted({r["domain_tokens"] for r in rows})], total_flops, "total FLOPs for one domain")
    summary = markdown(rows, trials=sum(finite(t["perplexity"]) for t in trials))
    atomic_write_text(out / "summary.md", summary)
    claims = write_claims(every, out, read_curves(sweep))
    return {"report": str(out), "plots": sorted(p.name for p in out.glob("*.png")), "rows": len(rows),
            "claims": {c.id: c.verdict for c in claims}}


def markdown(rows: list[dict], trials: int) -> str:
    seeds = max(r["n"] for r in rows)
    lines = ["# Sweep summary", "",
             f"{trials} specialized models: {len(rows)} settings, up to {seeds} seed(s) each. Perplexity is the mean "
             "over a setting's seeds ± its standard error; a difference under two standard errors is a tie."
             + ("" if seeds > 1 else " One seed per setting: the spread is unknown (set `sweep.seeds`)."), "",
             "Best per method (lowest mean perplexity):", "",
             "| method | size | pretrain steps | domain | in-domain tokens | spec. steps | ppl | top-1 | total FLOPs (1 domain) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for method in sorted({r["method"] for r in rows}):
        b = min((r for r in rows if r["method"] == method), key=lambda r: r["perplexity"])
        lines.append(f"| {method} | {b['size']} | {b['pretrain_steps']} | {b['domain']} | {b['domain_tokens']:,} "
                     f"| {b['specialize_steps']} | {ppl(b)} | {b['accuracy']:.4f} | {total_flops(b):.3g} |")
    for r in rows:
        r["_total"] = total_flops(r)
    lines += ["", "Pareto-optimal on the means (total FLOPs for one domain vs perplexity):", "",
              "| setting | total FLOPs | ppl |", "|---|---|---|"]
    lines += [f"| {r['trial']} | {r['_total']:.3g} | {ppl(r)} |" for r in pareto(rows, "_total")]
    near = near_front(rows, "_total")
    if near:
        lines += ["", "Not separable from the front (within two standard errors of a front point that costs no more):",
                  "", "| setting | total FLOPs | ppl |", "|---|---|---|"]
        lines += [f"| {r['trial']} | {r['_total']:.3g} | {ppl(r)} |" for r in near]
    lines += ["", "Plots: `pretrain_cost.png`, `specialize_cost.png`, `inference_size.png`, `domain_tokens.png`."]
    return "\n".join(lines) + "\n"
