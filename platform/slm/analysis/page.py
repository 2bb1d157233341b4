"""``report.html``: a sweep's report as one offline page that a reader understands without the code.

It holds what ``slm report`` writes beside it, in the order a reader asks: what the numbers are, which
method to build at each measured budget (``slm.analysis.advise`` on the sweep's own budget levels), the
figures (embedded, so the file travels alone), every setting with its 95% interval, and the claims check
(claims.md, rendered). No script, no network: it opens from a mail attachment or a CI artifact.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

from markdown_it import MarkdownIt

from slm import methods
from slm.analysis import ladder
from slm.analysis.advise import advise
from slm.analysis.results import total_flops
from slm.analysis.stats import half_width
from slm.artifacts import atomic_write_text
from slm.records.plan import Plan
from slm.records.table import finite

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 12.5px; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.front td { background: #eef7ee; } tr.near td { background: #f7f7ee; }
.swatch { display: inline-block; width: 0.8em; height: 0.8em; border-radius: 50%; margin-right: 0.35em; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption, .note { color: #555; font-size: 12.5px; }
nav a { margin-right: 1em; }
"""

FIGURES = {  # what each of report.py's plots shows, in the order a reader wants them
    "pretrain_cost.png": "Specialized perplexity against the pretraining cost (the generic part, paid once for "
                         "every domain; SLM-is pays its own pretraining per domain and is placed at that cost).",
    "specialize_cost.png": "Against the cost per domain: specialization, plus SLM-is's domain-specific pretraining.",
    "inference_size.png": "Against the total cost for one domain, a panel per served model size.",
    "domain_tokens.png": "Against the total cost for one domain, a panel per in-domain data size.",
    "fitted_curves.png": "Each method's specialized perplexity against its pretraining FLOPs with the curve "
                         "L = E + A·C^−α fitted through its budgets (dashed beyond them) and its 95% band across "
                         "seeds; dotted lines where two methods' curves cross (summary.md lists them).",
    "pretrain_curves.png": "Each pretraining run's macro valid loss against its steps (its seeds as lines): where "
                           "the generic model saturates, and how SALT's run compares with its baseline's.",
}


def _e(x) -> str:
    return html.escape(str(x))


def _method(name: str) -> str:
    """A method as the plots show it: its colour (matplotlib's names, e.g. ``tab:green``, made CSS), its paper
    name, and its config name."""
    from matplotlib.colors import to_hex

    paper, colour = methods.display(name)
    return (f'<span class="swatch" style="background:{to_hex(colour)}"></span>{_e(paper)}<br>'
            f"<code>{_e(name)}</code>")


