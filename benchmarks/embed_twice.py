"""Is the embed stage bitwise reproducible? Embed one corpus twice with the same config on fresh local
Rays and compare every shard's windows and vectors bit for bit (issue 16).

    python benchmarks/embed_twice.py CORPUS_DIR [--out benchmarks/results/embed_twice.json]

The tests' settings (32 documents per actor batch, the eager embedder, one actor per CPU): a window's
vector depends on the padding of the batch it is encoded in, so the runs agree to the bit only if every
actor batch holds the same documents — what ``slm.data.execution.reproducible_execution`` is for.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--out")
    args = ap.parse_args()

    import ray

    from slm.data.config import EmbedConfig
    from slm.data.embed import embed_corpus, embedding_files

    outs = [Path(tempfile.mkdtemp()) / f"run{i}" for i in range(2)]
    for out in outs:
        ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        embed_corpus(args.corpus, EmbedConfig(batch_docs=32, compile="never"), out)
        ray.shutdown()
    shards = {}
    for path in embedding_files(outs[0]):
        rel = Path(path).relative_to(outs[0])
        a, b = pq.read_table(path), pq.read_table(next(outs[1].glob(f"{rel.parent}/*.parquet")))
        va, vb = (np.asarray(t.column("embedding").to_pylist(), dtype=np.float32) for t in (a, b))
        shards[str(rel.parent)] = {"windows": a.num_rows, "same_ids": a.column("id").equals(b.column("id")),
                                   "bitwise": bool(np.array_equal(va, vb)),
                                   "max_abs_difference": float(np.abs(va - vb).max()) if va.shape == vb.shape else None}
    result = {"machine": {"cpus": os.cpu_count()}, "corpus": args.corpus, "shards": shards,
              "bitwise": all(s["bitwise"] and s["same_ids"] for s in shards.values())}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
