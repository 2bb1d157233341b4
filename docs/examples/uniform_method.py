"""A new method in one module (docs/architecture.md, "Adding a method"): the uniform control of SLM-is.

A dense GPT pretrained, per domain, on the generic subset that ``slm data resample --method uniform``
draws: generic windows kept at random, with the same token budget as the CRISP subset. It is what SLM-is
must beat to show that the importance weights, and not the smaller subset, make its gain. Put this file
in ``platform/slm/methods/``, import it in ``slm/methods/__init__.py``, and ``pretrain.method: uniform``
or ``sweep.methods: [..., uniform]`` run it: the trainer, the sweep, the report and the CLI ask the
registry, and nothing else changes. (The platform does not ship it; ``tests/test_methods_registry.py``
imports it from here.)
"""

from __future__ import annotations

from slm.methods.base import Method
from slm.methods.registry import register


@register
class UniformSubset(Method):
    name = "uniform"
    paper_name = "uniform subset (SLM-is's control)"
    color = "tab:brown"
    per_domain = True  # its subset is drawn for one domain's budget: paid again per domain
    swept_by_default = False  # a control: compared when a sweep names it

    def pretrain_set(self, domain: str) -> str:
        return f"resampled/{domain}/uniform"
