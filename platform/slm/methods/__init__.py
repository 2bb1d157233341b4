"""The methods: one module per method family, each a :class:`Method` registered by name.

``get(name)`` is the method the config names, ``names()`` every method there is; ``save_model`` /
``load_model`` store any method's model in one format. Importing this package registers the methods
shipped here (the modules below); a new one is one more module here and its test (docs/architecture.md).
"""

from slm.methods import dense, mixture, projected, soup  # noqa: F401  (they register themselves)
from slm.methods.base import Architecture, Method
from slm.methods.checkpoint import load_model, save_model
from slm.methods.registry import get, names, register
from slm.models.gpt import GPTConfig

# The generic dense model: the baseline, distillation's student and teacher, SALT's models, and what
# every specialization trains (the dense GPT a method serves for the domain, whatever pretrained it).
BASELINE = dense.Generic.name


# The methods the seed papers' claims are about (``slm.analysis.claims`` and the sweep's claim experiments).
SLM_IS, SLM_MIX, SLM_PN, SOUP = dense.Importance.name, mixture.Mixture.name, projected.Projected.name, soup.Soup.name
DISTILLED = dense.DISTILLED


def dense_record(gpt: GPTConfig) -> Architecture:
    """The architecture record of a plain dense GPT."""
    return Architecture(BASELINE, gpt)


def display(name: str) -> tuple[str, str]:
    """(paper name, plot colour) of a results table's method: a registered method, or distilled rows."""
    if name == DISTILLED:
        return dense.DISTILLED_PAPER_NAME, dense.DISTILLED_COLOR
    method = get(name, "method")
    return method.paper_name, method.color


__all__ = ["Architecture", "BASELINE", "DISTILLED", "SLM_IS", "SLM_MIX", "SLM_PN", "SOUP", "Method", "dense_record", "display", "get",
           "load_model", "names", "register", "save_model"]
