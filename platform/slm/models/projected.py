"""SLM-pn: projected networks, a linear hypernetwork over the feed-forward weights.

For layer l and expert i, every FFN weight matrix is

    W^(l,i) = Σ_q E[i,q] · Σ_r M^(l)[q,r] · T^(l)[r]        E ∈ R^{k_e×m}, M^(l) ∈ R^{m×h}, T^(l) ∈ R^{h×d_out×d_in}

Attention, embeddings and norms are shared by all experts. SLM-mix is the special case h = k_e,
E = I, M = I. ``instantiate(i)`` computes W^(l,i) once and returns a plain dense GPT.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
from torch.func import functional_call

from slm.models.gpt import GPT, GPTConfig, LMOutput, LossFn, ModelConfigError, init_std, lm_output
from slm.models.mixture import check_expert_ids, routed_logits


def ffn_weight_names(model: GPT) -> list[str]:
    """The projected weights: every Linear inside each block's MLP (fc, proj and, for SwiGLU, gate)."""
    return [n for n, _ in model.named_parameters() if ".mlp." in n]


class ProjectedNetwork(nn.Module):
    def __init__(self, cfg: GPTConfig, n_experts: int, expert_dim: int, bank_size: int):
        super().__init__()
        for name, value in (("n_experts", n_experts), ("expert_dim", expert_dim), ("bank_size", bank_size)):
            if value < 1:
                raise ModelConfigError(f"{name} must be at least 1, got {value}")
        self.config, self.n_experts = cfg, n_experts
        self.expert_dim, self.bank_size = expert_dim, bank_size
        self.shared = GPT(cfg)
        self.ffn_names = ffn_weight_names(self.shared)
        shapes = {n: p.shape for n, p in self.shared.named_parameters() if n in self.ffn_names}
        # The shared model keeps no FFN weights of its own: they are supplied per expert at forward.
        for name in self.ffn_names:
            module_name, _, attr = name.rpartition(".")
            module = self.shared.get_submodule(module_name)
            delattr(module, attr)
            setattr(module, attr, None)
        self.expert_embedding = nn.Parameter(torch.empty(n_experts, expert_dim))  # E
        self.mixing = nn.ParameterDict()  # M^(l), one per projected weight
        self.bank = nn.ParameterDict()  # T^(l)
        for name in self.ffn_names:
            key = name.replace(".", "__")
            self.mixing[key] = nn.Parameter(torch.empty(expert_dim, bank_size))
            self.bank[key] = nn.Parameter(torch.empty(bank_size, *shapes[name]))
        self.reset_projection(shapes)

    def reset_projection(self, shapes) -> None:
        # With E ~ N(0, 1) and M ~ N(0, 1/m), each coefficient c_r = (E[i] @ M)_r has unit variance, so
        # Var(W) = Σ_r c_r² Var(T) ≈ h·Var(T): T's std is the dense init std over √h, and every
        # instantiated expert starts with the dense model's weight scale.
        nn.init.normal_(self.expert_embedding, std=1.0)
        for name in self.ffn_names:
            key = name.replace(".", "__")
            nn.init.normal_(self.mixing[key], std=1.0 / math.sqrt(self.expert_dim))
            nn.init.normal_(self.bank[key], std=init_std(self.config, name) / math.sqrt(self.bank_size))

    def expert_weights(self, expert: int) -> dict[str, torch.Tensor]:
        """W^(l,i) for every projected weight of expert i: (E[i] @ M^(l)) contracted with T^(l)."""
        out = {}
        for name in self.ffn_names:
            key = name.replace(".", "__")
            # (h,) as a broadcast sum, not a matmul: autocast leaves it in the parameters' float32, so
            # the synthesized weights are float32 like every other weight (their use is autocast)
            coeffs = (self.expert_embedding[expert].unsqueeze(1) * self.mixing[key]).sum(0)
            out[name] = torch.tensordot(coeffs, self.bank[key], dims=1)
        return out

    def forward(self, idx: torch.Tensor, expert_ids: torch.Tensor, targets: torch.Tensor | None = None,
                objective: LossFn | None = None) -> LMOutput:
        check_expert_ids(expert_ids, idx.shape[0], self.n_experts)

        def run(expert: int, x: torch.Tensor) -> torch.Tensor:
            return functional_call(self.shared, self.expert_weights(expert), (x,), strict=False).logits

        return lm_output(routed_logits(run, idx, expert_ids, self.config.vocab_size), targets, objective)

    @torch.no_grad()
    def instantiate(self, expert: int) -> GPT:
        if not 0 <= expert < self.n_experts:
            raise ValueError(f"expert must be in [0, {self.n_experts}), got {expert}")
        like = self.shared.embed.weight  # the instantiated model keeps the parent's dtype and device
        dense = GPT(self.config).to(device=like.device, dtype=like.dtype)
        state = {n: p for n, p in self.shared.named_parameters()}
        state.update(self.expert_weights(expert))
        dense.load_state_dict({n: t.detach().clone() for n, t in state.items()}, strict=True)
        return dense

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
