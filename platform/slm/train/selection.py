"""SALT-DS (SALT's data selection): the KD phase trains on the "hard but learnable" sequences the teacher
picks — every training sequence scored by the median loss of its learnable tokens (a token is learnable
when its target is in the teacher's top-k), the top share kept."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from slm.train.budget import dense_flops_per_token
from slm.train.config import SelectionConfig
from slm.train.data import PackedArrays
from slm.train.module import TrainModule
from slm.train.objectives import learnable_difficulty


def select_hard_but_learnable(module: TrainModule, data: PackedArrays, selection: SelectionConfig, rank: int,
                              world: int) -> tuple[np.ndarray, float]:
    """Score every row of ``data`` with the module's teacher (ranks split the rows, then gather) and keep
    the top ``selection.keep`` share. Returns the kept rows, sorted, and the scoring's FLOPs."""
    rows = np.arange(len(data))
    mine = rows[rank::world]
    scores = np.empty(len(mine), dtype=np.float64)
    with torch.no_grad():
        for start in range(0, len(mine), 32):
            tokens, _ = data.take(mine[start:start + 32])
            tokens = module.batch(tokens)
            logits = module.teacher_logits(tokens[:, :-1])
            scores[start:start + len(tokens)] = learnable_difficulty(logits, tokens[:, 1:], selection.topk).cpu()
    all_scores = np.empty(len(rows))
    if world > 1:
        gathered = [None] * world
        dist.all_gather_object(gathered, scores)
        for r, part in enumerate(gathered):
            all_scores[r::world] = part
    else:
        all_scores[:] = scores
    keep = max(1, int(round(selection.keep * len(rows))))
    chosen = np.sort(np.argsort(-all_scores, kind="stable")[:keep])
    flops = float(dense_flops_per_token(module.teacher.config, training=False) * len(rows) * data.seq_len)
    return chosen, flops
