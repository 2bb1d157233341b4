"""`slm report SWEEP`: the frontier plots (Plan-Early's figures) and a Markdown summary of a sweep.

Everything is computed on settings — a sweep's trials folded over their seeds (``slm.analysis.results``):
each point is a setting's mean perplexity with error bars of its 95% t interval over seeds. Plots (PNG,
matplotlib): a panel per domain (and per size or data size), specialized valid perplexity on a log y
axis (lower is better), a colour per method (its paper name in the legend), a marker per in-domain data
size, Pareto-optimal points (no other setting is both cheaper and better on the means) ringed in
black and not joined, the points that no front point costing no more beats at 95% (``results.compare``:
paired where the seed pairs the data, Welch's t otherwise) ringed in grey; one legend, outside the panels:

- ``pretrain_cost.png``: vs pretraining FLOPs (the generic part; SLM-is has none, it is plotted at the
  cost of its domain-specific pretraining, which it pays per domain);
- ``specialize_cost.png``: vs per-domain FLOPs (specialization, plus SLM-is's pretraining);
- ``inference_size.png``: vs total FLOPs for one domain, a panel per served model size (only when the
  sweep has more than one);
- ``domain_tokens.png``: vs total FLOPs for one domain, a panel per in-domain data size;
- ``pretrain_curves.png``: each pretraining run's macro valid loss against its steps, a panel per run (its
  seeds as lines), from the sweep's ``curves.parquet``; ``summary.md`` says whether the generic model of
  the small size saturated (``saturation``).

Beside them: ``summary.md``, ``claims.md`` (``slm.analysis.claims``) and ``report.html`` (``slm.analysis.page``:
all of it, with the advice at the sweep's budgets, in one offline page).
"""

from __future__ import annotations

import json
import math
import os
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np

from slm import methods
from slm.analysis import curves as fits
from slm.analysis import ladder
from slm.analysis.claims import Design, write_claims
from slm.analysis.page import page
from slm.analysis.results import aggregate, compare, menu, ppl, total_flops
from slm.analysis.stats import half_width, mean_interval, separable
from slm.artifacts import atomic_path, atomic_write_json, atomic_write_text
from slm.log import logger
from slm.records.plan import DataFingerprint, Plan, axis_labels, axis_suffix, seed_suffix
from slm.records.table import finite, read_curves, read_table, write_curve_rows, write_table

log = logger(__name__)

SATURATED = 0.01  # the study's bar: the valid loss changes by < 1% over the last doubling (docs/results.md)


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
        if all(separable(compare(o, r, quality)) is False for o in beating):
            near.append(r)
    return sorted(near, key=lambda r: r[cost])


MARKERS = "osD^vP*X"
DODGE = 0.02  # each group's points moved sideways by this fraction of the log axis, relative to the next


def _scatter(ax, rows: list[dict], cost, title: str, xlabel: str, markers: dict[int, str]) -> None:
    """A panel: a setting a point (its seeds' mean and 95% interval), the colour its method, the
    marker its in-domain data size; the Pareto-optimal points ringed, not joined (a line between them
    would claim the settings in between)."""
    for r in rows:
        r["_x"] = cost(r)
    groups = [(m, t) for m in sorted({r["method"] for r in rows}) for t in sorted({r["domain_tokens"] for r in rows})]
    for k, (method, tokens) in enumerate(groups):
        mine = [r for r in rows if r["method"] == method and r["domain_tokens"] == tokens]
        for r in mine:  # points of one cost spread sideways, a group at a time, so that none hides another
            r["_shown_x"] = r["_x"] * (1 + DODGE) ** (k - (len(groups) - 1) / 2)
        if mine:
            ax.errorbar([r["_shown_x"] for r in mine], [r["perplexity"] for r in mine],
                        yerr=[half_width(r["perplexity_se"], r["n"] - 1) if r["perplexity_se"] else 0.0 for r in mine],
                        fmt=markers[tokens], capsize=3,
                        alpha=0.8, color=methods.display(method)[1], markersize=5)
    front = pareto(rows, "_x")  # on the true costs; ringed where the points are drawn
    ax.scatter([r["_shown_x"] for r in front], [r["perplexity"] for r in front], s=140, facecolors="none",
               edgecolors="black")
    near = near_front(rows, "_x")
    if near:
        ax.scatter([r["_shown_x"] for r in near], [r["perplexity"] for r in near], s=140, facecolors="none",
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
    handles += [Line2D([], [], marker=markers[t], ls="", color="black", markerfacecolor="none",
                       label=f"{t:,} in-domain tokens") for t in sorted(markers)]
    handles.append(Line2D([], [], marker="o", ls="", markersize=11, markerfacecolor="none", color="black",
                          label="Pareto-optimal (means)"))
    if any(r["perplexity_se"] for r in rows):
        handles.append(Line2D([], [], marker="o", ls="", markersize=11, markerfacecolor="none", color="gray",
                              markeredgewidth=1.2, fillstyle="none", label="within noise of the front (dashed)"))
    return handles


def _log_x(ax, xs: list[float]) -> None:
    """A log x axis with a few short labels: matplotlib labels every minor tick of a span under a decade
    with long 2.2×10¹² labels that overlap."""
    from matplotlib import ticker  # matplotlib only when drawing (see _pyplot)

    ax.set_xscale("log")
    if not xs:
        return
    lo, hi = min(xs), max(xs)
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    if hi < lo * 10:  # under a decade: no power of ten may fall inside; put ticks across the data
        _ticks_across(ax.xaxis, lo, hi, 2)


def _distinct_ticks(lo: float, hi: float, digits: int = 2) -> tuple[np.ndarray, int]:
    """Ticks across [lo, hi] and the significant digits (at least ``digits``) that tell their labels apart:
    four; where that many digits cannot (the study's large-model panels, whose settings differ by their
    specialization FLOPs alone, span 3.87e+13 to 3.92e+13: two digits printed 3.9e+13 four times, more
    overlapped), the two ends, with the digits they need."""
    if not hi > lo:
        return np.array([lo]), digits
    ticks = np.geomspace(lo, hi, 4)
    if len({f"{v:.{digits}g}" for v in ticks}) == 4:
        return ticks, digits
    needed = next((d for d in range(digits + 1, 16) if f"{lo:.{d}g}" != f"{hi:.{d}g}"), 16)
    return np.array([lo, hi]), needed


def _ticks_across(axis, lo: float, hi: float, digits: int) -> None:
    """A log axis whose data span too little for matplotlib's ticks: ``_distinct_ticks``, so labelled."""
    from matplotlib import ticker

    ticks, digits = _distinct_ticks(lo, hi, digits)
    axis.set_ticks(ticks)
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.{digits}g}"))


