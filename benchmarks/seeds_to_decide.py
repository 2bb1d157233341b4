"""The seeds each undecided comparison of a study would need, from its own measured difference and seed noise.

For every inconclusive comparison of a report's ``claims.json``: the seed count at which its measured difference,
taken as the truth with its measured seed-to-seed spread, is decided with 80% power
(`slm.analysis.power.seeds_to_decide`). `slm sweep SPEC --dry-run --noise-from TABLE` answers the design question
(power at an assumed 5% or 10% effect); this answers "how many seeds would decide what we measured".

    python benchmarks/seeds_to_decide.py benchmarks/results/study2_report/report/claims.json --seeds 5
"""
import argparse
import json
from pathlib import Path

from slm.analysis.claims import Comparison
from slm.analysis.power import MAX_SEEDS, TARGET, comparison_noise, seeds_to_decide


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
