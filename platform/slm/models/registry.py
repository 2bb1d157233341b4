"""One entry point from a method's name to its model, and one file format for every method's weights.

``build_model(arch)`` turns an architecture record (a plain dict: the method, the dense ``GPTConfig``
and the method's knobs) into the module that method trains. ``save_model`` / ``load_model`` store any
of them as safetensors with that record in the header, so a checkpoint says what it is and loading
never unpickles. ``instantiate`` hands out the dense GPT a method serves for one domain.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
import torch.nn as nn

from slm.models.gpt import GPT, GPTConfig, ModelConfigError, load_dense, save_dense
from slm.models.mixture import MixtureOfExperts
from slm.models.projected import ProjectedNetwork
from slm.models.soup import SoupOfExperts

# Methods whose model is one dense GPT: they differ only in the data they pretrain on.
DENSE_METHODS = ("generic", "importance", "dsir")
METHODS = (*DENSE_METHODS, "mixture", "projected", "soup")


def architecture(method: str, gpt: GPTConfig, *, n_experts: int = 1, expert_dim: int = 4, bank_size: int = 8,
                 soup_experts: int = 4, soup_domains: int = 1, soup_experts_on: str = "all") -> dict:
    """The record ``build_model`` reads and checkpoints carry."""
    if method not in METHODS:
        raise ModelConfigError(f"unknown method {method!r}; methods: {list(METHODS)}")
    arch = {"method": method, "gpt": dataclasses.asdict(gpt)}
    if method in ("mixture", "projected"):
        arch["n_experts"] = n_experts
    if method == "projected":
        arch.update(expert_dim=expert_dim, bank_size=bank_size)
    if method == "soup":
        arch.update(n_experts=soup_experts, n_domains=soup_domains, experts_on=soup_experts_on)
    return arch


def build_model(arch: dict) -> nn.Module:
    cfg = GPTConfig(**arch["gpt"])
    method = arch["method"]
    if method in DENSE_METHODS:
        return GPT(cfg)
    if method == "mixture":
        return MixtureOfExperts(cfg, arch["n_experts"])
    if method == "projected":
        return ProjectedNetwork(cfg, arch["n_experts"], arch["expert_dim"], arch["bank_size"])
    if method == "soup":
        return SoupOfExperts(cfg, arch["n_experts"], arch["n_domains"], experts_on=arch["experts_on"])
    raise ModelConfigError(f"unknown method {method!r}; methods: {list(METHODS)}")


def compile_units(model: nn.Module, arch: dict) -> list[nn.Module]:
    """The modules ``torch.compile`` wraps for a method's training step, each traced whole without graph
    breaks: the dense GPT itself; the soup whole (router, merge Θ(h) and the functional call); for the
    mixture every expert and for SLM-pn the shared network, whose routing by cluster id (data-dependent
    Python control flow) stays eager around them."""
    method = arch["method"]
    if method in DENSE_METHODS or method == "soup":
        return [model]
    if method == "mixture":
        return list(model.experts)
    if method == "projected":
        return [model.shared]
    raise ModelConfigError(f"unknown method {method!r}; methods: {list(METHODS)}")


def save_model(model: nn.Module, arch: dict, path: str | Path, metadata: dict | None = None) -> None:
    if arch["method"] in DENSE_METHODS:
        save_dense(model, path, {"method": arch["method"], **(metadata or {})})
        return
    from safetensors.torch import save_model as save_tensors

    from slm.artifacts import atomic_path

    meta = {"slm.model": "method", "slm.arch": json.dumps(arch)}
    meta.update({f"slm.{k}": json.dumps(v) for k, v in (metadata or {}).items()})
    with atomic_path(Path(path)) as tmp:
        save_tensors(model, str(tmp), metadata=meta)


def read_metadata(path: str | Path) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return f.metadata() or {}


def load_model(path: str | Path) -> tuple[nn.Module, dict]:
    """Any slm checkpoint → (module, architecture record)."""
    from safetensors.torch import load_model as load_tensors

    meta = read_metadata(path)
    if meta.get("slm.model") == "gpt":
        model = load_dense(path)
        method = json.loads(meta.get("slm.method", '"generic"'))
        return model, {"method": method, "gpt": dataclasses.asdict(model.config)}
    if meta.get("slm.model") != "method":
        raise ValueError(f"{path} is not an slm checkpoint (metadata keys: {sorted(meta)})")
    arch = json.loads(meta["slm.arch"])
    model = build_model(arch)
    load_tensors(model, str(path))
    return model, arch


@torch.no_grad()
def instantiate(model: nn.Module, arch: dict, coarse_histogram: list[float],
                expert: int | None = None) -> tuple[GPT, dict]:
    """The dense GPT a method serves for a domain whose histogram over the coarse clusters is given.

    mixture / projected: the expert of the domain's most frequent coarse cluster, or ``expert`` when given
    (Plan-Early's Table 5 fine-tunes every expert to compare); soup: Θ(h) with h the histogram itself;
    dense methods: the model as it is. Returns the model and what was chosen."""
    method = arch["method"]
    h = torch.tensor(coarse_histogram, dtype=torch.float32)
    if expert is not None and method not in ("mixture", "projected"):
        raise ValueError(f"an expert is chosen only for mixture and projected models, not {method}")
    if method in DENSE_METHODS:
        return model, {}
    if method in ("mixture", "projected"):
        if len(h) != arch["n_experts"]:
            raise ValueError(f"the domain histogram has {len(h)} coarse clusters but the {method} model has "
                             f"{arch['n_experts']} experts: pretrain and histogram used different cluster.k")
        most_frequent = int(h.argmax())
        chosen = most_frequent if expert is None else expert
        return model.instantiate(chosen), {"expert": chosen, "most_frequent_expert": most_frequent}
    if method == "soup":
        if len(h) != arch["n_domains"]:
            raise ValueError(f"the domain histogram has {len(h)} coarse clusters but the soup was trained on "
                             f"{arch['n_domains']} domains")
        return model.instantiate(h / h.sum()), {"h": [round(float(x), 6) for x in h / h.sum()]}
    raise ModelConfigError(f"unknown method {method!r}")