def _log_y(ax, ys: list[float]) -> None:
    """A log perplexity axis, labelled in plain numbers: a log perplexity is a loss, so equal ratios read as
    equal gaps, and methods a few percent apart at 15-50 stay apart beside one at 300."""
    from matplotlib import ticker

    ax.set_yscale("log")
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ys = [y for y in ys if finite(y) and y > 0]
    if ys and max(ys) < 3 * min(ys):  # 1-2-5 would leave one label or none: ticks across the data (as _log_x)
        _ticks_across(ax.yaxis, min(ys), max(ys), 3)
    else:
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))


def _pyplot():
    """pyplot with the file backend: matplotlib is imported only when drawing, and its backend chosen
    before pyplot loads (no display here)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: Path) -> None:
    """The figure written atomically as a PNG, then closed (pyplot keeps every open figure alive)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def _figure(path: Path, grid: list[list[tuple[str, list[dict]]]], cost, xlabel: str) -> None:
    """A figure of panels (rows of them), the legend outside the data, on the right."""
    plt = _pyplot()
    every = [r for line in grid for _, rows in line for r in rows]
    markers = {t: MARKERS[i % len(MARKERS)] for i, t in enumerate(sorted({r["domain_tokens"] for r in every}))}
    n_rows, n_cols = len(grid), max(len(line) for line in grid)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.6 * n_cols + 2.6, 3.8 * n_rows + 0.4), squeeze=False,
                             layout="constrained", sharey=True)  # one perplexity scale: panels compare
    for i, line in enumerate(grid):
        for j in range(n_cols):
            if j < len(line):
                _scatter(axes[i][j], line[j][1], cost, line[j][0], xlabel, markers)
            else:
                axes[i][j].set_visible(False)
    _log_y(axes[0][0], [r["perplexity"] for r in every])  # shared by every panel (sharey)
    fig.legend(handles=_legend_handles(every, markers), loc="outside right upper", fontsize=8)
    # Above the panels only (the legend has the right margin): wrapped to their width.
    fig.suptitle(textwrap.fill(caption(every), width=int(14 * 4.6 * n_cols)), fontsize=8, x=0.01,
                 horizontalalignment="left")
    _save(plt, fig, path)


