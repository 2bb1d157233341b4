"""Every path inside a run directory, named once.

A run directory (``run.root/run.name``) holds each stage's output folder, whose names the job's sections
set (``cluster.output``, ``pack.output``, …). :class:`RunLayout` turns a job config into those paths, and
:class:`TrainOutput` names what one training run writes into its folder; no other module joins these
names by hand. ``require`` is how a stage asks for an input another stage makes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from slm.artifacts import atomic_write_json, check_recorded
from slm.config import check_name


@dataclass
class RunDirConfig:
    """Where one experiment's outputs live: ``<root>/<name>/``."""

    name: str = "default"
    root: str = "runs"

    def validate(self, prefix: str = "") -> None:
        check_name(self.name, f"{prefix}name")  # one folder under root: never a path out of it

    @property
    def dir(self) -> Path:
        return Path(self.root).expanduser() / self.name


class _Output(Protocol):
    output: str  # a stage's folder in the run directory


class _SweepOutput(Protocol):
    output: str
    name: str


class LaidOut(Protocol):
    """What the layout reads of a job: where the run is, and each stage's folder name (``slm.job.JobConfig``
    has it; the layout, at the bottom of the package, names no section type above it)."""

    run: RunDirConfig
    stats: _Output
    cluster: _Output
    histogram: _Output
    resample: _Output
    tokenizer: _Output
    pack: _Output
    pretrain: _Output
    specialize: _Output
    sweep: _SweepOutput


class MissingInputError(FileNotFoundError):
    """A stage's input is not there: the message names it and the stage that makes it."""


def require(path: Path, made_by: str) -> Path:
    """``path``, which the stage ``made_by`` writes: refused in one line when it is missing, or when it is a
    file its stage's manifest records and its bytes are no longer what was written."""
    if not path.exists():
        raise MissingInputError(f"{path} does not exist: run the '{made_by}' stage first "
                                f"(with the same run.root/run.name)")
    if path.is_file():
        check_recorded(path)
    return path


@dataclass(frozen=True)
class Snapshot:
    """A pretraining run's model at one step, with what it cost so far (an entry of ``snapshots.json``)."""

    model: str
    step: int
    tokens: int
    flops: float
    device_seconds: float


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

    def read_snapshots(self) -> dict[int, Snapshot]:
        """The run's snapshots by step (JSON keys them by the step's text; this is where that ends)."""
        index = json.loads(require(self.snapshot_index, "pretrain").read_text())
        return {int(step): Snapshot(e["model"], e["step"], e["tokens"], e["cost"]["flops"], e["cost"]["device_seconds"])
                for step, e in index.items()}

    def record_snapshot(self, step: int, entry: dict) -> None:
        """``snapshots.json`` with ``entry`` (its model, step, tokens, cost, …) as the snapshot at ``step``,
        written atomically, in step order: the one writer of the index (the loop's snapshots, WSD's branches)."""
        index = self.snapshot_index
        known = json.loads(index.read_text()) if index.exists() else {}
        known[str(step)] = entry
        atomic_write_json(index, dict(sorted(known.items(), key=lambda kv: int(kv[0]))))

    def branch_point(self, step: int) -> Path:
        """A WSD trunk's whole training state at ``step``, kept for good: where a cooldown branch starts."""
        return self.dir / "branch_points" / f"step-{step:08d}"

    def branch(self, budget: int) -> TrainOutput:
        """The cooldown branch that trains budget ``budget`` from the trunk (its own run folder)."""
        return TrainOutput(self.dir / "branches" / f"step-{budget:08d}")

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
    cfg: LaidOut

    @classmethod
    def of(cls, cfg: LaidOut) -> RunLayout:
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

    def vocab_size(self) -> int:
        """The run's BPE vocabulary (special tokens included): the models' embedding size."""
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(require(self.tokenizer_json, "tokenizer"))).get_vocab_size()

    def cluster_info(self) -> dict:
        """``clusters.json``: the clustering's k, sizes and titles."""
        return json.loads(require(self.clusters_json, "cluster").read_text())

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
    def mlruns(self) -> Path:
        """MLflow's default file store for the run's training runs (``tracking.mlflow_uri`` unset)."""
        return self.dir / "mlruns"

    @property
    def sweep(self) -> Path:
        return self.dir / self.cfg.sweep.output / self.cfg.sweep.name


def branch_name(run: str, budget: int) -> str:
    """A WSD run's cooldown branch to ``budget``, as logs, TensorBoard and the curves table name it."""
    return f"{run}@{budget}"
