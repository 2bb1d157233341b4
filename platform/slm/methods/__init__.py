"""The methods: one module per method family, each a :class:`Method` registered by name.

``get(name)`` is the method the config names, ``names()`` every method there is; ``save_model`` /
``load_model`` store any method's model in one format. Importing this package registers the methods
shipped here (the modules below); a new one is one more module here and its test (docs/architecture.md).
"""

from slm.config import ConfigError
from slm.job import JobConfig
from slm.methods import dense, mixture, projected, soup  # noqa: F401  (they register themselves)
from slm.methods.base import Method
from slm.methods.checkpoint import load_model, read_metadata, save_model
from slm.methods.registry import get, names, register

# The generic dense model: the baseline, distillation's student and teacher, SALT's models, and what
# every specialization trains (the dense GPT a method serves for the domain, whatever pretrained it).
BASELINE = dense.Generic.name


# The methods the seed papers' claims are about (``slm.tune.claims`` and the sweep's claim experiments).
SLM_IS, SLM_MIX, SLM_PN, SOUP = dense.Importance.name, mixture.Mixture.name, projected.Projected.name, soup.Soup.name
DISTILLED = dense.DISTILLED


def dense_record(gpt: dict) -> dict:
    """The architecture record of a plain dense GPT (``gpt``: its ``GPTConfig`` as a dict)."""
    return {"method": BASELINE, "gpt": gpt}


def sweep_methods(cfg: JobConfig) -> list[str]:
    """The methods a sweep compares: ``sweep.methods``, or when it lists none every method swept by
    default (all but DSIR)."""
    return list(cfg.sweep.methods) or [n for n in names() if get(n).swept_by_default]


def check_job(cfg: JobConfig) -> None:
    """The job's method names, checked against the registry before anything runs (the config loader
    checks keys and types; which methods exist is this package's to say)."""
    get(cfg.pretrain.method, "pretrain.method")
    for name in cfg.sweep.methods:
        get(name, "sweep.methods")
    sw, compared = cfg.sweep, sweep_methods(cfg)
    if (sw.distill or sw.salt_kd_share) and BASELINE not in compared:
        raise ConfigError(f"config key 'sweep.methods': distillation's student and SALT's teacher are the "
                          f"{BASELINE} small model: add {BASELINE}")
    if sw.all_experts and SLM_MIX not in compared:
        raise ConfigError(f"config key 'sweep.all_experts': needs {SLM_MIX} in sweep.methods")


def display(name: str) -> tuple[str, str]:
    """(paper name, plot colour) of a results table's method: a registered method, or distilled rows."""
    if name == DISTILLED:
        return dense.DISTILLED_PAPER_NAME, dense.DISTILLED_COLOR
    method = get(name, "method")
    return method.paper_name, method.color


__all__ = ["BASELINE", "DISTILLED", "SLM_IS", "SLM_MIX", "SLM_PN", "SOUP", "Method", "check_job", "dense_record",
           "display", "get", "load_model", "names", "read_metadata", "register", "save_model", "sweep_methods"]
