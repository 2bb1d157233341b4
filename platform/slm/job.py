"""A job spec: the stages to run and every section they read, each section's dataclass beside its owner
(``slm.<package>.config``), loaded by ``slm.config``.

The sections are schemas; loading a job imports the method registry (``slm.methods``: torch, never Ray),
since each method's own settings are a section of ``pretrain.model`` that the method registers. Which
methods a job may name is the registry's to say (``slm.pipeline.check_methods``, run by the CLI,
``slm run`` and the sweep's plan before anything runs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import slm.methods  # noqa: F401  (registers each method's settings: the sections pretrain.model.<method>)
from slm.config import load
from slm.corpus.config import CorpusConfig
from slm.data.config import (
    ClusterConfig,
    EmbedConfig,
    HistogramConfig,
    PackConfig,
    ResampleConfig,
    StatsConfig,
    TokenizerConfig,
)
from slm.layout import RunDirConfig
from slm.runtime import RayConfig
from slm.train.config import PretrainConfig, SpecializeConfig
from slm.tune.config import SweepConfig


@dataclass
class JobConfig:
    """A job spec: the stages to run, in order, and every section they read."""

    stages: list[str] = field(default_factory=lambda: ["corpus", "stats"])
    run: RunDirConfig = field(default_factory=RunDirConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    stats: StatsConfig = field(default_factory=StatsConfig)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    histogram: HistogramConfig = field(default_factory=HistogramConfig)
    resample: ResampleConfig = field(default_factory=ResampleConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    pack: PackConfig = field(default_factory=PackConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    specialize: SpecializeConfig = field(default_factory=SpecializeConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)


def load_job(path: str | Path | None = None, overrides: list[str] | None = None) -> JobConfig:
    """A job spec (YAML) with ``a.b=c`` overrides; unknown keys and wrong types fail with the key path."""
    return load(JobConfig, path, overrides)
