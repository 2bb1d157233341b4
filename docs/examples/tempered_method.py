"""A new method with a setting of its own, in one module (docs/architecture.md, "Adding a method").

Temperature sampling over the coarse clusters: a dense GPT pretrained on every generic window, each
step's rows drawn so that a coarse cluster is picked with probability ∝ size^(1/T) instead of ∝ size
(uniform sampling is T = 1; a larger T gives the small clusters more of the steps, as multilingual
pretraining does for small languages: XLM-R, mT5). It asks whether SLM-mix's gain comes from its
experts or only from seeing every cluster often. Its setting is ``pretrain.model.tempered.temperature``.

Put this file in ``platform/slm/methods/``, import it in ``slm/methods/__init__.py``, and
``pretrain.method: tempered`` or ``sweep.methods: [..., tempered]`` run it; the trainer, the sweep, the
report and the config loader ask the registry, and nothing else changes. (The platform does not ship it;
``tests/test_methods_registry.py`` imports it from here.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slm.config import ConfigError
from slm.methods.base import Architecture, Method
from slm.methods.registry import register
from slm.methods.samplers import step_rng


@dataclass
class TemperedSettings:
    """``pretrain.model.tempered``."""

    temperature: float = 2.0  # T: a cluster is drawn ∝ size^(1/T); 1 = uniform over windows

    def validate(self, prefix: str = "") -> None:
        if not self.temperature >= 1.0:
            raise ConfigError(f"config key '{prefix}temperature': must be ≥ 1 (1 is uniform sampling), "
                              f"got {self.temperature}")


class TemperedSampler:
    """Rows drawn independently with weights that make cluster c's share ∝ size_c^(1/T); a function of
    (seed, step, rank), like every sampler (``slm.methods.samplers``)."""

    def __init__(self, coarse: np.ndarray, rows: np.ndarray, temperature: float, seed: int):
        self.rows, self.seed = np.asarray(rows), seed
        clusters = np.asarray(coarse)[self.rows]
        if len(self.rows) == 0 or clusters.min() < 0:
            raise ValueError("tempered sampling needs rows that all carry a coarse cluster id")
        sizes = np.bincount(clusters).astype(np.float64)
        share = np.where(sizes > 0, sizes, 0.0) ** (1.0 / temperature)
        weights = (share / share.sum())[clusters] / sizes[clusters]  # a cluster's share, split over its rows
        self.p = weights / weights.sum()

    def indices(self, step: int, rank: int, world: int, batch: int) -> np.ndarray:
        return self.rows[step_rng(self.seed, step, rank).choice(len(self.rows), size=batch, p=self.p)]

    def context(self, step: int) -> None:
        return None

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


@register
class Tempered(Method):
    name = "tempered"
    paper_name = "generic, T-sampled clusters"
    color = "tab:pink"
    swept_by_default = False  # a control: compared when a sweep names it
    Settings = TemperedSettings

    def sampler(self, arch: Architecture, coarse: np.ndarray, rows: np.ndarray, seed: int):
        return TemperedSampler(coarse, rows, self.settings.temperature, seed)
