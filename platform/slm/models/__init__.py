"""Models: torch only, no Ray. Every instantiated model is a dense ``GPT``.

The names below load their modules on first use (PEP 562): ``slm.models.config`` (a job's
``pretrain.model`` section) does not import torch by itself. Loading a job does, since it imports
``slm.methods`` to learn each method's settings section.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "GPT": "gpt", "PRESETS": "gpt", "GPTConfig": "gpt", "LMOutput": "gpt", "ModelConfigError": "gpt",
    "load_dense": "gpt", "preset": "gpt", "save_dense": "gpt", "MixtureOfExperts": "mixture",
    "ProjectedNetwork": "projected", "DomainPrior": "soup", "SoupOfExperts": "soup",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'slm.models' has no attribute {name!r}")
    return getattr(importlib.import_module(f"slm.models.{_EXPORTS[name]}"), name)
