"""SLM-mix: a hard mixture of k_e independent dense experts, one per coarse cluster.

Each example is routed by its coarse cluster id to exactly one expert. A batch holding several
clusters is grouped by expert, so one process trains all experts with one optimizer; the trainer's
sampler can also draw single-expert batches. ``instantiate(e)`` hands out expert e as a plain GPT.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn as nn

from slm.models.gpt import GPT, GPTConfig, LMOutput, LossFn, ModelConfigError, lm_output


def check_expert_ids(expert_ids: torch.Tensor, batch: int, n_experts: int) -> None:
    if expert_ids.shape != (batch,):
        raise ValueError(f"expert_ids must have shape ({batch},), got {tuple(expert_ids.shape)}")
    if expert_ids.numel() and (expert_ids.min() < 0 or expert_ids.max() >= n_experts):
        raise ValueError(f"expert ids must be in [0, {n_experts}), got {expert_ids.unique().tolist()}")


def routed_logits(run_expert: Callable[[int, torch.Tensor], torch.Tensor], idx: torch.Tensor,
                  expert_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Run each expert once on the rows routed to it and put the logits back in batch order."""
    B, T = idx.shape
    logits = None
    for expert in expert_ids.unique().tolist():
        rows = (expert_ids == expert).nonzero(as_tuple=True)[0]
        out = run_expert(expert, idx[rows])
        if logits is None:
            logits = out.new_empty(B, T, vocab_size)
        logits = logits.index_copy(0, rows, out)
    return logits


class MixtureOfExperts(nn.Module):
    def __init__(self, cfg: GPTConfig, n_experts: int):
        super().__init__()
        if n_experts < 1:
            raise ModelConfigError(f"n_experts must be at least 1, got {n_experts}")
        self.config, self.n_experts = cfg, n_experts
        self.experts = nn.ModuleList(GPT(cfg) for _ in range(n_experts))

    def forward(self, idx: torch.Tensor, expert_ids: torch.Tensor, targets: torch.Tensor | None = None,
                objective: LossFn | None = None) -> LMOutput:
        check_expert_ids(expert_ids, idx.shape[0], self.n_experts)
        logits = routed_logits(lambda e, x: self.experts[e](x).logits, idx, expert_ids, self.config.vocab_size)
        return lm_output(logits, targets, objective)

    def instantiate(self, expert: int) -> GPT:
        if not 0 <= expert < self.n_experts:
            raise ValueError(f"expert must be in [0, {self.n_experts}), got {expert}")
        return copy.deepcopy(self.experts[expert])

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
