"""`slm report SWEEP`: the frontier plots (Plan-Early's figures) and a Markdown summary of a sweep.

Everything is computed on settings — a sweep's trials folded over their seeds (``slm.tune.results``):
each point is a setting's mean perplexity with error bars of ± one standard error. Plots (PNG,
matplotlib): a panel per domain (and per size or data size), specialized valid perplexity on the y axis
(lower is better), a colour per method (its paper name in the legend), a marker per in-domain data
size, Pareto-optimal points (no other setting is both cheaper and better on the means) ringed in
black and not joined, the points that no front point costing no more beats at 95% (Welch's t,
``slm.tune.stats``) ringed in grey; one legend, outside the panels:

- ``pretrain_cost.png``: vs pretraining FLOPs (the generic part; SLM-is has none, it is plotted at the
  cost of its domain-specific pretraining, which it pays per domain);
- ``specialize_cost.png``: vs per-domain FLOPs (specialization, plus SLM-is's pretraining);
- ``inference_size.png``: vs total FLOPs for one domain, a panel per served model size (only when the
  sweep has more than one);
- ``domain_tokens.png``: vs total FLOPs for one domain, a panel per in-domain data size.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from slm import methods
from slm.artifacts import atomic_path, atomic_write_text
from slm.tune.claims import Design, write_claims
from slm.tune.results import aggregate, difference, finite, menu, ppl, read_curves, read_table, total_flops
from slm.tune.stats import separable


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
        if all(separable(difference(o, r, quality)) is False for o in beating):
            near.append(r)
    return sorted(near, key=lambda r: r[cost])


MARKERS = "osD^vP*X"


def _scatter(ax, rows: list[dict], cost, title: str, xlabel: str, markers: dict[int, str]) -> None:
    """A panel: a setting a point (its seeds' mean ± one standard error), the colour its method, the
    marker its in-domain data size; the Pareto-optimal points ringed, not joined (a line between them
    would claim the settings in between)."""
    for r in rows:
        r["_x"] = cost(r)
    for method in sorted({r["method"] for r in rows}):
        for tokens in sorted({r["domain_tokens"] for r in rows}):
            mine = [r for r in rows if r["method"] == method and r["domain_tokens"] == tokens]
            if mine:
                ax.errorbar([r["_x"] for r in mine], [r["perplexity"] for r in mine],
                            yerr=[r["perplexity_se"] or 0.0 for r in mine], fmt=markers[tokens], capsize=3,
                            alpha=0.8, color=methods.display(method)[1], markersize=5)
    front = pareto(rows, "_x")
    ax.scatter([r["_x"] for r in front], [r["perplexity"] for r in front], s=140, facecolors="none",
               edgecolors="black")
    near = near_front(rows, "_x")
    if near:
        ax.scatter([r["_x"] for r in near], [r["perplexity"] for r in near], s=140, facecolors="none",
                   edgecolors="gray", linestyles="--")
    _log_x(ax, [r["_x"] for r in rows if finite(r["_x"])])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("valid perplexity (lower is better)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)


def _legend_handles(rows: list[dict], markers: dict[int, str]) -> list:
    """One legend for the figure, beside the panels: methods by colour (paper names), data sizes by
    marker, and what the rings mean."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="o", ls="", color=methods.display(m)[1], label=methods.display(m)[0])
               for m in sorted({r["method"] for r in rows})]
    handles += [Line2D([], [], marker=markers[t], ls="", color="dimgray", label=f"{t:,} in-domain tokens")
                for t in sorted(markers)]
    handles.append(Line2D([], [], marker="o", ls="", markersize=11, markerfacecolor="none", color="black",
                          label="Pareto-optimal (means)"))
    if any(r["perplexity_se"] for r in rows):
        handles.append(Line2D([], [], marker="o", ls="", markersize=11, markerfacecolor="none", color="gray",
                              label="within noise of the front"))
    return handles


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


