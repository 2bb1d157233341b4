"""``specialize``: a pretrained model instantiated for a domain, fine-tuned on its in-domain tokens, evaluated."""

from __future__ import annotations

from pathlib import Path

from slm.job import JobConfig
from slm.stages import stage


def specialized_domain(cfg: JobConfig) -> list[tuple[str, str]]:
    return [("specialize.domain", cfg.specialize.domain)] if cfg.specialize.domain else []


@stage("specialize", trains=("specialize",), reads_domains=specialized_domain,
       label=lambda cfg: f"specialize {cfg.specialize.name or cfg.specialize.source} on "
                         f"{cfg.specialize.domain or cfg.resample.domain}")
def specialize(cfg: JobConfig, run_dir: Path) -> dict:
    """Instantiate a pretrained model for a domain, fine-tune it on ``specialize.domain_tokens``, evaluate."""
    from slm.train.trainer import specialize as train

    return train(cfg)
