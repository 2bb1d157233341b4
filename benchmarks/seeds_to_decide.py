"""The seeds each undecided comparison of a study would need, from its own measured difference and seed noise.

For every inconclusive comparison of a report's ``claims.json``: the seed count at which its measured difference,
taken as the truth with its measured seed-to-seed spread, is decided with 80% power — held at 95% (the claims
check's rule for a comparison to hold), or refuted past a Bonferroni bound on Holm's adjustment over its claim's
tested comparisons. A t approximation (the Welch comparisons' degrees of freedom are taken as n − 1).
`slm sweep SPEC --dry-run --noise-from TABLE` answers the design question (power at an assumed 5% or 10%
effect); this answers "how many seeds would decide what we measured".

    python benchmarks/seeds_to_decide.py benchmarks/results/study2_report/report/claims.json --seeds 5
"""
import argparse
import json
import math
from pathlib import Path

from slm.analysis.claims import Comparison
from slm.analysis.power import TARGET, comparison_noise
from slm.analysis.stats import ALPHA, half_width

MAX_SEEDS = 1000


def t_quantile(df: float, probability: float) -> float:
    """The t distribution's ``probability`` quantile (half the two-sided interval of level 2p − 1, at se 1)."""
    return half_width(1.0, df, level=2 * probability - 1)


def seeds_to_decide(c: Comparison, noise: float, tested: int) -> tuple[str, int | None]:
    """("holds" | "refuted", the seeds for TARGET power, or None beyond MAX_SEEDS), ``noise`` being a seed's
    difference's standard deviation relative to b's mean (`slm.analysis.power.comparison_noise`)."""
    reference = {"lower": 0.0, "not higher": -c.bound, "not lower": c.bound}[c.expected]
    delta = c.difference - reference
    in_favour = delta > 0 if c.expected in ("lower", "not higher") else delta < 0
    alpha = ALPHA if in_favour else ALPHA / tested
    spread = noise * abs(c.b_mean)
    needed = next((n for n in range(2, MAX_SEEDS + 1)
                   if abs(delta) / (spread / math.sqrt(n)) >= t_quantile(n - 1, 1 - alpha / 2) + t_quantile(n - 1, TARGET)),
                  None)
    return ("holds" if in_favour else "refuted"), needed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("claims", type=Path, help="a report's claims.json")
    parser.add_argument("--seeds", type=int, required=True, help="the seeds each comparison was measured at")
    args = parser.parse_args()
    for claim in json.loads(args.claims.read_text()):
        tested = [c for c in (Comparison(**d) for d in claim["comparisons"]) if c.low is not None]
        for c in tested:
            if c.verdict != "inconclusive":
                continue
            noise = comparison_noise(c, args.seeds)
            outcome, needed = seeds_to_decide(c, noise, len(tested))
            print(f"{claim['id']}, {c.part}: b − a {c.difference:+.3f} ({c.difference / c.b_mean:+.1%} of b), "
                  f"seed noise of the difference {noise:.1%} of b: "
                  f"{outcome} with {TARGET:.0%} power at {needed if needed else f'> {MAX_SEEDS}'} seeds")


if __name__ == "__main__":
    main()
