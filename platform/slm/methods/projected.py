"""SLM-pn (Plan-Early): a projected network, a linear hypernetwork over the feed-forward weights
(``slm.models.projected``): each expert's FFN weights are projected from a shared bank, attention and
embeddings are shared. Trained and served as SLM-mix is: one cluster's expert per step, a domain's most
frequent cluster's expert instantiated as a dense GPT."""

from __future__ import annotations

from typing import Any

import torch.nn as nn

from slm.methods.mixture import ExpertMethod
from slm.methods.registry import register
from slm.models.config import ModelConfig
from slm.models.gpt import GPTConfig
from slm.models.projected import ProjectedNetwork


@register
class Projected(ExpertMethod):
    name = "projected"
    paper_name = "SLM-pn"
    color = "tab:purple"

    def architecture(self, gpt: GPTConfig, model: ModelConfig, n_clusters: int) -> dict[str, Any]:
        return {**super().architecture(gpt, model, n_clusters), "expert_dim": model.expert_dim,
                "bank_size": model.bank_size}

    def build(self, arch: dict[str, Any]) -> nn.Module:
        return ProjectedNetwork(GPTConfig(**arch["gpt"]), arch["n_experts"], arch["expert_dim"], arch["bank_size"])

    def compile_units(self, model: nn.Module) -> list[nn.Module]:
        # The shared network; the projection of the step's expert (routing by cluster id) stays eager.
        return [model.shared]

    def step_overhead_flops(self, model: nn.Module, arch: dict[str, Any]) -> float:
        return 6.0 * sum(p.numel() for p in model.bank.values())  # h · Σ|W|
