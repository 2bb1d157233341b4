"""The pack stage's peak memory and time on one set (issue 46: 13.5 GiB of 24 for one domain's CRISP subset
and the generic set). Run it on the same inputs with two versions of the code side by side (PYTHONPATH
naming each version's ``platform/``) and compare; prints JSON.

    PYTHONPATH=/path/to/old/platform python benchmarks/pack_memory.py --windows RUN/resampled/legal/crisp/data \
        --tokenizer RUN/tokenizer/tokenizer.json [--domain D]

The peak is ``slm.runtime.PeakMemory`` over this process and the embedded Ray it starts (every worker and the
object store): the whole footprint of the stage on the machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--windows", required=True, help="what the stage packs: assignments or a resampled set")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--domain", help="only this domain's windows (the generic set from the assignments: generic)")
    ap.add_argument("--seq-len", type=int, default=256)
    args = ap.parse_args()
    import ray

    import slm
    from slm.data.pack import pack
    from slm.runtime import PeakMemory

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as tmp, PeakMemory(interval_s=0.5) as memory:
        began = time.perf_counter()
        manifest = pack(args.windows, args.tokenizer, args.seq_len, Path(tmp) / "packed", domain=args.domain)
        seconds = time.perf_counter() - began
    code = Path(slm.__file__).resolve().parents[2]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=code, capture_output=True, text=True).stdout.strip()
    print(json.dumps({"code": str(code), "commit": commit, "windows": args.windows, "domain": args.domain,
                      "sequences": manifest["sequences"], "seconds": round(seconds, 1),
                      "peak_gib": memory.peak_gib}))


if __name__ == "__main__":
    main()
