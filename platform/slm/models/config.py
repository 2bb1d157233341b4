"""The ``pretrain.model`` section: the model a run trains, its size, and each method's own settings.

A method with settings of its own registers a dataclass for them (``slm.methods``, beside the method):
they are ``pretrain.model.<method>`` (``pretrain.model.projected.bank_size``), checked by the loader
with the section's own ``validate``. A sweep comparing several methods carries every method's section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from slm.config import ConfigError, Registry

MAX_DEPTH = 64  # nanochat's dial: width 64·depth; past this no run here or on a cluster is sane

# Method name → its settings dataclass; filled by ``slm.methods.register`` as the methods are imported.
METHOD_SETTINGS = Registry("method settings", key="pretrain.model", sections=True)


@dataclass
class ModelConfig:
    """The model a run trains: a GPT preset (or nanochat's depth dial) and every method's settings."""

    preset: str = "cpu-small"
    depth: int = 0  # > 0: GPTConfig.from_depth(depth) instead of the preset
    width: int = 0  # with depth: d_model (a multiple of 64: 64-dim heads); 0: nanochat's 64·depth
    # sp (standard) or mup (µP with CompleteP's depth scaling, relative to the base shape below): GPTConfig
    parametrization: Literal["sp", "mup"] = "sp"
    mup_base_width: int = 64
    mup_base_depth: int = 1
    # vocab_size and seq_len always come from the tokenizer and the packed data.
    methods: dict[str, Any] = METHOD_SETTINGS.field()  # YAML: one key per method, ``projected: {…}``

    def validate(self, prefix: str = "") -> None:
        if self.depth > MAX_DEPTH:
            raise ConfigError(f"config key '{prefix}depth': at most {MAX_DEPTH} (depth {MAX_DEPTH} is already "
                              f"{MAX_DEPTH} layers of width {64 * MAX_DEPTH}, ~13B parameters), got {self.depth}")
        if self.depth < 0:
            raise ConfigError(f"config key '{prefix}depth': must be ≥ 0, got {self.depth}")
        if self.width and (not self.depth or self.width % 64 or self.width < 0):
            raise ConfigError(f"config key '{prefix}width': a multiple of 64 (64-dim heads), with a depth; got "
                              f"{self.width} at depth {self.depth}")
        if self.mup_base_width < 1 or self.mup_base_depth < 1:
            raise ConfigError(f"config key '{prefix}mup_base_width' / 'mup_base_depth': must be positive")

    @property
    def size_name(self) -> str:
        if not self.depth:
            return self.preset
        return f"d{self.depth}" + (f"w{self.width}" if self.width and self.width != 64 * self.depth else "")

    def own(self, method: str | None) -> ModelConfig:
        """This config with only ``method``'s settings section (none for ``None``, or a method without one):
        what a run of that method is made of. A run's identity (its hash) is its own method's settings, never
        another's: registering a method, or changing one, leaves every other method's finished runs current."""
        return replace(self, methods={method: self.methods[method]} if method in self.methods else {})

    def settings(self, method: str) -> Any:
        """The settings section of ``method`` (``pretrain.model.<method>``)."""
        if method not in self.methods:
            raise ConfigError(f"pretrain.model has no '{method}' section: registered method settings are "
                              f"{METHOD_SETTINGS.names()} (was this ModelConfig made before slm.methods was imported?)")
        return self.methods[method]


SIZE_NAME = re.compile(r"d(\d+)(?:w(\d+))?")


def size_config(size: str, key: str = "sweep.sizes") -> ModelConfig:
    """A sweep's size name → ModelConfig: ``d<depth>`` (nanochat's dial, depth 1 to ``MAX_DEPTH``, width
    64·depth), ``d<depth>w<width>`` (that depth at another width, a multiple of 64) or a preset name; anything
    else is refused naming ``key``."""
    named = SIZE_NAME.fullmatch(size)
    if named:
        depth, width = int(named[1]), int(named[2] or 0)
        if not 1 <= depth <= MAX_DEPTH:
            raise ConfigError(f"config key '{key}': {size!r} has depth {depth}; d<depth> takes 1 to {MAX_DEPTH}")
        if width and (width % 64 or not 64 <= width <= 64 * MAX_DEPTH):
            raise ConfigError(f"config key '{key}': {size!r} has width {width}; a multiple of 64 up to {64 * MAX_DEPTH}")
        return ModelConfig(depth=depth, width=width)
    from slm.models.gpt import PRESETS  # torch: only for a preset name

    if size not in PRESETS:
        raise ConfigError(f"config key '{key}': {size!r} is neither d<depth> (1 to {MAX_DEPTH}) nor a preset "
                          f"({', '.join(sorted(PRESETS))})")
    return ModelConfig(preset=size)
