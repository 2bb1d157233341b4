"""Models: torch only, no Ray. Every instantiated model is a dense ``GPT``."""

from slm.models.gpt import GPT, PRESETS, GPTConfig, LMOutput, ModelConfigError, load_dense, preset, save_dense
from slm.models.mixture import MixtureOfExperts
from slm.models.projected import ProjectedNetwork
from slm.models.soup import DomainPrior, SoupOfExperts

__all__ = ["GPT", "PRESETS", "GPTConfig", "LMOutput", "ModelConfigError", "load_dense", "preset", "save_dense",
           "MixtureOfExperts", "ProjectedNetwork", "DomainPrior", "SoupOfExperts"]
