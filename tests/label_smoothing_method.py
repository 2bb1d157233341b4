"""A method whose objective has a setting of its own (issues 47, 65): the generic dense model trained with label
smoothing, ``pretrain.model.smoothed.epsilon``. Its ``objective`` hook reads the setting from the method bound to
the run (``self.settings``), as every hook of a method does, and returns the configured objective with it: the
loss is still computed in one place (``slm.train.objectives.Objective``). Registered by the tests that import it
(``tests/test_methods_registry.py``), not shipped."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from slm.config import ConfigError
from slm.methods.base import Method
from slm.methods.registry import register


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

    def objective(self, configured: Any) -> Any:
        """Its runs optimize the configured objective with its own ε: a change of objective, never a loss of its
        own (issue 65: it computed a second cross-entropy beside the model's and logged it as ``ce``)."""
        return replace(configured, label_smoothing=self.settings.epsilon)
