"""Budgets and costs: when a run stops, and what it cost.

A budget is a limit in steps, tokens, FLOPs or device-seconds (the first one reached stops the run).
Costs are always reported in both FLOPs and device-seconds (``docs/training.md``):

- training FLOPs per token are the dense model's (PaLM's 6N + 12·L·d·T) — what every expert and every
  instantiated soup runs — plus each method's own per-step work (``Method.step_overhead_flops``: the
  soup's merge Θ(h) = S + Σ α_j E_j and its backward, 6·n·|mixed| per step; SLM-pn's expert weights
  W = (E[i]M)T, 6·h·|W| per step);
  a teacher adds its forward (2N per token) while KD is on;
- device-seconds are the wall-clock seconds of the training loop times the number of devices (workers).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from slm.models.gpt import GPT
from slm.train.config import BudgetConfig


@dataclass
class TrainState:
    """What the loop has done so far; checkpointed, so that budgets and costs survive a resume."""

    step: int = 0
    tokens: int = 0
    flops: float = 0.0
    device_seconds: float = 0.0

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)


def exhausted(budget: BudgetConfig, p: TrainState) -> str | None:
    """The name of the first budget ``p`` has reached, or None."""
    for name in ("steps", "tokens", "flops", "device_seconds"):
        limit = getattr(budget, name)
        if limit and getattr(p, {"steps": "step"}.get(name, name)) >= limit:
            return name
    return None


def spent(budget: BudgetConfig, p: TrainState) -> tuple[float, str]:
    """How much of the budget ``p`` has used (0..1, of the limit nearest to being reached) and the
    progress in that limit's unit ("1200/4000 steps", "3.1e+13/5e+13 FLOPs")."""
    best = (0.0, "")
    for name, unit in (("steps", "steps"), ("tokens", "tokens"), ("flops", "FLOPs"), ("device_seconds", "device-s")):
        limit = getattr(budget, name)
        if not limit:
            continue
        done = getattr(p, {"steps": "step"}.get(name, name))
        fraction = min(1.0, done / limit)
        if fraction >= best[0]:
            shown = f"{done}/{limit}" if name in ("steps", "tokens") else f"{done:.3g}/{limit:.3g}"
            best = (fraction, f"{shown} {unit}")
    return best


def budget_in_steps(budget: BudgetConfig, tokens_per_step: int, flops_per_step: float) -> int | None:
    """A run's budget in steps (``budget_steps`` from here to the schedule: the one name a pretraining budget has
    inside training, computed once by the train module and carried to the strategy, the schedule and the compile
    decision): the tightest of its limits that converts to steps (a device-seconds budget cannot: alone, it gets
    a constant learning rate after the warm-up, and None)."""
    candidates = []
    if budget.steps:
        candidates.append(budget.steps)
    if budget.tokens:
        candidates.append(math.ceil(budget.tokens / tokens_per_step))
    if budget.flops:
        candidates.append(math.ceil(budget.flops / flops_per_step))
    return min(candidates) if candidates else None


def dense_flops_per_token(gpt_cfg, training: bool = True) -> int:
    with torch.device("meta"):
        return GPT(gpt_cfg).flops_per_token(training=training)
