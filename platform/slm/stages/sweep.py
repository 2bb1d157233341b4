"""``sweep``: the budget sweep on Ray Tune — pretraining once per (method, size), trials for the rest."""

from __future__ import annotations

from pathlib import Path

from slm.job import JobConfig
from slm.stages import evaluated_domains, stage


@stage("sweep", trains=("pretrain", "specialize"),
       reads_domains=lambda cfg: evaluated_domains(cfg) + [("sweep.domains", d) for d in cfg.sweep.domains],
       label=lambda cfg: f"sweep {cfg.sweep.name}")
def sweep(cfg: JobConfig, run_dir: Path) -> dict:
    """The budget sweep of ``sweep`` on Ray Tune: pretraining once per (method, size), trials for the rest."""
    from slm.tune.sweep import run_sweep

    return run_sweep(cfg)