def _curves_figure(path: Path, curves: list[dict]) -> None:
    """``pretrain_curves.png``: a panel per pretraining run (seeds as lines, one loss scale per panel: runs
    of different sizes and data differ by more than their curves' tails)."""
    plt = _pyplot()
    families: dict[str, dict[int | None, list[dict]]] = {}
    for point in (p for p in curves if p["role"] != "branch"):  # a branch's one point: the fitted saturation's
        family = point["run"].removesuffix(seed_suffix(point["seed"]))  # generic-d1-seed0 -> generic-d1
        families.setdefault(family, {}).setdefault(point["seed"], []).append(point)
    n_cols = min(3, len(families))
    n_rows = -(-len(families) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.2 * n_cols, 3.2 * n_rows + 0.4), squeeze=False,
                             layout="constrained")
    for k, (family, by_seed) in enumerate(sorted(families.items())):
        ax = axes[k // n_cols][k % n_cols]
        for seed, points in sorted(by_seed.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
            points = sorted(points, key=lambda p: p["step"])
            ax.plot([p["step"] for p in points], [p["loss"] for p in points], marker=".", markersize=4,
                    label="one run" if seed is None else f"seed {seed}")
        ax.set_title(family, fontsize=9)
        ax.set_xlabel("pretraining steps")
        ax.set_ylabel("macro valid loss (nats/token)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for k in range(len(families), n_rows * n_cols):
        axes[k // n_cols][k % n_cols].set_visible(False)
    fig.suptitle("Pretraining: the macro valid loss (mean over the valid domains of the model each is served by) "
                 "at each evaluation", fontsize=8, x=0.01, horizontalalignment="left")
    _save(plt, fig, path)


def _fitted_figure(path: Path, fams: list[ladder.Family], crossings: list[ladder.CellCrossing]) -> list[list[str]]:
    """``fitted_curves.png``: a panel per cell (size, domain, in-domain tokens, specialization steps), each
    method's measured means (with their 95% intervals over seeds) against its pretraining FLOPs, its fitted curve
    (dashed beyond the measured budgets) and the 95% band across seeds; where two curves cross, a dotted
    line. Each panel's legend names its families once, each with its form; returned per panel (empty: no family
    has a curve, no figure)."""
    cells: dict[tuple, list[ladder.Family]] = {}
    for f in fams:
        if f.fit.fitted:
            cells.setdefault(f.cell, []).append(f)
    if not cells:
        return []
    plt = _pyplot()
    legends = []
    n_cols = min(4, len(cells))
    n_rows = -(-len(cells) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.4 * n_cols, 3.6 * n_rows + 0.5), squeeze=False,
                             layout="constrained")
    for k, (cell, members) in enumerate(sorted(cells.items(), key=lambda kv: tuple(map(str, kv[0])))):
        ax = axes[k // n_cols][k % n_cols]
        every_x, every_y = [], []
        shown: dict[str, object] = {}  # one legend entry per family of this panel, with its form (issue 64)
        for f in members:
            color = methods.get(f.method).color
            by_x: dict[float, list[float]] = {}
            for point in f.fit.points:
                by_x.setdefault(point.x, []).append(math.exp(point.y))
            xs = sorted(by_x)
            means = [float(np.mean(by_x[x])) for x in xs]
            errors = [mean_interval(by_x[x]) or 0.0 for x in xs]
            ax.errorbar(xs, means, yerr=errors, fmt="o", color=color, markersize=4, capsize=2)
            lo, hi = f.fit.span
            grid = np.geomspace(lo / 1.5, hi * 4, 80)
            inside = (grid >= lo) & (grid <= hi)
            curve = np.exp(np.asarray(f.fit.params(grid)))
            (line,) = ax.plot(grid[inside], curve[inside], color=color, linewidth=1.4)
            ax.plot(grid[grid <= lo], curve[grid <= lo], color=color, linewidth=1.0, linestyle="--")
            ax.plot(grid[grid >= hi], curve[grid >= hi], color=color, linewidth=1.0, linestyle="--")
            band = [f.fit.loss(float(x)) for x in grid]
            if all(math.isfinite(b.high) for b in band):
                ax.fill_between(grid, [math.exp(b.low) for b in band], [math.exp(b.high) for b in band], color=color,
                                alpha=0.15, linewidth=0)
            shown[f"{methods.display(f.method)[0]} ({f.fit.form})"] = line
            every_x += [float(grid[0]), float(grid[-1])]
            every_y += means + [float(curve.min()), float(curve.max())]
        for c in crossings:
            if c.a.cell == cell and c.crossing.at is not None and c.crossing.at.value <= max(every_x):
                ax.axvline(c.crossing.at.value, color="0.4", linestyle=":", linewidth=1)
        size, domain, tokens, steps = cell
        ax.set_title(f"{domain}: {size}, {tokens:,} tokens, {steps} spec. steps", fontsize=9)
        ax.set_xscale("log")
        _log_x(ax, every_x)
        _log_y(ax, every_y)
        ax.set_xlabel("pretraining FLOPs")
        ax.set_ylabel("specialized perplexity")
        ax.grid(alpha=0.3)
        ax.legend(list(shown.values()), list(shown), fontsize=7, loc="best", framealpha=0.8)
        legends.append(list(shown))
    for k in range(len(cells), n_rows * n_cols):
        axes[k // n_cols][k % n_cols].set_visible(False)
    # Wrapped to the panels' width.
    title = ("Fitted L = E + A·C^−α per method (log-perplexity against pretraining FLOPs): points the means over seeds "
             "with their 95% intervals, solid within the measured budgets, dashed beyond, the band the 95% interval across seeds; "
             "dotted: where two methods' curves cross")
    fig.suptitle(textwrap.fill(title, width=max(60, int(14 * 4.4 * n_cols))), fontsize=8, x=0.01,
                 horizontalalignment="left")
    _save(plt, fig, path)
    return legends


def curve_lines(fams: list[ladder.Family], crossings: list[ladder.CellCrossing], trained: bool) -> list[str]:
    """summary.md's section on the fitted curves: each family's form and parameters, or why it has none,
    and every crossing; ``trained``: whether the budgets are fully trained models (WSD branches), else
    the curves are said to be through snapshots."""
    lines = ["", "Fitted curves (each family's specialized log-perplexity against its pretraining FLOPs, "
             "L = E + A·(C/C0)^−α; `slm advise` reads them at any budget):", ""]
    if not trained:
        lines += ["**These budgets are snapshots of one cosine run per method, not fully trained models** (a snapshot "
                  "at 0.6 of the run has its learning rate at ~35% of the peak): a curve through them is biased "
                  "against the smaller budgets, and so is every crossing below. A sweep under "
                  "`pretrain.train.optim.schedule: wsd` trains each budget fully (docs/budgets.md).", ""]
    lines += ["| family | form | E | A | α | C0 | budgets | seeds | why |", "|---|---|---|---|---|---|---|---|---|"]
    for f in fams:
        p = f.fit.params
        numbers = (f"{p.E:.4g} | {p.A:.4g} | {p.alpha:.3g} | {p.x0:.3g}" if p else "— | — | — | —")
        lines.append(f"| {f.name} | {f.fit.form or 'none'} | {numbers} | {len(f.fit.budgets)} | "
                     f"{len(f.fit.seeds)} | {f.fit.why} |")
    if crossings:
        lines += ["", "Where two methods' curves cross (95% interval across seeds, paired):", ""]
        lines += [f"- {ladder.describe_cell(c.a.cell)}: {ladder.describe_crossing(c)}" for c in crossings]
    return lines


def _tokens_per_step(curves_rows: list[dict]) -> float | None:
    steps = [p for p in curves_rows if p["role"] in ("grid", "branch") and p["step"]]
    return steps[0]["tokens"] / steps[0]["step"] if steps else None


def fully_trained(plan: Plan) -> bool:
    """Whether every pretraining budget of the plan's grid is a fully trained model: a WSD trunk's own or one
    of its branches (a run with one budget is trained to it either way)."""
    grid = [r for r in plan.runs if r.role == "grid"]
    return all(len(r.snapshots) <= 1 or r.branches for r in grid)


def saturation(curves: list[dict], small: str) -> list[dict]:
    """Whether the generic model of the small size saturated (the crossovers of C1-C3 need it): for each
    of its runs, the macro valid loss at its last evaluation and at half those steps, the relative change
    over that last doubling, and whether it is under ``SATURATED`` (``None`` when the run has no
    evaluation at half its steps)."""
    runs: dict[str, dict[int, dict]] = {}
    for point in curves:
        if point["method"] == methods.BASELINE and point["size"] == small and point["role"] != "branch":
            runs.setdefault(point["run"], {})[point["step"]] = point
    rows = []
    for name, points in sorted(runs.items()):
        last = max(points)
        half = points.get(last // 2)
        change = (points[last]["loss"] - half["loss"]) / half["loss"] if half else None
        rows.append({"run": name, "seed": points[last]["seed"], "steps": last, "loss": points[last]["loss"],
                     "half_steps": last // 2, "half_loss": half["loss"] if half else None, "change": change,
                     "saturated": None if change is None or not math.isfinite(change) else abs(change) < SATURATED})
    return rows


def fitted_saturation(curves_rows: list[dict], small: str) -> tuple[fits.Fit, fits.Saturation] | None:
    """The generic small model's saturation read from the curve through its fully trained budgets (a WSD
    sweep's trunks' last evaluations and their branches'), seeds the replication unit; None without three
    budgets."""
    points = []
    trunks: dict[str, dict] = {}
    for p in curves_rows:
        if p["method"] != methods.BASELINE or p["size"] != small:
            continue
        if p["role"] == "branch":
            points.append(fits.Point(p["step"], p["loss"], p["seed"]))
        elif p["role"] == "grid" and p["step"] >= trunks.get(p["run"], {"step": -1})["step"]:
            trunks[p["run"]] = p
    points += [fits.Point(p["step"], p["loss"], p["seed"]) for p in trunks.values()]
    if not any(p["role"] == "branch" for p in curves_rows) or len({p.x for p in points}) < 3:
        return None
    fit = fits.fit(points)
    return (fit, fits.saturation(fit, SATURATED)) if fit.fitted else None


def saturation_lines(found: tuple[fits.Fit, fits.Saturation] | None, params: int | None,
                     tokens_per_step: float | None) -> list[str]:
    """summary.md's lines on the fitted saturation (nothing when there is no curve)."""
    if found is None:
        return []
    fit, s = found
    c = s.change
    verdict = {True: "saturated", False: "**not saturated**", None: "undecided (the interval straddles the bar)"}[
        s.saturated]

    def per_param(steps: float) -> str:
        return f", {steps * tokens_per_step / params:,.0f} tokens per parameter" if params and tokens_per_step else ""

    seeds = f"{len(fit.per_seed)} seed{'s' * (len(fit.per_seed) != 1)}"
    lines = ["", f"The generic model's saturation, from the curve through its fully trained budgets ({fit.form}; "
             f"{fit.why}; {seeds}): the macro valid loss changes by {c.value:+.2%} over the doubling "
             f"to {s.largest:,.0f} steps (95% interval {c.low:+.2%} to {c.high:+.2%}{per_param(s.largest)}): "
             f"{verdict} against {SATURATED:.0%}."]
    if fit.form == "power law":
        lines.append("A power law changes by the same share at every doubling: the fit places no saturation budget.")
    elif s.budget is None:
        lines.append(f"No doubling changes it by under {SATURATED:.0%} within {fits.EXTRAPOLATION_LIMIT:.0e} × the largest "
                     "budget.")
    else:
        b = s.budget
        high = f"{b.high:,.0f}" if math.isfinite(b.high) else "unbounded (some seeds never get there)"
        lines.append(f"A doubling changes it by under {SATURATED:.0%} from {b.value:,.0f} steps (95% interval "
                     f"{b.low:,.0f} to {high}{per_param(b.value)})" + ("; extrapolated" if b.extrapolated else "") + ".")
    return lines


def served_size(rows: list[dict], size: str) -> str:
    """A size as the plots name it: ``d2 (1.44M params)``."""
    return f"{size} ({next(r['params'] for r in rows if r['size'] == size) / 1e6:.2f}M params)"


def caption(rows: list[dict]) -> str:
    """What every panel's points are: means over seeds with 95% intervals, the served sizes and the
    specialization budgets (the axes show neither)."""
    n = max(r["n"] for r in rows)
    sizes = ", ".join(served_size(rows, s) for s in sorted({r["size"] for r in rows}))
    steps = ", ".join(str(s) for s in sorted({r["specialize_steps"] for r in rows}))
    spread = (f"mean over up to {n} seeds, error bars its 95% t interval" if n > 1
              else "one seed per point: no error bars (spread unknown)")
    return (f"Each point a setting: {spread}. Served size {sizes}; {steps} specialization steps. "
            "Points of one cost are spread sideways a little so that none hides another.")


def read_plan(sweep: Path) -> Plan:
    """The sweep's plan (``plan.json``, written before its first trial): the rows the claims need."""
    path = sweep / "plan.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: the claims check reads the rows it needs from the sweep's "
                                "plan; rerun `slm sweep` on the same spec (finished runs and trials are kept)")
    return Plan.from_json(json.loads(path.read_text()))


class CombineError(ValueError):
    """Results tables that cannot be read as one study."""


def sweep_folders(paths: list[str | Path]) -> list[Path]:
    """Sweep folders (each with ``results.parquet``, ``plan.json`` and ``curves.parquet``) from the paths
    given: a sweep folder, its ``results.parquet``, or a folder whose sub-folders are sweeps (the study's
    parts under ``benchmarks/results/study/``)."""
    folders = []
    for path in map(Path, paths):
        if path.is_file():
            folders.append(path.parent)
        elif (path / "results.parquet").exists():
            folders.append(path)
        elif path.is_dir() and any(path.glob("*/results.parquet")):
            folders += sorted(p.parent for p in path.glob("*/results.parquet"))
        else:
            raise FileNotFoundError(f"{path}: no results.parquet there or in its sub-folders: give a sweep folder "
                                    "(runs/<run>/sweeps/<name>), its results.parquet, or a folder of them")
    return list(dict.fromkeys(folders))


def part_names(folders: list[Path]) -> tuple[str, ...]:
    """The parts as the combined plan records them: relative to the folder they share (``seed0-a`` …), so
    that the same parts give the same plan wherever they are read from (a relative or an absolute path)."""
    paths = [f.resolve() for f in folders]
    root = Path(os.path.commonpath(paths)) if len(paths) > 1 else paths[0].parent
    return tuple(str(p.relative_to(root)) for p in paths)


def union_of_sets(plans: dict[Path, Plan]) -> DataFingerprint:
    """Every packed set the sweeps trained or evaluated on, with its one digest; ``CombineError`` naming the
    folders and sets where two sweeps recorded one set with different digests."""
    first: dict[str, tuple[str, Path]] = {}
    differ: dict[tuple[Path, Path], list[str]] = {}
    for folder, p in plans.items():
        for name, digest in sorted(p.data.sets.items()):
            seen = first.setdefault(name, (digest, folder))
            if seen[0] != digest:
                differ.setdefault((folder, seen[1]), []).append(name)
    if differ:
        raise CombineError("these sweeps trained or evaluated on different data, so their tables are not one study: "
                           + "; ".join(f"{f} differs from {g} in {sets}" for (f, g), sets in differ.items())
                           + " (same pinned clusters, corpus and tokenizer give the same packed sets)")
    return DataFingerprint.of({name: digest for name, (digest, _) in first.items()})


def combine(folders: list[Path], plan: Plan | None = None) -> tuple[list[dict], Plan, list[dict], list[str]]:
    """Several sweeps' tables as one: their trials, the plan they answer (``plan``, the whole design's,
    or the union of theirs), their curves, and the planned trials none of them has, by name. Refused
    (``CombineError``, naming the folders and what differs) when they trained on different data (a packed
    set two plans both record with different digests: the parts of one seed train on different sets, so
    each set is compared, not the plans' fingerprints), disagree on the small or large model, or share a
    trial."""
    plans = {f: read_plan(f) for f in folders}
    unknown = [str(f) for f, p in plans.items() if p.data is None]
    if len(folders) > 1 and unknown:
        raise CombineError(f"no data fingerprint in the plan of {unknown}: a sweep run before tables could be combined; "
                           "rerun it (finished runs and trials are kept) to record one")
    data = union_of_sets(plans) if not unknown else None
    kernels = {json.dumps(p.kernels, sort_keys=True): f for f, p in plans.items()}
    if len(kernels) > 1:
        raise CombineError(
            "these sweeps trained on different kernels, so the same seed gave them different numbers and their tables "
            "are not one study: " + "; ".join(f"{f}: {k}" for k, f in kernels.items())
            + " (train every part with pretrain.train.numerics=pinned and specialize.train.numerics=pinned: the same "
            "numbers on any CPU with AVX2; docs/training.md, \"Reproducible numerics\"; an empty record is a plan "
            "from before issue 63)")
    for key in ("small", "large"):
        values = {getattr(p, key) for p in plans.values()} | ({getattr(plan, key)} if plan else set())
        if len(values) > 1:
            raise CombineError(f"the sweeps disagree on the {key} model: {sorted(map(str, values))}")
    trials, seen = [], {}
    for f in folders:
        for t in read_table(f):
            if t["trial"] in seen:
                raise CombineError(f"trial {t['trial']} is in both {seen[t['trial']]} and {f}: give each part once")
            seen[t["trial"]] = f
            trials.append(t)
    entropies = {k: v for p in plans.values() for k, v in p.histogram_entropy.items()}
    if plan is None:
        plan = replace(plans[folders[0]],
                       # a run two parts trained (one owns it, one needed it): the owner's record
                       runs=tuple({r.name: r for p in plans.values()
                                   for r in sorted(p.runs, key=lambda r: r.owned)}.values()),
                       trials=tuple({t.name: t for p in plans.values() for t in p.trials}.values()),
                       sizes={k: v for p in plans.values() for k, v in p.sizes.items()})
    # A design planned before its data was made (`--dry-run`) has no histograms: the parts measured them.
    plan = replace(plan, histogram_entropy=plan.histogram_entropy or entropies, data=data or plans[folders[0]].data,
                   parts=part_names(folders), kernels=plans[folders[0]].kernels)
    curves = [c for f in folders for c in read_curves(f)]
    missing = sorted(t.name for t in plan.trials if t.name not in seen)
    return trials, plan, curves, missing


def report_tables(paths: list[str | Path], out: str | Path, plan: str | Path | None = None) -> dict:
    """``slm report --tables A B …``: the sweeps' tables combined (``combine``) into ``out`` (results,
    curves and plan, as one sweep's), then its report over their union: the table, the plots, claims.md."""
    folders = sweep_folders(paths)
    design = Plan.from_json(json.loads(Path(plan).read_text())) if plan else None
    trials, combined, curves, missing = combine(folders, design)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_table(trials, out)
    write_curve_rows(curves, out / "curves.parquet")
    atomic_write_json(out / "plan.json", combined.to_json())
    if missing:
        log.info(f"[report] {len(missing)} planned trials are in none of the tables (their comparisons are "
                 f"inconclusive in claims.md): {', '.join(missing[:10])}" + (" …" if len(missing) > 10 else ""))
    result = report(out, out / "report")
    return {**result, "tables": [str(f) for f in folders], "missing": missing}


def report(sweep: str | Path, out: str | Path | None = None) -> dict:
    sweep = Path(sweep)
    plan = read_plan(sweep)
    if plan.axes:
        return report_by_axes(sweep, Path(out) if out else sweep / "report")
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
                [[(f"{d}: served size {served_size(rows, s)}",
                   [r for r in by_domain[d] if r["size"] == s]) for s in sizes] for d in domains],
                total_flops, "total FLOPs for one domain")
    _figure(out / "domain_tokens.png",
            [[(f"{d}: {t:,} in-domain tokens", [r for r in by_domain[d] if r["domain_tokens"] == t])
              for t in sorted({r["domain_tokens"] for r in rows})] for d in domains],
            total_flops, "total FLOPs for one domain")
    curves = read_curves(sweep)
    (out / "pretrain_curves.png").unlink(missing_ok=True)
    if curves:
        _curves_figure(out / "pretrain_curves.png", curves)
    fams = ladder.families(trials)
    crossed = ladder.crossings(fams)
    (out / "fitted_curves.png").unlink(missing_ok=True)
    _fitted_figure(out / "fitted_curves.png", fams, crossed)
    plots = sorted(p.name for p in out.glob("*.png"))
    small = [r for r in rows if r["size"] == plan.small]
    fitted = saturation_lines(fitted_saturation(curves, plan.small), small[0]["params"] if small else None,
                              _tokens_per_step(curves))
    summary = markdown(rows, trials=sum(finite(t["perplexity"]) for t in trials), plots=plots,
                       # Under WSD the run's evaluation at half its steps is the trunk's, before its decay: held
                       # against the decayed end it overstates the change (a part of the study's second edition
                       # read −4.32% there, −1.10% from its fully trained budgets): the curve's line says it.
                       saturated=[] if any(r.branches for r in plan.runs) else saturation(curves, plan.small),
                       fitted=fitted + curve_lines(fams, crossed, trained=fully_trained(plan)))
    atomic_write_text(out / "summary.md", summary)
    claims = write_claims(trials, Design.of(plan), out, curves)
    for r in rows:
        r["_total"] = total_flops(r)
    measured = {t["trial"] for t in trials if finite(t["perplexity"])}
    html = page(sweep.name, trials, rows, plan, out, front={r["trial"] for r in pareto(rows, "_total")},
                near={r["trial"] for r in near_front(rows, "_total")}, caption=caption(rows),
                missing=sorted(t.name for t in plan.trials if t.name not in measured), families=fams)
    return {"report": str(out), "html": str(html), "plots": plots, "rows": len(rows),
            "claims": {c.id: c.verdict for c in claims}}


def report_by_axes(sweep: Path, out: Path) -> dict:
    """A sweep crossed with ``sweep.axes``: each combination of the axes' values reported as a sweep of its own
    (``<out>/at/<values>/``: its share of the tables, plan and curves, and its report: summary, plots, claims,
    page), since the claims, the fitted curves and the advice compare methods under one recipe; and
    ``axes.md``, every setting side by side across each axis's values (the grouping)."""
    plan, trials, curves = read_plan(sweep), read_table(sweep), read_curves(sweep)
    labels = axis_labels(list(plan.axes))
    at: dict[str, dict] = {}
    for point in sorted({t.axes for t in plan.trials}, key=repr):
        name = axis_suffix(point, labels).lstrip("-")
        keep = {t.name for t in plan.trials if t.axes == point}
        runs = {t.source for t in plan.trials if t.name in keep} | {t.teacher_run for t in plan.trials
                                                                     if t.name in keep and t.teacher_run}
        runs |= {r.teacher for r in plan.runs if r.name in runs and r.teacher}
        share = replace(plan, trials=tuple(replace(t, axes=()) for t in plan.trials if t.name in keep),
                        runs=tuple(replace(r, axes=()) for r in plan.runs if r.name in runs))
        rows = [r for r in trials if r["trial"] in keep]
        folder = out / "at" / name
        folder.mkdir(parents=True, exist_ok=True)
        write_table(rows, folder)
        write_curve_rows([c for c in curves if c["run"].split("@")[0] in runs], folder / "curves.parquet")
        atomic_write_json(folder / "plan.json", share.to_json())
        if any(finite(r["perplexity"]) for r in rows):
            at[name] = report(folder, folder / "report")
        else:
            log.info(f"[report] {name}: no finished trial at these axis values yet: no report for it")
    atomic_write_text(out / "axes.md", axes_markdown(aggregate(trials), plan.axes))
    return {"report": str(out), "axes": list(plan.axes), "at": at,
            "rows": sum(r["rows"] for r in at.values()), "plots": sorted({p for r in at.values() for p in r["plots"]}),
            "claims": {f"{name}: {claim}": verdict for name, r in at.items() for claim, verdict in r["claims"].items()}}


def axes_markdown(rows: list[dict], axes: tuple[str, ...]) -> str:
    """axes.md: for each axis, every setting of the other columns (method, size, budgets, domain, the other
    axes) a line, its perplexity at each of the axis's values side by side, the lowest mean in bold."""
    lines = ["# The sweep's axes", "",
             "Each axis's values side by side, everything else fixed: the mean perplexity over the seeds with its 95% t "
             "interval and n; the lowest mean of a line in bold (a lowest mean whose interval overlaps another value's "
             "is not shown apart from it: read the intervals). Each combination's own report: `at/<values>/report/`.", ""]
    fixed = ["method", "size", "domain", "pretrain_steps", "domain_tokens", "specialize_steps", "expert"]
    for axis in axes:
        values = sorted({r[axis] for r in rows}, key=lambda v: (isinstance(v, str), v))
        others = [a for a in axes if a != axis]
        lines += [f"## {axis}", "", "| " + " | ".join(fixed + others) + " | " + " | ".join(map(str, values)) + " |",
                  "|" + "---|" * (len(fixed) + len(others) + len(values))]
        lines_of: dict[tuple, dict] = {}
        for r in rows:
            lines_of.setdefault(tuple(r[k] for k in fixed + others), {})[r[axis]] = r
        for key, by_value in sorted(lines_of.items(), key=lambda kv: repr(kv[0])):
            best = min(by_value.values(), key=lambda r: r["perplexity"])
            cells = [("**" + ppl(by_value[v]) + "**" if by_value[v] is best else ppl(by_value[v]))
                     if v in by_value else "—" for v in values]
            lines.append("| " + " | ".join("—" if k is None else str(k) for k in key) + " | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def markdown(rows: list[dict], trials: int, plots: list[str] = (), saturated: list[dict] = (),
             fitted: list[str] = ()) -> str:
    """summary.md: the best setting per method, the Pareto front and what is within noise of it; methods by
    the papers' names (as the plots say them) with the config name beside; ``plots``: the figures written;
    ``saturated``: the generic model's saturation (``saturation``), when the sweep logged its curves."""
    seeds = max(r["n"] for r in rows)
    lines = ["# Sweep summary", "",
             f"{trials} specialized models: {len(rows)} settings, up to {seeds} seed(s) each. Perplexity is the mean "
             "over a setting's seeds with the 95% t interval of that mean, [low, high]; a difference whose 95% interval "
             "includes zero is a tie (a paired t where the seed pairs the two settings' data: the same domain, in-domain "
             "data size and specialization budget; Welch's t otherwise)."
             + ("" if seeds > 1 else " One seed per setting: the spread is unknown (set `sweep.seeds`)."), "",
             "Best per method (lowest mean perplexity):", "",
             "| method | size | pretrain steps | domain | in-domain tokens | spec. steps | ppl | top-1 | total FLOPs (1 domain) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for method in sorted({r["method"] for r in rows}):
        b = min((r for r in rows if r["method"] == method), key=lambda r: r["perplexity"])
        lines.append(f"| {methods.display(method)[0]} (`{method}`) | {b['size']} | {b['pretrain_steps']} | {b['domain']} | {b['domain_tokens']:,} "
                     f"| {b['specialize_steps']} | {ppl(b)} | {b['accuracy']:.4f} | {total_flops(b):.3g} |")
    for r in rows:
        r["_total"] = total_flops(r)
    lines += ["", "Pareto-optimal on the means (total FLOPs for one domain vs perplexity):", "",
              "| setting | total FLOPs | ppl |", "|---|---|---|"]
    lines += [f"| {r['trial']} | {r['_total']:.3g} | {ppl(r)} |" for r in pareto(rows, "_total")]
    near = near_front(rows, "_total")
    if near:
        lines += ["", "Not separable from the front (no front point that costs no more beats them at 95%):",
                  "", "| setting | total FLOPs | ppl |", "|---|---|---|"]
        lines += [f"| {r['trial']} | {r['_total']:.3g} | {ppl(r)} |" for r in near]
    if saturated:
        lines += ["", f"The generic model's saturation (its macro valid loss over the last doubling of its pretraining; "
                  f"saturated: a change under {SATURATED:.0%}):", "",
                  "| run | steps | loss at half | loss | change | saturated |", "|---|---|---|---|---|---|"]
        for s in saturated:
            half = f"{s['half_loss']:.4f} ({s['half_steps']:,})" if s["half_loss"] is not None else \
                f"not evaluated at {s['half_steps']:,}"
            change = f"{s['change']:+.2%}" if s["change"] is not None else "unknown"
            verdict = {True: "yes", False: "**no**", None: "unknown"}[s["saturated"]]
            lines.append(f"| {s['run']} | {s['steps']:,} | {half} | {s['loss']:.4f} | {change} | {verdict} |")
    lines += list(fitted)
    if plots:
        lines += ["", "Plots: " + ", ".join(f"`{name}`" for name in plots) + "."]
    return "\n".join(lines) + "\n"
