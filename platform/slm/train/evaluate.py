"""Evaluation: per domain, held-out perplexity (exp of the mean token cross-entropy) and top-1
next-token accuracy on the domain's valid split (``packed/valid/<domain>``, never trained on); the
macro average weighs every domain equally. Ranks split the sequences and sum their counts."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.distributed as dist

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
        rows = np.arange(len(data))
        if max_tokens:
            rows = rows[: max(1, max_tokens // data.seq_len)]
        mine = rows[rank::world]
        sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, tokens
        for start in range(0, len(mine), batch_size):
            tokens, _ = data.take(mine[start:start + batch_size])
            tokens = torch.from_numpy(tokens).to(device)
            logits = forward(tokens[:, :-1]).float()  # the softmax in float32 whatever the precision
            targets = tokens[:, 1:]
            logp = torch.log_softmax(logits, dim=-1)
            sums[0] += -logp.gather(-1, targets.unsqueeze(-1)).sum().double()
            sums[1] += (logits.argmax(-1) == targets).sum().double()
            sums[2] += targets.numel()
        if world > 1 and dist.is_initialized():
            dist.all_reduce(sums)
        loss = float(sums[0] / sums[2])
        out[domain] = {"loss": loss, "perplexity": math.exp(loss), "accuracy": float(sums[1] / sums[2]),
                       "tokens": int(sums[2])}
    if out:
        out["macro"] = {k: float(np.mean([v[k] for v in out.values()])) for k in ("loss", "perplexity", "accuracy")}
    return out
