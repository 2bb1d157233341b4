"""SLM-mix (Plan-Early): a hard mixture of dense experts, one per coarse cluster.

Each step draws one coarse cluster (∝ its size) and trains its expert on sequences from it; a domain
is served by the expert of its most frequent cluster. :class:`ExpertMethod` is what SLM-mix and SLM-pn
share: sequences routed to an expert by their cluster id, the cluster sampler, an expert per domain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from slm.config import ConfigError
from slm.methods.base import Architecture, Method
from slm.methods.registry import register
from slm.methods.samplers import ClusterSampler
from slm.models.gpt import GPT, GPTConfig, LMOutput, LossFn
from slm.models.mixture import MixtureOfExperts


@dataclass
class MixtureSettings:
    """``pretrain.model.mixture``: SLM-mix's experts."""

    n_experts: int = 0  # experts; 0 = one per coarse cluster (cluster.k), as in Plan-Early

    def validate(self, prefix: str = "") -> None:
        if self.n_experts < 0:
            raise ConfigError(f"config key '{prefix}n_experts': must be ≥ 0, got {self.n_experts}")


@dataclass(frozen=True)
class ExpertsArchitecture(Architecture):
    n_experts: int


class ExpertMethod(Method):
    """Experts indexed by coarse cluster: each sequence goes to its cluster's expert. Its settings have
    ``n_experts`` (0: one per coarse cluster)."""

    dense = False
    clustered = True
    has_experts = True

    Record = ExpertsArchitecture

    def architecture(self, gpt: GPTConfig, n_clusters: int) -> ExpertsArchitecture:
        return ExpertsArchitecture(self.name, gpt, self.settings.n_experts or n_clusters)

    def sampler(self, arch: ExpertsArchitecture, coarse: np.ndarray, rows: np.ndarray, seed: int):
        return ClusterSampler(coarse, arch.n_experts, seed)

    def forward(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor | None, coarse: torch.Tensor,
                context: Any, objective: LossFn | None = None) -> LMOutput:
        return model(inputs, coarse, targets, objective)

    @torch.no_grad()
    def instantiate(self, model: nn.Module, arch: ExpertsArchitecture, coarse_histogram: list[float],
                    expert: int | None = None) -> tuple[GPT, dict[str, Any]]:
        """The expert of the domain's most frequent coarse cluster, or ``expert`` when given."""
        if len(coarse_histogram) != arch.n_experts:
            raise ConfigError(f"the domain histogram has {len(coarse_histogram)} coarse clusters but the "
                              f"{self.name} model has {arch.n_experts} experts: pretrain and histogram "
                              f"used different cluster.k")
        most_frequent = int(torch.tensor(coarse_histogram, dtype=torch.float32).argmax())
        chosen = most_frequent if expert is None else expert
        return model.instantiate(chosen), {"expert": chosen, "most_frequent_expert": most_frequent}


@register
class Mixture(ExpertMethod):
    name = "mixture"
    paper_name = "SLM-mix"
    color = "tab:blue"
    swept_by_default = True
    Settings = MixtureSettings
    # A step trains one expert: the others get no gradient.
    find_unused_parameters = True

    def build(self, arch: ExpertsArchitecture) -> nn.Module:
        return MixtureOfExperts(arch.gpt, arch.n_experts)

    def compile_units(self, model: nn.Module) -> list[nn.Module]:
        # Every expert; the routing by cluster id (data-dependent Python control flow) stays eager.
        return list(model.experts)
