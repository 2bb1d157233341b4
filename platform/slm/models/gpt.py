"""The dense GPT: a decoder-only transformer in the nanoGPT/nanochat style.

RMSNorm (pre-norm), rotary position embeddings, causal scaled-dot-product attention, a GELU or SwiGLU
MLP, tied input/output embeddings, no biases. Size is one dial (``GPTConfig.from_depth``) plus named
presets. Every instantiated expert (SLM-mix, SLM-pn, Soup-of-Experts) is one of these, so fine-tuning,
evaluation and serving never need to know where a model came from.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_model

from slm.artifacts import ArtifactError, atomic_path, check_recorded


class ModelConfigError(ValueError):
    """A model config that cannot build a model; the message names the field."""


@dataclass
class GPTConfig:
    vocab_size: int = 8192
    seq_len: int = 256
    n_layer: int = 4
    d_model: int = 256
    n_head: int = 4
    d_ff: int = 1024
    mlp: Literal["gelu", "swiglu"] = "gelu"
    rope_base: float = 10000.0
    norm_eps: float = 1e-6
    init_std: float = 0.02
    # sp: the standard parametrization (GPT-2's init, one learning rate). mup: maximal-update
    # parametrization (Yang et al., Tensor Programs V) with CompleteP's depth scaling (Dey et al. 2025, α = 1),
    # relative to a base shape at which it is the standard one: hidden matrices initialised at
    # init_std/√m and trained at lr/m, the logits multiplied by 1/m (m = d_model / mup_base_width), each
    # residual branch by mup_base_depth / n_layer — so the best learning rate found at the base shape
    # carries to wider and deeper models (docs/training.md, "Parametrization").
    parametrization: Literal["sp", "mup"] = "sp"
    mup_base_width: int = 64
    mup_base_depth: int = 1

    def validate(self, prefix: str = "") -> None:
        for name in ("vocab_size", "seq_len", "n_layer", "d_model", "n_head", "d_ff"):
            if getattr(self, name) <= 0:
                raise ModelConfigError(f"{prefix}{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_head:
            raise ModelConfigError(
                f"{prefix}d_model={self.d_model} is not divisible by {prefix}n_head={self.n_head}")
        if (self.d_model // self.n_head) % 2:
            raise ModelConfigError(f"{prefix}head dim {self.d_model // self.n_head} must be even for RoPE")
        if self.mlp not in ("gelu", "swiglu"):
            raise ModelConfigError(f"{prefix}mlp must be 'gelu' or 'swiglu', got {self.mlp!r}")
        if self.parametrization not in ("sp", "mup"):
            raise ModelConfigError(f"{prefix}parametrization must be 'sp' or 'mup', got {self.parametrization!r}")
        if self.mup_base_width < 1 or self.mup_base_depth < 1:
            raise ModelConfigError(f"{prefix}mup_base_width and {prefix}mup_base_depth must be positive")

    @property
    def width_mult(self) -> float:
        """µP's m: this width over the base width (1 under the standard parametrization)."""
        return self.d_model / self.mup_base_width if self.parametrization == "mup" else 1.0

    @property
    def branch_mult(self) -> float:
        """CompleteP's residual-branch multiplier, base depth over depth (1 under the standard one)."""
        return self.mup_base_depth / self.n_layer if self.parametrization == "mup" else 1.0

    def lr_scale(self, name: str, param: torch.Tensor) -> float:
        """The factor on the learning rate of parameter ``name`` of any model built from this config (a GPT,
        or a method's model holding GPT-shaped weights: soup experts, SLM-pn's bank, SLM-mix's experts):
        under µP 1/m for the hidden matrices — every weight of at least two dimensions inside the blocks —
        and 1 for the embedding, the norms and a method's width-independent parts (the soup's router, SLM-pn's
        mixing and expert embedding)."""
        hidden = param.dim() >= 2 and "blocks" in name
        return 1 / self.width_mult if hidden else 1.0

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @classmethod
    def from_depth(cls, depth: int, **overrides) -> GPTConfig:
        """nanochat's single dial: width 64·depth, 64-dim heads, FFN 4× width."""
        d_model = 64 * depth
        fields = {"n_layer": depth, "d_model": d_model, "n_head": max(1, d_model // 64), "d_ff": 4 * d_model}
        return cls(**{**fields, **overrides})


PRESETS: dict[str, GPTConfig] = {
    # Unit tests: a model that runs in milliseconds.
    "tiny": GPTConfig(vocab_size=512, seq_len=64, n_layer=2, d_model=64, n_head=2, d_ff=256),
    # CPU experiments: a small model and a ~4× larger one (their speeds: docs/training.md).
    "cpu-small": GPTConfig(vocab_size=8192, seq_len=256, n_layer=4, d_model=256, n_head=4, d_ff=1024),
    "cpu-large": GPTConfig(vocab_size=8192, seq_len=256, n_layer=6, d_model=512, n_head=8, d_ff=2048),
    # The Plan-Early paper's shapes, for GPU clusters (vocabulary: ours, 32,768).
    "slm-126m": GPTConfig(vocab_size=32768, seq_len=1024, n_layer=7, d_model=1024, n_head=8, d_ff=4096),
    "llm-771m": GPTConfig(vocab_size=32768, seq_len=1024, n_layer=7, d_model=2816, n_head=22, d_ff=11264),
}


def preset(name: str, **overrides) -> GPTConfig:
    if name not in PRESETS:
        raise ModelConfigError(f"unknown model preset {name!r}; presets: {sorted(PRESETS)}")
    cfg = dataclasses.replace(PRESETS[name], **overrides)
    cfg.validate()
    return cfg


# ------------------------------------------------------------------------------------------ layers


def rope_tables(seq_len: int, head_dim: int, base: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()  # (T, head_dim/2) each


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, H, T, D) by position; pairs are the two halves of D (the GPT-NeoX layout)."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos[: x.shape[-2]].to(x.dtype), sin[: x.shape[-2]].to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    """GELU: proj(gelu(fc x)). SwiGLU: proj(silu(fc x) * gate x). The weights SLM-pn projects."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.kind = cfg.mlp
        self.fc = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        if cfg.mlp == "swiglu":
            self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "swiglu":
            return self.proj(F.silu(self.fc(x)) * self.gate(x))
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.attn_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = MLP(cfg)
        self.branch_mult = cfg.branch_mult  # CompleteP under µP; 1 under the standard parametrization

    def forward(self, x, cos, sin):
        if self.branch_mult == 1.0:
            x = x + self.attn(self.attn_norm(x), cos, sin)
            return x + self.mlp(self.mlp_norm(x))
        x = x + self.branch_mult * self.attn(self.attn_norm(x), cos, sin)
        return x + self.branch_mult * self.mlp(self.mlp_norm(x))


@dataclass
class LMOutput:
    """What the objectives need: the logits (KD and SALT need the whole distribution) and, given targets, the
    loss (the objective's, or the mean token cross-entropy), the plain cross-entropy and the objective's other
    terms by name."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None
    ce: torch.Tensor | None = None
    terms: dict[str, torch.Tensor] = field(default_factory=dict)


# The objective a model is called with (``slm.train.objectives.Objective.data``): (logits, targets) → (loss, plain
# cross-entropy, other terms). Computed in the model's forward, so that a compiled model's graph holds its loss.
LossFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]]


def token_logprobs(logits: torch.Tensor) -> torch.Tensor:
    """log p over the vocabulary, in float32 whatever the logits' precision."""
    return F.log_softmax(logits.float(), dim=-1)


def cross_entropy(logprobs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean next-token cross-entropy from ``token_logprobs``: the one definition every loss and measure uses
    (training's objective, a model called with targets, the evaluation's per-row sums)."""
    return -logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1).mean()


def lm_output(logits: torch.Tensor, targets: torch.Tensor | None = None, objective: LossFn | None = None) -> LMOutput:
    """A model's output; given targets, the loss ``objective`` computes from the logits (training's configured
    objective, ``slm.train.objectives.Objective``), or without one their plain cross-entropy."""
    out = LMOutput(logits=logits)
    if targets is not None:
        if objective is None:
            out.loss = out.ce = cross_entropy(token_logprobs(logits), targets)
        else:
            out.loss, out.ce, out.terms = objective(logits, targets)
    return out


def init_std(cfg: GPTConfig, name: str) -> float:
    """A weight matrix's initial standard deviation. Standard: N(0, init_std²), the residual branches' output
    projections over √(2·n_layer) (GPT-2). µP: the hidden matrices over √m (fan-in scaling relative to the base
    width) and no depth factor (CompleteP's branch multiplier takes its place); the embedding stays at init_std."""
    if cfg.parametrization == "mup":
        return cfg.init_std / math.sqrt(cfg.width_mult) if "blocks" in name else cfg.init_std
    scale = 1 / math.sqrt(2 * cfg.n_layer) if name.endswith("proj.weight") else 1.0
    return cfg.init_std * scale


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        cfg.validate()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        cos, sin = rope_tables(cfg.seq_len, cfg.head_dim, cfg.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, mean=0.0, std=init_std(self.config, name))
            else:
                nn.init.ones_(p)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, objective: LossFn | None = None) -> LMOutput:
        if idx.shape[1] > self.config.seq_len:
            raise ValueError(f"sequence length {idx.shape[1]} exceeds the model's seq_len {self.config.seq_len}")
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x, self.rope_cos, self.rope_sin)
        logits = F.linear(self.norm(x), self.embed.weight)  # tied output embedding
        if self.config.parametrization == "mup":  # µP's readout: the shared embedding's logits over m
            logits = logits / self.config.width_mult
        return lm_output(logits, targets, objective)

    # -------------------------------------------------------------------------------- accounting

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, training: bool = True) -> int:
        """PaLM's count: 6N + 12·L·d·T to train (a third of it to infer), N = every matmul weight,
        the tied output projection included."""
        cfg = self.config
        n_matmul = self.num_params() - sum(p.numel() for n, p in self.named_parameters() if "norm" in n)
        forward = 2 * n_matmul + 4 * cfg.n_layer * cfg.d_model * cfg.seq_len
        return 3 * forward if training else forward


