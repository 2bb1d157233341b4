"""The ``pretrain.model`` section: the model a run trains, its size and its method's knobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from slm.config import ConfigError

MAX_DEPTH = 64  # nanochat's dial: width 64·depth; past this no run here or on a cluster is sane


@dataclass
class ModelConfig:
    """The model a run trains: a GPT preset (or nanochat's depth dial) and the method's architecture."""

    preset: str = "cpu-small"
    depth: int = 0  # > 0: GPTConfig.from_depth(depth) instead of the preset
    # vocab_size and seq_len always come from the tokenizer and the packed data.
    n_experts: int = 0  # mixture / projected: experts, 0 = one per coarse cluster (cluster.k)
    expert_dim: int = 4  # projected: m, the size of each expert's embedding E[i]
    bank_size: int = 8  # projected: h, the number of weight matrices in the bank T
    soup_experts: int = 4  # soup: n, the experts E_j mixed into Θ(h)
    soup_active: int = 2  # soup: s, domains active in each h drawn from the prior
    soup_experts_on: Literal["all", "mlp"] = "all"

    def validate(self, prefix: str = "") -> None:
        if self.depth > MAX_DEPTH:
            raise ConfigError(f"config key '{prefix}depth': at most {MAX_DEPTH} (depth {MAX_DEPTH} is already "
                              f"{MAX_DEPTH} layers of width {64 * MAX_DEPTH}, ~13B parameters), got {self.depth}")
        for name in ("n_experts", "depth"):
            if getattr(self, name) < 0:
                raise ConfigError(f"config key '{prefix}{name}': must be ≥ 0, got {getattr(self, name)}")
        for name in ("expert_dim", "bank_size", "soup_experts", "soup_active"):
            if getattr(self, name) < 1:
                raise ConfigError(f"config key '{prefix}{name}': must be at least 1, got {getattr(self, name)}")

    @property
    def size_name(self) -> str:
        return f"d{self.depth}" if self.depth else self.preset


def size_config(size: str) -> ModelConfig:
    """A sweep's size name → ModelConfig: ``d<depth>`` (nanochat's dial) or a preset name."""
    if size.startswith("d") and size[1:].isdigit():
        return ModelConfig(depth=int(size[1:]))
    return ModelConfig(preset=size)
