"""The dense methods: one GPT, differing only in the data it pretrains on.

- ``generic``: every generic window, uniformly. The baseline, and the model distillation and SALT use.
- ``importance`` (Plan-Early's SLM-is, CRISP): a subset of generic resampled to the domain's cluster
  histogram (``slm data resample --method crisp``); pretrained once per domain.
- ``dsir`` (DSIR, the peer baseline for data selection): a subset chosen by hashed n-gram importance
  weights (``--method dsir``); pretrained once per domain.
"""

from __future__ import annotations

from slm.methods.base import Method
from slm.methods.registry import register


@register
class Generic(Method):
    name = "generic"
    paper_name = "generic"
    color = "tab:gray"
    swept_by_default = True


class _Resampled(Method):
    """Pretrained on a generic subset chosen for one domain by a resampling method."""

    per_domain = True
    subset: str  # resample.methods' name of its subset

    def pretrain_set(self, domain: str) -> str:
        return f"resampled/{domain}/{self.subset}"


@register
class Importance(_Resampled):
    name = "importance"
    paper_name = "SLM-is (CRISP)"
    color = "tab:green"
    subset = "crisp"
    swept_by_default = True


@register
class DSIR(_Resampled):
    name = "dsir"
    paper_name = "DSIR"
    color = "tab:olive"
    subset = "dsir"
    swept_by_default = False  # a peer baseline for data selection: compared when a sweep names it


# Distillation is a specialization of the generic model with a teacher (``specialize.teacher``), not a
# pretraining method; the results table names its rows so, and the plots give them a colour of their own.
DISTILLED = "distill"
DISTILLED_PAPER_NAME = "SLM-d (distilled)"
DISTILLED_COLOR = "tab:red"
