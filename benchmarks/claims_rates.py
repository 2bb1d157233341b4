"""Error rates and power of the claims check's tests (issue 28), by simulation; prints JSON.

    python benchmarks/claims_rates.py [--draws 20000] [--out benchmarks/results/claims_rates.json]

Per comparison, with normal per-seed values of standard deviation 1 (for a paired comparison: the
per-seed *difference* has standard deviation 1): how often each rule calls a true zero difference
separable (the old ``|d| ≥ 2·se`` rule, Welch's t, the paired t), how often "lower" holds at a true
effect of k standard deviations (power) at 3 and 5 seeds, and how often "tie" within a margin holds
when the truth is inside or outside it. Per claim: the chance of a false "does not hold" over 12 "lower"
comparisons of true zero difference, when any separable one the wrong way refutes (the old rule) and
under Holm.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "platform"))

from slm.analysis import stats  # noqa: E402
from slm.analysis.claims import bounds_p  # noqa: E402


def rate(events: list[bool]) -> float:
    return round(float(np.mean(events)), 4)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=20000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = args.draws
    out: dict = {"draws": n, "alpha": stats.ALPHA}

    null = {"old 2·se rule (3 seeds)": [], "Welch t (3 seeds)": [], "paired t (3 seeds)": []}
    for _ in range(n):
        a, b = list(rng.normal(size=3)), list(rng.normal(size=3))
        d = stats.welch(a, b)
        null["old 2·se rule (3 seeds)"].append(abs(d.estimate) >= 2 * d.se)
        null["Welch t (3 seeds)"].append(stats.separable(d))
        null["paired t (3 seeds)"].append(stats.separable(stats.paired(a, b)))
    out["separable_under_the_null"] = {k: rate(v) for k, v in null.items()}

    power = {}
    for seeds in (3, 5):
        for effect in (1, 2, 3, 4, 6):
            holds = []
            for _ in range(n // 4):
                diffs = rng.normal(effect, 1.0, size=seeds)
                d = stats.paired([0.0] * seeds, list(diffs))
                holds.append(bounds_p("lower", d, 0.0)[0] < stats.ALPHA)
            power[f"paired, {seeds} seeds, true difference {effect} sd"] = rate(holds)
    out["lower_holds_power"] = power

    tie = {}
    for seeds in (3, 5):
        for truth, label in ((0.0, "truth 0"), (0.5, "truth half the margin"), (1.0, "truth at the margin"),
                             (1.5, "truth 1.5× the margin")):
            for sd in (0.25, 0.5):
                holds, refutes = [], []
                for _ in range(n // 8):
                    diffs = rng.normal(truth, sd, size=seeds)
                    d = stats.paired([0.0] * seeds, list(diffs))
                    p_hold, p_refute = bounds_p("tie", d, 1.0)
                    holds.append(p_hold < stats.ALPHA)
                    refutes.append(p_refute < stats.ALPHA)
                tie[f"{seeds} seeds, {label}, sd {sd}× the margin"] = {"holds": rate(holds), "does not hold": rate(refutes)}
    out["tie_within_margin"] = tie

    family_old, family_holm = [], []
    for _ in range(n // 4):
        ds = [stats.welch(list(rng.normal(size=3)), list(rng.normal(size=3))) for _ in range(12)]
        # the old rule: a "lower" comparison refuted when b − a ≤ −2·se
        family_old.append(any(d.estimate <= -2 * d.se for d in ds))
        family_holm.append(min(stats.holm([d.p_below(0.0) for d in ds])) < stats.ALPHA)
    out["claim_of_12_true_null_comparisons_refuted"] = {"any separable (old)": rate(family_old),
                                                        "Holm on the refutations": rate(family_holm)}
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
