"""Soup-of-Experts (Ablin et al.): Θ(h) = S + Σ_j α_j(h)·E_j, trained with h drawn from a prior over
the coarse clusters and the batch drawn from Σ_i h_i D_i; a domain is served by Θ(its histogram),
without fine-tuning."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn as nn

from slm.config import ConfigError
from slm.methods.base import Architecture, Method
from slm.methods.registry import register
from slm.methods.samplers import step_rng
from slm.models.gpt import GPT, GPTConfig, LMOutput, LossFn
from slm.models.soup import DomainPrior, SoupOfExperts


class MixtureSampler:
    """Each step draws h from the prior (s active domains), then every row picks a cluster i ∼ h and a
    sequence uniformly inside it: the batch is drawn from Σ_i h_i D_i.

    The prior's generator advances one draw per step; its state (and the step it belongs to) is
    checkpointed, so a resumed run draws the same h's."""

    def __init__(self, coarse: np.ndarray, n_domains: int, active: int, seed: int):
        self.seed = seed
        self.members = [np.flatnonzero(coarse == c) for c in range(n_domains)]
        self.prior = DomainPrior(n_domains, active, seed)
        self.present = np.array([len(m) > 0 for m in self.members])
        if not self.present.any():
            raise ValueError("no sequence carries a coarse cluster id in [0, n_domains)")
        self._step, self._h = -1, None

    def context(self, step: int) -> torch.Tensor:
        """h for ``step``; steps are drawn in order (the loop asks once per step, resume restores)."""
        if step != self._step:
            if step != self._step + 1:
                raise RuntimeError(f"the soup prior is at step {self._step}, asked for {step}: restore its state")
            h = self.prior.sample()
            # Clusters with no packed sequence cannot be drawn from: move their weight to the rest.
            h = h * torch.from_numpy(self.present.astype(np.float32))
            if float(h.sum()) == 0:
                h = torch.from_numpy(self.present / self.present.sum()).float()
            self._step, self._h = step, h / h.sum()
        return self._h

    def indices(self, step: int, rank: int, world: int, batch: int) -> np.ndarray:
        h = self.context(step).numpy().astype(np.float64)
        rng = step_rng(self.seed, step, rank)
        clusters = rng.choice(len(h), size=batch, p=h / h.sum())
        return np.array([m[rng.integers(0, len(m))] for m in (self.members[c] for c in clusters)], dtype=np.int64)

    def state_dict(self) -> dict:
        return {"prior": self.prior.state_dict(), "step": self._step,
                "h": None if self._h is None else self._h.tolist()}

    def load_state_dict(self, state: dict) -> None:
        self.prior.load_state_dict(state["prior"])
        self._step = state["step"]
        self._h = None if state["h"] is None else torch.tensor(state["h"])


@dataclass
class SoupSettings:
    """``pretrain.model.soup``: the soup's experts and its prior over the coarse clusters (its domains)."""

    experts: int = 4  # n, the experts E_j mixed into Θ(h)
    active: int = 2  # s, domains active in each h drawn from the prior
    experts_on: Literal["all", "mlp"] = "all"  # which weights have experts

    def validate(self, prefix: str = "") -> None:
        for name in ("experts", "active"):
            if getattr(self, name) < 1:
                raise ConfigError(f"config key '{prefix}{name}': must be at least 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class SoupArchitecture(Architecture):
    n_experts: int
    n_domains: int  # the coarse clusters: h's dimension
    experts_on: str


@register
class Soup(Method):
    name = "soup"
    paper_name = "Soup-of-Experts"
    color = "tab:orange"
    dense = False
    clustered = True
    swept_by_default = True
    Settings = SoupSettings
    Record = SoupArchitecture

    def architecture(self, gpt: GPTConfig, n_clusters: int) -> SoupArchitecture:
        settings = self.settings
        return SoupArchitecture(self.name, gpt, settings.experts, n_clusters, settings.experts_on)

    def check(self, n_clusters: int, prefix: str) -> None:
        active = self.settings.active
        if active > n_clusters:
            raise ConfigError(f"config key '{prefix}active': {active} active domains but the "
                              f"clustering has only {n_clusters} coarse clusters")

    def build(self, arch: SoupArchitecture) -> nn.Module:
        return SoupOfExperts(arch.gpt, arch.n_experts, arch.n_domains, experts_on=arch.experts_on)

    def compile_units(self, model: nn.Module) -> list[nn.Module]:
        return [model]  # whole: the router, the merge Θ(h) and the functional call

    def step_overhead_flops(self, model: nn.Module, arch: SoupArchitecture) -> float:
        mixed = sum(p[0].numel() for p in model.experts.values())  # E_j stacked per weight
        return 6.0 * arch.n_experts * mixed

    def sampler(self, arch: SoupArchitecture, coarse: np.ndarray, rows: np.ndarray, seed: int):
        return MixtureSampler(coarse, arch.n_domains, self.settings.active, seed)

    def forward(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor | None, coarse: torch.Tensor,
                context: Any, objective: LossFn | None = None) -> LMOutput:
        return model(inputs, context.to(inputs.device), targets, objective)

    @torch.no_grad()
    def instantiate(self, model: nn.Module, arch: SoupArchitecture, coarse_histogram: list[float],
                    expert: int | None = None) -> tuple[GPT, dict[str, Any]]:
        """Θ(h), h the domain's histogram itself."""
        if expert is not None:
            raise ConfigError(f"an expert is chosen only for methods with experts, not {self.name}")
        h = torch.tensor(coarse_histogram, dtype=torch.float32)
        if len(h) != arch.n_domains:
            raise ConfigError(f"the domain histogram has {len(h)} coarse clusters but the soup was trained on "
                              f"{arch.n_domains} domains")
        return model.instantiate(h / h.sum()), {"h": [round(float(x), 6) for x in h / h.sum()]}