def _figure(path: Path, grid: list[list[tuple[str, list[dict]]]], cost, xlabel: str) -> None:
    """A figure of panels (rows of them), the legend outside the data, on the right."""
    # matplotlib only when drawing, and its file backend chosen before pyplot loads (no display here).
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    every = [r for line in grid for _, rows in line for r in rows]
    markers = {t: MARKERS[i % len(MARKERS)] for i, t in enumerate(sorted({r["domain_tokens"] for r in every}))}
    n_rows, n_cols = len(grid), max(len(line) for line in grid)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.6 * n_cols + 2.6, 3.8 * n_rows), squeeze=False,
                             layout="constrained")
    for i, line in enumerate(grid):
        for j in range(n_cols):
            if j < len(line):
                _scatter(axes[i][j], line[j][1], cost, line[j][0], xlabel, markers)
            else:
                axes[i][j].set_visible(False)
    fig.legend(handles=_legend_handles(every, markers), loc="outside right upper", fontsize=8)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def read_plan(sweep: Path) -> dict:
    """The sweep's plan (``plan.json``, written before its first trial): the rows the claims need."""
    path = sweep / "plan.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: the claims check reads the rows it needs from the sweep's "
                                "plan; rerun `slm sweep` on the same spec (finished runs and trials are kept)")
    return json.loads(path.read_text())


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
    domains = sorted({r["domain"] for r in rows})
    by_domain = {d: [r for r in rows if r["domain"] == d] for d in domains}
    _figure(out / "pretrain_cost.png", [[(f"{d}: vs pretraining cost", by_domain[d]) for d in domains]], pre,
            "pretraining FLOPs (SLM-is: its own, per domain)")
    _figure(out / "specialize_cost.png", [[(f"{d}: vs per-domain cost", by_domain[d]) for d in domains]],
            lambda r: r["per_domain_flops"], "per-domain FLOPs (specialization; SLM-is: + its pretraining)")
    sizes = sorted({r["size"] for r in rows})
    (out / "inference_size.png").unlink(missing_ok=True)
    if len(sizes) > 1:  # one served size: the pretraining plot says it all
        _figure(out / "inference_size.png",
                [[(f"{d}: served size {s} ({next(r['params'] for r in rows if r['size'] == s) / 1e6:.2f}M params)",
                   [r for r in by_domain[d] if r["size"] == s]) for s in sizes] for d in domains],
                total_flops, "total FLOPs for one domain")
    _figure(out / "domain_tokens.png",
            [[(f"{d}: {t:,} in-domain tokens", [r for r in by_domain[d] if r["domain_tokens"] == t])
              for t in sorted({r["domain_tokens"] for r in rows})] for d in domains],
            total_flops, "total FLOPs for one domain")
    summary = markdown(rows, trials=sum(finite(t["perplexity"]) for t in trials))
    atomic_write_text(out / "summary.md", summary)
    claims = write_claims(trials, Design.of(read_plan(sweep)), out, read_curves(sweep))
    return {"report": str(out), "plots": sorted(p.name for p in out.glob("*.png")), "rows": len(rows),
            "claims": {c.id: c.verdict for c in claims}}


def markdown(rows: list[dict], trials: int) -> str:
    seeds = max(r["n"] for r in rows)
    lines = ["# Sweep summary", "",
             f"{trials} specialized models: {len(rows)} settings, up to {seeds} seed(s) each. Perplexity is the mean "
             "over a setting's seeds ± its standard error; a difference whose 95% interval (Welch's t) includes zero is a tie."
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
        lines += ["", "Not separable from the front (no front point that costs no more beats them at 95%, Welch's t):",
                  "", "| setting | total FLOPs | ppl |", "|---|---|---|"]
        lines += [f"| {r['trial']} | {r['_total']:.3g} | {ppl(r)} |" for r in near]
    lines += ["", "Plots: `pretrain_cost.png`, `specialize_cost.png`, `inference_size.png`, `domain_tokens.png`."]
    return "\n".join(lines) + "\n"
