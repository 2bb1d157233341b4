"""What a training worker is handed: one typed value, made by the driver (``slm.train.trainer``).

Workers never read the job's YAML and never guess a default: every section arrives resolved, paths are
absolute (workers may run on other machines), and the run's hash is this value's (``config_hash``), so
a changed setting is a new run and an unchanged one resumes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slm.config import NOT_HASHED
from slm.methods.base import Architecture
from slm.models.config import ModelConfig
from slm.train.config import LoraConfig, SelectionConfig, TeacherConfig, TrainConfig


@dataclass(frozen=True)
class WorkerSpec:
    name: str  # the run's name, in logs and summaries
    config_key: str  # "pretrain.train" or "specialize.train": errors name the user's keys
    output: str  # the run's folder (TrainOutput)
    train: TrainConfig
    # The architecture record of what the run starts from: the method's model, or the dense GPT a
    # specialization fine-tunes.
    arch: Architecture
    data: str  # the packed arrays it trains on
    valid: dict[str, str]  # domain → packed valid arrays
    model: ModelConfig = field(default_factory=ModelConfig)  # the method's knobs (e.g. the soup's s)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    selection: SelectionConfig = field(default_factory=SelectionConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    snapshot_steps: list[int] = field(default_factory=list)
    # A WSD trunk: steps at which its whole training state is kept for good (TrainOutput.branch_point), each
    # where a smaller budget's cooldown branch leaves it.
    branch_points: list[int] = field(default_factory=list)
    # A cooldown branch: the trunk's state it starts from when it has no checkpoint of its own.
    start_from: str = ""
    # Each domain's histogram over the coarse clusters (``slm.data.histogram.coarse_histograms``): how a
    # clustered method serves a domain; empty for dense methods.
    domain_h: dict[str, list[float]] = field(default_factory=dict)
    init: str = ""  # specialization: the instantiated dense model it starts from
    init_sha: str = ""  # … and its hash, so a changed starting point is a new run
    rows: str = ""  # specialization: the in-domain subset (row indices into ``data``)
    # Where its TensorBoard events go (RunLayout.tensorboard: one logdir per run directory or sweep, the
    # run's short name under it); empty: ``logs/tensorboard`` in the run's folder.
    tensorboard: str = field(default="", metadata=NOT_HASHED)
