"""Soup-of-Experts: Θ(h) = S + Σ_j α_j(h) · E_j, with α = router MLP(h).

S (shared) and each expert E_j have the full shape of the dense model (or, with ``experts_on="mlp"``,
of its MLP weights only). Given domain weights h on the simplex, the router gives the coefficients α
and the merged parameters Θ(h) are computed **once per step** and run through the dense GPT with
``torch.func.functional_call``: the merge costs n·|Θ| whatever the batch, and backward reaches S,
every E_j (∂L/∂E_j = α_j ∂L/∂Θ) and the router. ``instantiate(h)`` returns Θ(h) as a plain GPT.

Training draws h from a prior with s active domains (``DomainPrior``) and the batch from the mixture
Σ_i h_i D_i; the trainer's sampler does the latter with the cluster ids the packer keeps.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn as nn
from torch.func import functional_call

from slm.models.gpt import GPT, GPTConfig, LMOutput, LossFn, ModelConfigError


def check_simplex(h: torch.Tensor, k: int, atol: float = 1e-4) -> None:
    if h.dim() != 1 or h.shape[0] != k:
        raise ValueError(f"domain weights h must be a vector of length {k}, got shape {tuple(h.shape)}")
    if not torch.isfinite(h).all() or (h < -atol).any() or abs(float(h.sum()) - 1.0) > atol:
        raise ValueError(f"domain weights h must lie on the simplex (h ≥ 0, Σh = 1), got sum {float(h.sum()):.6f}"
                         f" and min {float(h.min()):.6f}")


class DomainPrior:
    """π over Δ^k: s domains drawn uniformly without replacement, their weights ~ Dirichlet(1).

    Its generator state is part of the trainer's checkpoint, so a resumed run draws the same h's.
    """

    def __init__(self, k: int, s: int = 2, seed: int = 0):
        if not 1 <= s <= k:
            raise ModelConfigError(f"active domains s must be in [1, k={k}], got {s}")
        self.k, self.s = k, s
        self.generator = torch.Generator().manual_seed(seed)

    def sample(self) -> torch.Tensor:
        active = torch.randperm(self.k, generator=self.generator)[: self.s]
        gammas = -torch.log(torch.rand(self.s, generator=self.generator).clamp_min(1e-12))  # Gamma(1)
        h = torch.zeros(self.k)
        h[active] = gammas / gammas.sum()
        return h

    def state_dict(self) -> dict:
        return {"k": self.k, "s": self.s, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        if (state["k"], state["s"]) != (self.k, self.s):
            raise ValueError(f"prior state is for k={state['k']}, s={state['s']}; this prior has k={self.k}, s={self.s}")
        self.generator.set_state(state["generator"])


class SoupOfExperts(nn.Module):
    def __init__(self, cfg: GPTConfig, n_experts: int, n_domains: int, router_hidden: int | None = None,
                 experts_on: Literal["all", "mlp"] = "all", expert_init_std: float = 0.0):
        super().__init__()
        if n_experts < 1:
            raise ModelConfigError(f"n_experts must be at least 1, got {n_experts}")
        if n_domains < 1:
            raise ModelConfigError(f"n_domains must be at least 1, got {n_domains}")
        if experts_on not in ("all", "mlp"):
            raise ModelConfigError(f"experts_on must be 'all' or 'mlp', got {experts_on!r}")
        self.config, self.n_experts, self.n_domains = cfg, n_experts, n_domains
        self.shared = GPT(cfg)  # S
        self.mixed_names = [n for n, _ in self.shared.named_parameters() if experts_on == "all" or ".mlp." in n]
        # E_j stacked per weight: shape (n, *weight.shape). Zero-initialised by default, so that
        # Θ(h) = S at the start (as LoRA's B); the router then learns while the experts move apart.
        # Under µP a hidden weight's experts start at its scale's 1/√m, as the weight does (1 otherwise).
        self.experts = nn.ParameterDict({
            n.replace(".", "__"): nn.Parameter(torch.randn(n_experts, *p.shape) * expert_init_std
                                               / (math.sqrt(cfg.width_mult) if "blocks" in n else 1.0))
            for n, p in self.shared.named_parameters() if n in self.mixed_names
        })
        hidden = router_hidden or 4 * n_domains
        self.router = nn.Sequential(nn.Linear(n_domains, hidden), nn.GELU(), nn.Linear(hidden, n_experts))

    def coefficients(self, h: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():  # a host-side check: inside a graph it would break it
            check_simplex(h, self.n_domains)
        return self.router(h.to(self.router[0].weight.dtype))

    def merged(self, h: torch.Tensor) -> dict[str, torch.Tensor]:
        """Θ(h) for the mixed weights: S + Σ_j α_j E_j (the shared rest is used as is)."""
        # The router's output may be bfloat16 under autocast: the merge is in the parameters' dtype.
        shared = dict(self.shared.named_parameters())
        alpha = self.coefficients(h).to(shared["embed.weight"].dtype)
        return {n: shared[n] + torch.tensordot(alpha, self.experts[n.replace(".", "__")], dims=1)
                for n in self.mixed_names}

    def forward(self, idx: torch.Tensor, h: torch.Tensor, targets: torch.Tensor | None = None,
                objective: LossFn | None = None) -> LMOutput:
        """One h for the whole batch: the batch is drawn from the mixture h describes."""
        return functional_call(self.shared, self.merged(h), (idx, targets, objective), strict=False)

    @torch.no_grad()
    def instantiate(self, h: torch.Tensor) -> GPT:
        like = self.shared.embed.weight  # the instantiated model keeps the parent's dtype and device
        dense = GPT(self.config).to(device=like.device, dtype=like.dtype)
        state = {n: p.detach().clone() for n, p in self.shared.named_parameters()}
        state.update({n: t.detach().clone() for n, t in self.merged(h).items()})
        dense.load_state_dict(state, strict=True)
        return dense

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