def _table(header: list[str], rows: list[list[str]], classes: list[str] | None = None, numeric: set[int] = frozenset()) -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = []
    for i, cells in enumerate(rows):
        cls = f' class="{classes[i]}"' if classes and classes[i] else ""
        body.append(f"<tr{cls}>" + "".join(f'<td class="n">{c}</td>' if j in numeric else f"<td>{c}</td>"
                                          for j, c in enumerate(cells)) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def interval(r: dict) -> str:
    """A setting's mean perplexity with its 95% t interval over its seeds, or its one value."""
    if r["perplexity_se"] is None:
        return f"{r['perplexity']:.2f} (one seed: spread unknown)"
    h = half_width(r["perplexity_se"], r["n"] - 1)
    return f"{r['perplexity']:.2f} [{r['perplexity'] - h:.2f}, {r['perplexity'] + h:.2f}]"


def advice_rows(trials: list[dict], rows: list[dict], families: list[ladder.Family]) -> list[list[str]]:
    """``slm advise`` at every budget the sweep measured: per domain, in-domain data size, served size and
    pretraining budget, the specialization budget unbounded. A pretraining budget is a swept step count at
    the most any method spent on it (methods' FLOPs per step differ a little: each step count is one level).
    ``families``: the table's fitted curves, fitted once for every budget asked."""
    out = []
    generic = [r for r in rows if r["generic_flops"] > 0]  # SLM-is spends its pretraining per domain
    pretrain_levels = sorted({max(r["generic_flops"] for r in generic if r["pretrain_steps"] == steps)
                              for steps in {r["pretrain_steps"] for r in generic}}) or [0.0]
    size_levels = sorted({r["inference_flops_per_token"] for r in rows})
    for domain in sorted({r["domain"] for r in rows}):
        for tokens in sorted({r["domain_tokens"] for r in rows if r["domain"] == domain}):
            for inference in size_levels:
                for pretrain in pretrain_levels:
                    a = advise(trials, pretrain_budget=pretrain, specialization_budget=math.inf,
                               inference_budget=inference, domain_tokens=tokens, domain=domain,
                               families=families)
                    budget = [_e(domain), f"{tokens:,}", f"{inference:.3g}", f"{pretrain:.3g}"]
                    if a["answer"] is None:
                        out.append(budget + ["no measured setting fits", "", "", ""])
                        continue
                    b, m = a["answer"], a["answer"]["margin"]
                    if m is None:
                        margin = "every other fitting method is within noise" if b["tie"] else \
                            "no other method or size fits"
                    elif m["se"] is None:
                        margin = f"{m['difference']:.2f} ahead of {_e(methods.display(m['method'])[0])} (spread unknown)"
                    else:
                        margin = (f"{m['difference']:.2f} [{m['low']:.2f}, {m['high']:.2f}] ahead of "
                                  f"{_e(methods.display(m['method'])[0])} {_e(m['size'])}")
                    if m is not None and b["tie"]:  # the margin is over the best setting outside the tie
                        margin += ", the best outside the tie"
                    verdict = ("tie with " + ", ".join(map(_e, b["tied_with"]))) if b["tie"] else \
                        ("ahead" if m and m["separable"] else "spread unknown" if m and m["separable"] is None else "")
                    out.append(budget + [f"{_method(b['method'])} {_e(b['size'])}", f"{b['perplexity']:.2f}", margin,
                                         verdict])
    return out


def page(name: str, trials: list[dict], rows: list[dict], plan: Plan, out: Path, front: set[str], near: set[str],
         caption: str, missing: list[str], families: list[ladder.Family]) -> Path:
    """Write ``out/report.html`` from the folded settings (``rows``), the figures and claims.md in ``out``."""
    seeds = max(r["n"] for r in rows)
    finished = sum(finite(t["perplexity"]) for t in trials)
    parts = [f"<h1>Sweep report: {_e(name)}</h1>",
             f"<p>{finished} specialized models in {len(rows)} settings, up to {seeds} seed(s) each"
             + (f"; data fingerprint <code>{_e(plan.data.fingerprint)}</code>" if plan.data else "")
             + (f"; combined from {len(plan.parts)} tables" if len(plan.parts) > 1 else "") + ".</p>",
             '<nav><a href="#advice">Advice</a><a href="#figures">Figures</a><a href="#settings">Settings</a>'
             '<a href="#claims">Claims</a></nav>',
             f'<p class="note">{_e(caption)} Every perplexity is a setting\'s mean with the 95% t interval of that mean '
             "over its seeds, [low, high]. Two settings whose difference has a 95% interval that includes zero are a "
             "tie, never ranked: a paired t over the seeds where the seed pairs their data (the same domain, "
             "in-domain data size and specialization budget), Welch's t otherwise.</p>"]
    if missing:
        parts.append(f'<p class="note">{len(missing)} planned trials have no row (their comparisons are inconclusive '
                     f"below): {_e(', '.join(missing[:20]))}{' …' if len(missing) > 20 else ''}</p>")

    parts += ['<h2 id="advice">Which method to build</h2>',
              '<p class="note"><code>slm advise</code> at each budget this sweep measured: the setting of lowest mean '
              "perplexity among those within the inference budget (FLOPs per token of the served model), the "
              "in-domain tokens and the pretraining budget (generic FLOPs), with no limit on the cost per domain — "
              "so SLM-is, whose pretraining is paid per domain (C_generic = 0), fits every pretraining budget here "
              "and its pretraining counts in the per-domain cost, which these rows leave unbounded; the tie (every "
              "method within noise of it), then its margin over the best setting outside the tie, with its 95% "
              "interval. Other budgets: "
              "<code>slm advise --sweep SWEEP --pretrain-budget … --specialization-budget … --inference-budget … "
              "--domain-tokens … --domains N</code>.</p>",
              _table(["domain", "in-domain tokens", "inference budget (FLOPs/token)", "pretraining budget (FLOPs)",
                      "build", "ppl", "margin", "verdict"], advice_rows(trials, rows, families), numeric={1, 2, 3, 5})]

    parts.append('<h2 id="figures">Figures</h2>')
    for png, what in FIGURES.items():
        if (out / png).exists():
            data = base64.b64encode((out / png).read_bytes()).decode()
            parts.append(f'<figure><img alt="{_e(png)}" src="data:image/png;base64,{data}">'
                         f"<figcaption><code>{_e(png)}</code>: {_e(what)}</figcaption></figure>")

    ordered = sorted(rows, key=lambda r: (r["domain"], r["domain_tokens"], total_flops(r)))
    parts += ['<h2 id="settings">Every setting</h2>',
              '<p class="note">Green: on the Pareto front of total cost for one domain against mean perplexity; '
              "yellow: off it, but no front setting that costs no more beats it at 95%.</p>",
              _table(["setting", "method", "size (params)", "pretrain steps", "domain", "in-domain tokens",
                      "spec. steps", "n", "ppl [95% CI]", "ppl before spec.", "top-1", "generic FLOPs",
                      "per-domain FLOPs", "total FLOPs (1 domain)"],
                     [[f"<code>{_e(r['trial'])}</code>", _method(r["method"]), f"{_e(r['size'])} ({r['params'] / 1e6:.2f}M)",
                       str(r["pretrain_steps"]), _e(r["domain"]), f"{r['domain_tokens']:,}", str(r["specialize_steps"]),
                       str(r["n"]), interval(r), f"{r['perplexity_before']:.2f}", f"{r['accuracy']:.4f}",
                       f"{r['generic_flops']:.3g}", f"{r['per_domain_flops']:.3g}", f"{total_flops(r):.3g}"]
                      for r in ordered],
                     ["front" if r["trial"] in front else "near" if r["trial"] in near else "" for r in ordered],
                     numeric={3, 5, 6, 7, 8, 9, 10, 11, 12, 13})]

    claims = out / "claims.md"
    if claims.exists():
        text = claims.read_text().replace("# Claims\n", "", 1)  # the page has its own heading
        parts += ['<h2 id="claims">Claims of the seed papers</h2>',
                  MarkdownIt("commonmark").enable("table").render(text).replace("<h2", "<h3").replace("</h2>", "</h3>")]

    path = out / "report.html"
    atomic_write_text(path, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                      f"<title>{_e(name)}: sweep report</title><style>{STYLE}</style></head>\n<body>\n"
                      + "\n".join(parts) + "\n</body></html>\n")
    return path
