"""Evaluation: per domain, held-out perplexity (exp of the mean token cross-entropy) and top-1
next-token accuracy on the domain's valid split (``packed/valid/<domain>``, never trained on); the
macro average weighs every domain equally. Ranks split the sequences and sum their counts.

With ``max_tokens`` the measure is a fixed random sample of the split's sequences (``sample_rows``: the
same rows for every model, method and seed, so that comparisons are paired), never its first rows:
packing writes the split one cluster after another, so its first rows are a few clusters' documents
(issue 28 found a model at 303 ppl on them and 481 on the whole split). Each domain's result carries
``loss_se``, the standard error of its mean loss from sampling the rows (with the finite-population
correction: 0 on the whole split), so that the measure's own noise can be held against the seeds'."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.distributed as dist

from slm.models.gpt import token_logprobs
from slm.train.data import PackedArrays


@torch.no_grad()
def evaluate(forward_for, valid: dict[str, PackedArrays], max_tokens: int, batch_size: int,
             device: torch.device | None = None, rank: int = 0, world: int = 1) -> dict:
    """``forward_for(domain)`` gives the ``inputs -> logits`` function of the model that domain is served
    by (its instantiated expert or soup), run on ``device``; returns per-domain and macro metrics."""
    device = device or torch.device("cpu")
    out = {}
    for domain, data in sorted(valid.items()):
        forward = forward_for(domain)
        rows = sample_rows(len(data), max(1, max_tokens // data.seq_len) if max_tokens else len(data))
        mine = rows[rank::world]
        # loss sum, correct, tokens; over rows: Σ mean loss, Σ (mean loss)², rows
        sums = torch.zeros(6, dtype=torch.float64, device=device)
        for start in range(0, len(mine), batch_size):
            tokens, _ = data.take(mine[start:start + batch_size])
            tokens = torch.from_numpy(tokens).to(device)
            logits = forward(tokens[:, :-1]).float()  # the softmax in float32 whatever the precision
            targets = tokens[:, 1:]
            logp = token_logprobs(logits)  # the objective's log-probabilities (slm.models.gpt)
            row_loss = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1).double().sum(-1)
            sums[0] += row_loss.sum()
            sums[1] += (logits.argmax(-1) == targets).sum().double()
            sums[2] += targets.numel()
            row_mean = row_loss / targets.shape[1]
            sums[3] += row_mean.sum()
            sums[4] += (row_mean ** 2).sum()
            sums[5] += len(row_mean)
        if world > 1 and dist.is_initialized():
            dist.all_reduce(sums)
        loss = float(sums[0] / sums[2])
        out[domain] = {"loss": loss, "perplexity": math.exp(loss), "accuracy": float(sums[1] / sums[2]),
                       "tokens": int(sums[2]), "rows": int(sums[5]),
                       "loss_se": sample_se(float(sums[3]), float(sums[4]), int(sums[5]), len(data))}
    if out:
        out["macro"] = {k: float(np.mean([v[k] for v in out.values()])) for k in ("loss", "perplexity", "accuracy")}
    return out


EVAL_SAMPLE_SEED = 0  # fixed, not the training seed: every model is measured on the same rows


def sample_rows(total: int, n: int) -> np.ndarray:
    """``n`` of ``total`` rows drawn without replacement by a fixed seed, in ascending order (memory-map
    reads); all of them when ``n ≥ total``."""
    if n >= total:
        return np.arange(total)
    return np.sort(np.random.default_rng(EVAL_SAMPLE_SEED).choice(total, size=n, replace=False))


def sample_se(total: float, squares: float, n: int, population: int) -> float:
    """The standard error of a mean over ``n`` rows drawn from ``population`` without replacement."""
    if n < 2:
        return math.nan
    variance = max(0.0, (squares - total * total / n) / (n - 1))
    return math.sqrt(variance / n * (1 - n / population))
