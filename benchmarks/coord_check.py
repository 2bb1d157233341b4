"""µP's coordinate check (issue 63): how far each layer's activations move in the first five AdamW steps at one
rate, across widths 64, 128 and 256 at depths 1 and 2, under each parametrization. JSON on stdout.

    python benchmarks/coord_check.py [--out benchmarks/results/numerics/coord_check.json]

The same measurement tests/models/test_parametrization.py asserts on: flat across width under µP, growing under
the standard parametrization."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from slm.artifacts import atomic_write_json

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.models.test_parametrization import WIDTHS, movement  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = {f"{p} depth {d}": {str(w): {k: round(v, 4) for k, v in movement(w, d, p).items()} for w in WIDTHS}
              for p in ("sp", "mup") for d in (1, 2)}
    if args.out:
        atomic_write_json(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
