"""What the loop asks of whoever runs it: its rank and world, the checkpoint to resume from, and where
its reports and checkpoints go.

- ``RayTrainSession``: a worker of Ray Train's ``TorchTrainer`` (``train.num_workers`` ≥ 1). Ray Train
  holds the checkpoints (``ray.train.report``), restarts failed workers and resumes a rerun.
- ``LocalSession``: the loop in this process, without Ray Train (``train.num_workers: 0``): a Tune trial
  that trains on its own core, a sweep's pretraining in the driver, a debugging session. It keeps its
  own checkpoints (the same folders the Ray Train strategy writes, renamed into place when complete, the
  newest ``keep`` kept) and resumes from the newest when the same run is started again. Inside a Tune
  trial its metric reports go to Tune, so a scheduler (ASHA) sees them as it sees Ray Train's.

Starting a Ray Train run costs ~10–25 s on 2 cores (a controller, a worker group, a process group); a
trial of a few dozen steps on one core is over in less than that, which is why trials train locally.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import ray.train
import ray.tune

from slm.log import logger
from slm.train import integrity

log = logger(__name__)


class RayTrainSession:
    """The loop as a Ray Train worker."""

    def __init__(self):
        ctx = ray.train.get_context()
        self.rank, self.world = ctx.get_world_rank(), ctx.get_world_size()

    @contextlib.contextmanager
    def resume_from(self) -> Iterator[Path | None]:
        """Ray Train's latest checkpoint, or (when it is not whole) the newest whole one beside it in the
        run's storage (``slm.train.integrity``)."""
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:  # a first run, or Ray Train's record set aside (``integrity.set_aside_stale_record``)
            experiment = Path(ray.train.get_context().get_storage().experiment_fs_path)
            yield integrity.newest_whole(integrity.step_folders(experiment), self._log)
            return
        latest = Path(checkpoint.path)
        if latest.is_dir() and integrity.problem(latest) is not None:  # local (or mounted) storage
            siblings = [p for p in integrity.step_folders(latest.parent) if p.name <= latest.name]
            yield integrity.newest_whole(siblings, self._log)
            return
        with checkpoint.as_directory() as folder:
            yield Path(folder)

    def _log(self, message: str) -> None:
        if self.rank == 0:
            log.info(f"[train] {message}")

    def report(self, metrics: dict, checkpoint: Path | None = None, step: int = 0) -> None:
        """Metrics alone go through a background thread (a synchronous report waits for the controller's
        2 s poll); a checkpoint is reported synchronously and persisted when this returns."""
        if checkpoint is None:
            ray.train.report(metrics, checkpoint_upload_mode=ray.train.CheckpointUploadMode.ASYNC)
        else:
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(checkpoint),
                             checkpoint_dir_name=step_folder(step))


def step_folder(step: int) -> str:
    return f"step-{step:08d}"



class LocalSession:
    """The loop in this process: rank 0 of 1, checkpoints under ``folder``."""

    rank, world = 0, 1

    def __init__(self, folder: Path, keep: int):
        self.folder, self.keep = folder, max(1, keep)
        self.in_tune = _in_tune_session()

    def checkpoints(self) -> list[Path]:
        """Complete checkpoints, oldest first (a folder appears under its step name only once whole)."""
        return integrity.step_folders(self.folder)

    @contextlib.contextmanager
    def resume_from(self) -> Iterator[Path | None]:
        """The newest whole checkpoint (``slm.train.integrity``), saying which were passed over."""
        if self.folder.exists():  # a checkpoint being copied when the process was killed
            for partial in self.folder.glob(".step-*.tmp-*"):
                shutil.rmtree(partial, ignore_errors=True)
        yield integrity.newest_whole(self.checkpoints(), lambda m: log.info(f"[train] {m}"))

    def report(self, metrics: dict, checkpoint: Path | None = None, step: int = 0) -> None:
        if checkpoint is not None:
            target = self.folder / step_folder(step)
            staged = self.folder / f".{target.name}.tmp-{os.getpid()}"
            shutil.rmtree(staged, ignore_errors=True)
            shutil.copytree(checkpoint, staged)
            if target.exists():  # the same step written again (a resumed run that ends where it resumed)
                shutil.rmtree(target)
            os.replace(staged, target)
            for old in self.checkpoints()[:-self.keep]:
                shutil.rmtree(old, ignore_errors=True)
        if self.in_tune:

            ray.tune.report(metrics)


def _in_tune_session() -> bool:
    try:  # a private function of Ray's, so its absence (another Ray version) means "not in Tune"
        from ray.tune.trainable.trainable_fn_utils import _in_tune_session as in_tune
    except ImportError:
        return False
    return bool(in_tune())