# ----------------------------------------------------------------------------------- checkpoints


def save_dense(model: GPT, path: str | Path, metadata: dict | None = None) -> None:
    """Safetensors (tied weights handled), the config in the header: never a pickle."""
    meta = {"slm.model": "gpt", "slm.config": json.dumps(dataclasses.asdict(model.config))}
    meta.update({f"slm.{k}": json.dumps(v) for k, v in (metadata or {}).items()})
    with atomic_path(Path(path)) as tmp:
        save_model(model, str(tmp), metadata=meta)


def load_dense(path: str | Path, device: str = "cpu") -> GPT:
    """A dense GPT saved by ``save_dense``, checked first against the manifest that records it."""
    check_recorded(path)
    return load_dense_unchecked(path, device)


def read_safetensors_metadata(path: str | Path) -> dict[str, str]:
    """A safetensors file's header metadata; a file that is not one (truncated, another format) is
    refused in one line naming it."""
    try:
        with safe_open(str(path), framework="pt") as f:
            return f.metadata() or {}
    except SafetensorError as err:
        raise ArtifactError(f"{path}: not a readable safetensors file ({err})") from None


def load_dense_unchecked(path: str | Path, device: str = "cpu") -> GPT:
    """``load_dense`` for a caller that checked the file already."""
    meta = read_safetensors_metadata(path)
    if meta.get("slm.model") != "gpt":
        raise ValueError(f"{path} is not a dense slm GPT checkpoint (metadata: {sorted(meta)})")
    model = GPT(GPTConfig(**json.loads(meta["slm.config"])))
    load_model(model, str(path), device=device)
    return model
