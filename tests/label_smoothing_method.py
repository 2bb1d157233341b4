"""A method whose loss has a setting of its own (issue 47): the generic dense model trained with label
smoothing, ``pretrain.model.smoothed.epsilon``. Its forward reads the setting from the method bound to
the run (``self.settings``), as every hook of a method does: no sampler detour, no global. Registered by
the tests that import it (``tests/test_methods_registry.py``), not shipped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from slm.config import ConfigError
from slm.methods.base import Method
from slm.methods.registry import register
from slm.models.gpt import LMOutput


@dataclass
class SmoothingSettings:
    """``pretrain.model.smoothed``."""

    epsilon: float = 0.1  # the target's mass moved to the uniform distribution over the vocabulary

    def validate(self, prefix: str = "") -> None:
        if not 0.0 <= self.epsilon < 1.0:
            raise ConfigError(f"config key '{prefix}epsilon': must be in [0, 1), got {self.epsilon}")


@register
class LabelSmoothed(Method):
    name = "smoothed"
    paper_name = "generic, label-smoothed"
    color = "tab:cyan"
    swept_by_default = False
    Settings = SmoothingSettings

    def forward(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor | None,
                coarse: torch.Tensor, context: Any) -> LMOutput:
        out = model(inputs)
        if targets is not None:
            out.loss = F.cross_entropy(out.logits.float().flatten(0, 1), targets.flatten(),
                                       label_smoothing=self.settings.epsilon)
        return out
