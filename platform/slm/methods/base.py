"""The method protocol: everything the platform asks of a method, in one place.

A method is a way to pretrain a small model that will be specialized per domain (Plan-Early's SLM-is,
SLM-mix, SLM-pn, Soup-of-Experts; the generic baseline; DSIR's data selection). The trainer, the loop,
the sweep, the report and the CLI ask the method registry (``slm.methods``) and never test a method's
name, so adding a method is one module that subclasses :class:`Method` and registers it, plus its
test. docs/architecture.md has the how-to.

The defaults below are the dense baseline's: one GPT, trained on every generic window, uniformly
sampled; a subclass overrides what its method changes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn as nn

from slm.config import ConfigError
from slm.methods.samplers import UniformSampler
from slm.models.config import ModelConfig
from slm.models.gpt import GPT, GPTConfig, LMOutput, LossFn


@dataclass(frozen=True)
class Architecture:
    """The architecture record: what ``Method.build`` makes, what a run's spec is hashed on and what a
    checkpoint carries (its JSON in the safetensors header). The dense GPT's shape; a method whose model
    is more than one GPT subclasses it with what it adds (``Method.Record``)."""

    method: str
    gpt: GPTConfig

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Architecture:
        return cls(**{**record, "gpt": GPTConfig(**record["gpt"])})


class Method:
    """One pretraining method. Class attributes describe it; methods do what differs between methods.

    The registry holds one unbound instance per method, for what the class says (``per_domain``,
    ``pretrain_set``…). A run binds it to its settings (:meth:`bind`: a new instance, nothing shared
    between runs), and every hook of the bound method reads them as ``self.settings`` — the sampler, the
    forward, the architecture alike (torchtitan and OLMo-core make the loss a configured component the same
    way)."""

    name: ClassVar[str]  # the config name (pretrain.method, sweep.methods)
    paper_name: ClassVar[str]  # what the papers and the plots call it
    color: ClassVar[str]  # its colour in every plot
    # The model is one dense GPT, stored as one (the method changes only the data it pretrains on).
    dense: ClassVar[bool] = True
    # Its pretraining set is chosen for one domain, so it is paid again for every domain (C_generic = 0).
    per_domain: ClassVar[bool] = False
    # It trains on the coarse clusters: its sequences carry cluster ids, and it serves a domain through
    # the domain's histogram over them (only domains with a histogram are evaluated).
    clustered: ClassVar[bool] = False
    # ``instantiate`` can hand out any one expert, not only the domain's (Plan-Early's Table 5).
    has_experts: ClassVar[bool] = False
    # Some parameters get no gradient on a step (DDP must be told).
    find_unused_parameters: ClassVar[bool] = False
    # Compared by a sweep that lists no methods (``sweep.methods: []``): every registered method says so
    # itself (``register`` refuses one that does not), so a new method never joins every sweep silently.
    swept_by_default: ClassVar[bool]
    # Its own settings, ``pretrain.model.<name>``: a dataclass (defaults, a ``validate(prefix)``), or
    # None. Registered with the method; read with :meth:`settings`.
    Settings: ClassVar[type | None] = None
    # Its architecture record's class (``architecture`` makes one, checkpoints read one back).
    Record: ClassVar[type[Architecture]] = Architecture

    def __init__(self, settings: Any = None):
        self._settings = settings

    def bind(self, model: ModelConfig) -> Method:
        """This method for one run: its hooks read ``model``'s section ``pretrain.model.<name>``."""
        return type(self)(model.settings(self.name) if self.Settings is not None else None)

    @property
    def settings(self) -> Any:
        """This run's ``pretrain.model.<name>`` (an instance of ``Settings``; None for a method without)."""
        if self.Settings is not None and self._settings is None:
            raise RuntimeError(f"method {self.name!r}: its settings were read before the method was bound to "
                               "a run's (methods.get(name).bind(model))")
        return self._settings

    # ---- data

    def pretrain_set(self, domain: str) -> str:
        """The packed set it pretrains on, under the run's ``packed/`` folder."""
        return "generic"

    # ---- model

    def architecture(self, gpt: GPTConfig, n_clusters: int) -> Architecture:
        """The record ``build`` reads and checkpoints carry."""
        return Architecture(self.name, gpt)

    def check(self, n_clusters: int, prefix: str) -> None:
        """Fail with the key named (``prefix``: its settings' section) when the settings cannot fit the
        clustering."""

    def build(self, arch: Architecture) -> nn.Module:
        return GPT(arch.gpt)

    def compile_units(self, model: nn.Module) -> list[nn.Module]:
        """The modules ``torch.compile`` wraps for a training step, each traced whole without graph breaks."""
        return [model]

    def step_overhead_flops(self, model: nn.Module, arch: Architecture) -> float:
        """Per-step FLOPs beyond running the dense model on the batch."""
        return 0.0

    # ---- training

    def sampler(self, arch: Architecture, coarse: np.ndarray, rows: np.ndarray, seed: int):
        """What picks each step's rows (``slm.methods.samplers``); ``rows``: the rows it may use."""
        return UniformSampler(rows, seed)

    def forward(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor | None, coarse: torch.Tensor,
                context: Any, objective: LossFn | None = None) -> LMOutput:
        """One training forward, its loss computed by ``objective`` (the run's ``Objective.data``: the one place
        the loss is computed) inside the model's forward; ``context`` is the sampler's for the step
        (``sampler.context(step)``)."""
        return model(inputs, targets, objective)

    def objective(self, configured: Any) -> Any:
        """The objective its runs optimize (``train.objective``, an ``ObjectiveConfig``): as configured, unless the
        method is a change of objective (a label-smoothed model returns the configured one with its own ε)."""
        return configured

    # ---- serving

    def instantiate(self, model: nn.Module, arch: Architecture, coarse_histogram: list[float],
                    expert: int | None = None) -> tuple[GPT, dict[str, Any]]:
        """The dense GPT it serves for a domain whose histogram over the coarse clusters is given, and
        what was chosen (an expert, the soup's h)."""
        if expert is not None:
            raise ConfigError(f"an expert is chosen only for methods with experts, not {self.name}")
        return model, {}
