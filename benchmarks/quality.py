"""Resampling quality per bundled domain (issue 3), printing one JSON object.

    python benchmarks/quality.py --run runs/quickstart --corpus data/corpus [--tokens 200000] [--out FILE]

For every specialist domain in a run's cluster assignments: resample the generic windows with CRISP
and with the uniform control at the same token budget, then report
- KL(resampled leaf histogram ‖ domain histogram) for both, and
- the cross-entropy (nats/token) on the domain's **valid** split (never embedded, never resampled) of a
  unigram model fitted on each subset: the embedder's WordPiece tokens, add-one smoothing over its
  vocabulary. Lower is better; the same-size uniform subset is the control.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def unigram_ce(train_texts: list[str], test_texts: list[str], tok) -> float:
    vocab = tok.get_vocab_size()
    counts = Counter()
    for e in tok.encode_batch(train_texts, add_special_tokens=False):
        counts.update(e.ids)
    total = sum(counts.values())
    logp_cache: dict[int, float] = {}
    nll, n = 0.0, 0
    for e in tok.encode_batch(test_texts, add_special_tokens=False):
        for i in e.ids:
            if i not in logp_cache:
                logp_cache[i] = np.log((counts.get(i, 0) + 1) / (total + vocab))
            nll -= logp_cache[i]
            n += 1
    return nll / max(n, 1)


def main() -> None:
    import ray

    from slm.data import tokenizers
    from slm.data.histogram import domain_histograms
    from slm.data.resample import resample

    ap = argparse.ArgumentParser()
    ap.add_argument("--run", default="runs/quickstart")
    ap.add_argument("--corpus", default="data/corpus")
    ap.add_argument("--tokens", type=int, default=200_000)
    ap.add_argument("--out")
    args = ap.parse_args()
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    clusters = Path(args.run) / "clusters"
    hist = domain_histograms(clusters, 0.5)
    tok = tokenizers.load(tokenizers.EMBEDDER)
    tmp = Path(tempfile.mkdtemp(prefix="quality-"))
    rows = []
    for domain in sorted(hist["domains"]):
        valid_files = sorted((Path(args.corpus) / "domains" / domain / "valid").glob("*.parquet"))
        valid = pq.read_table(valid_files, columns=["text"]).column("text").to_pylist()
        row = {"domain": domain, "domain_windows": hist["domains"][domain]["windows"],
               "entropy": round(hist["domains"][domain]["entropy"], 3)}
        for method in ("crisp", "uniform"):
            m = resample(clusters, hist, domain, args.tokens, method, tmp / domain / method)
            texts = pq.read_table(tmp / domain / method / "data", columns=["text"]).column("text").to_pylist()
            row[f"{method}_tokens"] = m["tokens_drawn"]
            row[f"kl_{method}"] = round(m["kl_resampled_to_domain"], 4)
            row[f"unigram_ce_{method}"] = round(unigram_ce(texts, valid, tok), 4)
        rows.append(row)
    shutil.rmtree(tmp, ignore_errors=True)
    result = {"run": args.run, "tokens": args.tokens, "alpha": 0.5, "leaves": hist["leaves"], "domains": rows}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
