"""LoRA specialization: adapters on a frozen dense GPT (peft), folded back into a plain GPT at export."""

from __future__ import annotations

import torch
from peft import LoraConfig as PeftLora
from peft import inject_adapter_in_model

from slm.models.gpt import GPT, GPTConfig
from slm.train.config import LoraConfig


def lora_wrap(model: GPT, lora: LoraConfig) -> torch.nn.Module:
    """Freeze the dense model and add LoRA adapters on the named Linear layers."""
    config = PeftLora(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                      target_modules=list(lora.targets))
    model = inject_adapter_in_model(config, model)
    for name, p in model.named_parameters():
        p.requires_grad = "lora_" in name
    return model


def lora_merged(model: torch.nn.Module, cfg: GPTConfig) -> GPT:
    """Fold the adapters into the weights: W + (α/r)·B·A, returned as a plain dense GPT."""
    state = {}
    for name, p in model.named_parameters():
        if "lora_" in name:
            continue
        if name.endswith(".base_layer.weight"):
            prefix = name[: -len(".base_layer.weight")]
            delta = model.get_submodule(prefix).get_delta_weight("default")
            state[f"{prefix}.weight"] = (p + delta).detach().clone()
        else:
            state[name] = p.detach().clone()
    dense = GPT(cfg)
    dense.load_state_dict(state, strict=True)
    return dense
