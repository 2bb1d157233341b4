"""Every path inside a run directory, named once.

A run directory (``run.root/run.name``) holds each stage's output folder, whose names the job's sections
set (``cluster.output``, ``pack.output``, …). :class:`RunLayout` turns a job config into those paths, and
:class:`TrainOutput` names what one training run writes into its folder; no other module joins these
names by hand. ``require`` is how a stage asks for an input another stage makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from slm.job import JobConfig


class MissingInputError(FileNotFoundError):
    """A stage's input is not there: the message names it and the stage that makes it."""


def require(path: Path, made_by: str) -> Path:
    if not path.exists():
        raise MissingInputError(f"{path} does not exist: run the '{made_by}' stage first "
                                f"(with the same run.root/run.name)")
    return path


@dataclass(frozen=True)
class TrainOutput:
    """One training run's folder (``checkpoints/<name>/`` or ``specialized/<domain>/<name>/``)."""

    dir: Path

    @property
    def model(self) -> Path:
        return self.dir / "model.safetensors"

    @property
    def summary(self) -> Path:
        return self.dir / "summary.json"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def metrics(self) -> Path:
        return self.logs / "metrics.jsonl"

    @property
    def tensorboard(self) -> Path:
        return self.logs / "tensorboard"

    @property
    def snapshots(self) -> Path:
        return self.dir / "snapshots"

    @property
    def snapshot_index(self) -> Path:
        """``snapshots.json``: each snapshot's step, tokens and cost so far."""
        return self.snapshots / "snapshots.json"

    def snapshot(self, step: int) -> Path:
        return self.snapshots / f"step-{step:08d}.safetensors"

    def ray_train(self) -> Path:
        """Ray Train's storage for the run (its checkpoints, the checkpoint manager's state)."""
        return self.dir / "ray_train"

    def local_train(self, run_name: str) -> Path:
        """The checkpoints of a run in this process (``train.num_workers: 0``)."""
        return self.dir / "local_train" / run_name

    @property
    def init(self) -> Path:
        """A specialization's starting point: the dense model instantiated for its domain."""
        return self.dir / "init.safetensors"

    @property
    def rows(self) -> Path:
        """A specialization's in-domain subset (row indices into the domain's packed set)."""
        return self.dir / "rows.npy"


@dataclass(frozen=True)
class RunLayout:
    dir: Path
    cfg: JobConfig

    @classmethod
    def of(cls, cfg: JobConfig) -> RunLayout:
        return cls(cfg.run.dir, cfg)

    # ---- the run's own records

    @property
    def config(self) -> Path:
        return self.dir / "config.yaml"

    def invocation(self, stamp: str) -> Path:
        """Every config the run directory was invoked with, kept (``config.yaml`` is the latest)."""
        return self.dir / "configs" / f"{stamp}.yaml"

    @property
    def results(self) -> Path:
        """Each stage's latest result, by stage: a run of some stages replaces only their entries."""
        return self.dir / "results.json"

    @property
    def stage_resources(self) -> Path:
        return self.dir / "stage_resources.json"

    # ---- data stages

    @property
    def stats(self) -> Path:
        return self.dir / self.cfg.stats.output

    @property
    def clusters(self) -> Path:
        return self.dir / self.cfg.cluster.output

    @property
    def clusters_json(self) -> Path:
        return self.clusters / "clusters.json"

    @property
    def assignments(self) -> Path:
        return self.clusters / "assignments"

    @property
    def histograms(self) -> Path:
        return self.dir / self.cfg.histogram.output

    @property
    def histograms_json(self) -> Path:
        return self.histograms / "histograms.json"

    def resampled(self, domain: str, method: str) -> Path:
        return self.dir / self.cfg.resample.output / domain / method

    @property
    def tokenizer(self) -> Path:
        return self.dir / self.cfg.tokenizer.output

    @property
    def tokenizer_json(self) -> Path:
        return self.tokenizer / "tokenizer.json"

    def packed(self, name: str) -> Path:
        """A packed set: ``generic``, ``domain/<d>``, ``valid/<d>`` or ``resampled/<d>/<method>``."""
        return self.dir / self.cfg.pack.output / name

    def packed_domain(self, domain: str) -> Path:
        return self.packed(f"domain/{domain}")

    def packed_valid(self, domain: str) -> Path:
        return self.packed(f"valid/{domain}")

    # ---- training and sweeps

    def pretrained(self, name: str) -> TrainOutput:
        return TrainOutput(self.dir / self.cfg.pretrain.output / name)

    def specialized(self, domain: str, name: str) -> TrainOutput:
        return TrainOutput(self.dir / self.cfg.specialize.output / domain / name)

    def tensorboard(self, stage: str, name: str) -> Path:
        """A training run's TensorBoard events, ``tensorboard/<stage>/<name>`` beside the folder of its
        stage's runs (the run directory; a sweep's own folder for its runs): point TensorBoard at that
        ``tensorboard`` folder and its runs read ``pretrain/generic-d1-seed0``, ``specialize/legal/…``."""
        runs = {"pretrain": self.cfg.pretrain.output, "specialize": self.cfg.specialize.output}[stage]
        return (self.dir / runs).parent / "tensorboard" / stage / name

    @property
    def sweep(self) -> Path:
        return self.dir / self.cfg.sweep.output / self.cfg.sweep.name
