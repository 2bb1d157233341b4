"""``pretrain``: one method at one size within its budget, on Ray Train."""

from __future__ import annotations

from pathlib import Path

from slm.job import JobConfig
from slm.stages import evaluated_domains, stage


@stage("pretrain", trains=("pretrain",), reads_domains=evaluated_domains,
       label=lambda cfg: f"pretrain {cfg.pretrain.method}-{cfg.pretrain.model.size_name}")
def pretrain(cfg: JobConfig, run_dir: Path) -> dict:
    """Pretrain ``pretrain.method`` at ``pretrain.model``'s size within ``pretrain.train.budget`` on Ray Train."""
    from slm.train.trainer import pretrain as train

    return train(cfg)  # the manifest: costs, evaluation, where the model is
