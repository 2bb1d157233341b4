"""How good a measure is the evaluation sample (issue 28)? Prints JSON.

    python benchmarks/eval_sample.py SWEEP [--domain legal] [--rows 256] [--out FILE]

For specialized models of a finished sweep (every seed of each setting named with --settings, default
the generic and SLM-is settings at the largest pretraining budget and smallest data size), every
sequence of the domain's valid split is scored once. Then, per model: perplexity on the whole split, on
the sweep's evaluation sample (``slm.train.evaluate.sample_rows``: a fixed random ``--rows`` of it) and
on the first ``--rows`` sequences (the measure before issue 28), and the sample's standard error of the
mean loss. Per pair of settings: the difference of their mean losses on the sample, its standard error
from sampling the rows (paired: the same rows for both), against the standard error of that difference
over seeds: the measure's noise is small when the first is small against the second.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "platform"))

from slm.methods import load_model  # noqa: E402
from slm.records.plan import Plan
from slm.train.data import PackedArrays, materialize  # noqa: E402
from slm.train.evaluate import sample_rows  # noqa: E402


@torch.no_grad()
def row_losses(model_path: Path, data: PackedArrays, batch: int = 32) -> np.ndarray:
    """The mean token loss of every valid sequence under one model."""
    model, _ = load_model(model_path)
    model.eval()
    out = []
    for start in range(0, len(data), batch):
        tokens, _ = data.take(np.arange(start, min(start + batch, len(data))))
        tokens = torch.from_numpy(tokens)
        logp = torch.log_softmax(model(tokens[:, :-1]).logits.float(), dim=-1)
        out.append((-logp.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)).double().mean(-1).numpy())
    return np.concatenate(out)


def se_of_mean(x: np.ndarray, population: int) -> float:
    return float(x.std(ddof=1) / math.sqrt(len(x)) * math.sqrt(1 - len(x) / population))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--domain", default="legal")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--settings", nargs="*")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    plan = Plan.from_json(json.loads((args.sweep / "plan.json").read_text()))
    run_dir = args.sweep.parents[1]  # <run dir>/sweeps/<name>
    data = PackedArrays.open(materialize(run_dir / "packed" / "valid" / args.domain))
    grid = [t for t in plan.trials if t.role == "grid" and t.domain == args.domain]
    top, tokens = max(t.pretrain_steps for t in grid), min(t.domain_tokens for t in grid)
    settings = args.settings or sorted({t.setting for t in grid if t.pretrain_steps == top
                                        and t.domain_tokens == tokens and t.method in ("generic", "importance")})
    sample, first = sample_rows(len(data), args.rows), np.arange(min(args.rows, len(data)))
    losses: dict[str, dict] = {}
    for setting in settings:
        for t in (t for t in plan.trials if t.setting == setting):
            model = args.sweep / "specialized" / args.domain / t.name / "model.safetensors"
            losses[t.name] = {"setting": setting, "seed": t.seed, "rows": row_losses(model, data)}
    models = {name: {"setting": m["setting"], "seed": m["seed"],
                     "ppl_whole_split": math.exp(m["rows"].mean()), "ppl_sample": math.exp(m["rows"][sample].mean()),
                     "ppl_first_rows": math.exp(m["rows"][first].mean()),
                     "sample_loss_se": se_of_mean(m["rows"][sample], len(data))} for name, m in losses.items()}
    pairs = []
    for i, a in enumerate(settings):
        for b in settings[i + 1:]:
            seeds = sorted({m["seed"] for m in losses.values() if m["setting"] == a}
                           & {m["seed"] for m in losses.values() if m["setting"] == b})
            by = {(m["setting"], m["seed"]): m["rows"] for m in losses.values()}
            per_seed = [float(by[(b, s)][sample].mean() - by[(a, s)][sample].mean()) for s in seeds]
            sampling = [se_of_mean(by[(b, s)][sample] - by[(a, s)][sample], len(data)) for s in seeds]
            pairs.append({"a": a, "b": b, "seeds": seeds, "loss_difference_per_seed": per_seed,
                          "seeds_se_of_mean_difference": statistics.stdev(per_seed) / math.sqrt(len(per_seed))
                          if len(per_seed) > 1 else None,
                          "sampling_se_of_difference_per_seed": sampling})
    result = {"sweep": str(args.sweep), "domain": args.domain, "valid_rows": len(data), "sample_rows": len(sample),
              "models": models, "pairs": pairs}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
