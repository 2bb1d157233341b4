"""Two sweeps' results tables compared exactly: every column but the clocks' (device-seconds differ from
run to run by nature). Prints JSON: whether they are identical, the columns that differ, the largest
relative perplexity difference and each trial's perplexity in both.

    python benchmarks/compare_tables.py runs/a/sweeps/quickstart /tmp/fresh/runs/quickstart/sweeps/quickstart
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pyarrow.parquet as pq


def table(sweep: Path) -> dict[str, dict]:
    rows = pq.read_table(sweep / "results.parquet").to_pylist()
    return {r["trial"]: {k: v for k, v in r.items() if "device_seconds" not in k} for r in rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("first", type=Path)
    p.add_argument("second", type=Path)
    args = p.parse_args()
    a, b = table(args.first), table(args.second)
    if set(a) != set(b):
        raise SystemExit(f"the two sweeps ran different trials: {sorted(set(a) ^ set(b))}")
    differing = sorted({k for t in a for k in a[t] if a[t][k] != b[t][k]})
    print(json.dumps({
        "first": str(args.first), "second": str(args.second), "trials": len(a),
        "identical_tables": not differing, "columns_differing": differing,
        "max_rel_perplexity_difference": max(abs(b[t]["perplexity"] / a[t]["perplexity"] - 1) for t in a),
        "perplexity": {t: [a[t]["perplexity"], b[t]["perplexity"]] for t in sorted(a)},
    }, indent=2))


if __name__ == "__main__":
    main()
