"""Each method's own learning rate from a tuning sweep's tables, and the rule's decision (issue 63).

    python benchmarks/lr_optimum.py benchmarks/results/lr_report [--budget 1000] [--out DIR]

Reads the combined tables (``slm report --tables … --out``): ``curves.parquet`` for the pretraining rate (each
run's fully trained proxy loss at ``--budget`` steps, by method, size, seed and ``pretrain.train.optim.lr``) and,
where the sweep crossed ``specialize.train.optim.lr``, ``results.parquet`` for the specialization rate. Writes
``optima.md`` and ``optima.json`` (every number the table shows) to ``--out`` (default: the folder read) and
prints the Markdown. The rule and the fit: slm.analysis.tuning; the protocol: docs/results.md.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from slm.analysis import tuning
from slm.artifacts import atomic_write_json, atomic_write_text
from slm.records.table import read_curves, read_table

PRETRAIN_AXIS, SPECIALIZE_AXIS = "pretrain.train.optim.lr", "specialize.train.optim.lr"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", type=Path)
    parser.add_argument("--budget", type=int, action="append", help="proxy budgets to read (default: every one)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    out = args.out or args.tables
    plan = json.loads((args.tables / "plan.json").read_text())
    runs = {r["name"]: r for r in plan["runs"] if r.get("axes")}
    curves = read_curves(args.tables)
    budgets = args.budget or sorted({r["steps"] for r in runs.values()} | {b for r in runs.values() for b in r["branches"]})
    found: dict[str, list[tuning.Optimum]] = {}
    text = []
    for budget in budgets:
        losses = tuning.proxy_losses(curves, runs, PRETRAIN_AXIS, budget)
        if losses:
            found[f"pretrain@{budget}"] = tuning.optima(losses)
            text.append(tuning.markdown(found[f"pretrain@{budget}"],
                                        f"## Pretraining rate, fully trained proxy at {budget:,} steps"))
    rows = read_table(args.tables) if (args.tables / "results.parquet").exists() else []  # pretraining alone
    if rows and SPECIALIZE_AXIS in rows[0]:
        losses = tuning.specialized_losses(rows, SPECIALIZE_AXIS)
        found["specialize"] = tuning.optima(losses, tuning.SPECIALIZE_REFERENCE_RATE)
        text.append(tuning.markdown(found["specialize"], "## Specialization rate (log perplexity, mean over domains)"))
    markdown = "# Each method's own learning rate\n\n" + "\n".join(text)
    atomic_write_text(out / "optima.md", markdown)
    atomic_write_json(out / "optima.json", {k: [{**asdict(o), "rerun": o.rerun, "reason": o.reason()} for o in v]
                                            for k, v in found.items()})
    print(markdown)


if __name__ == "__main__":
    main()
