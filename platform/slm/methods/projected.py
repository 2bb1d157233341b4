"""SLM-pn (Plan-Early): a projected network, a linear hypernetwork over the feed-forward weights
(``slm.models.projected``): each expert's FFN weights are projected from a shared bank, attention and
embeddings are shared. Trained and served as SLM-mix is: one cluster's expert per step, a domain's most
frequent cluster's expert instantiated as a dense GPT."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from slm.config import ConfigError
from slm.methods.mixture import ExpertMethod, ExpertsArchitecture
from slm.methods.registry import register
from slm.models.gpt import GPTConfig
from slm.models.projected import ProjectedNetwork


@dataclass
class ProjectedSettings:
    """``pretrain.model.projected``: SLM-pn's experts and the bank they are projected from."""

    n_experts: int = 0  # experts; 0 = one per coarse cluster (cluster.k)
    expert_dim: int = 4  # m, the size of each expert's embedding E[i]
    bank_size: int = 8  # h, the number of weight matrices in the bank T

    def validate(self, prefix: str = "") -> None:
        if self.n_experts < 0:
            raise ConfigError(f"config key '{prefix}n_experts': must be ≥ 0, got {self.n_experts}")
        for name in ("expert_dim", "bank_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"config key '{prefix}{name}': must be at least 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class ProjectedArchitecture(ExpertsArchitecture):
    expert_dim: int
    bank_size: int


@register
class Projected(ExpertMethod):
    name = "projected"
    paper_name = "SLM-pn"
    color = "tab:purple"
    swept_by_default = True
    Settings = ProjectedSettings
    Record = ProjectedArchitecture

    def architecture(self, gpt: GPTConfig, n_clusters: int) -> ProjectedArchitecture:
        settings = self.settings
        return ProjectedArchitecture(self.name, gpt, settings.n_experts or n_clusters, settings.expert_dim,
                                     settings.bank_size)

    def build(self, arch: ProjectedArchitecture) -> nn.Module:
        return ProjectedNetwork(arch.gpt, arch.n_experts, arch.expert_dim, arch.bank_size)

    def compile_units(self, model: nn.Module) -> list[nn.Module]:
        # The shared network; the projection of the step's expert (routing by cluster id) stays eager.
        return [model.shared]

    def step_overhead_flops(self, model: nn.Module, arch: ProjectedArchitecture) -> float:
        return 6.0 * sum(p.numel() for p in model.bank.values())  # h · Σ|W|
