"""Callbacks: what happens around the steps, kept out of the loop (OLMo-core's pattern).

Each callback sees the loop (``loop.step``, ``loop.progress``, ``loop.rank``…) and the step's metrics
dict, which it may add to; they run in list order, so ``Throughput`` fills in tokens/s and MFU before
the loggers write them. ``Checkpointer`` is the one place that reports to the session (Ray Train's
``ray.train.report``, or a local run's own checkpoints): every rank reports at the same steps (Ray Train
requires it), with a checkpoint attached when one is due.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import torch
from torch.utils.tensorboard import SummaryWriter

from slm.artifacts import atomic_write_text
from slm.layout import TrainOutput
from slm.log import logger
from slm.train import integrity
from slm.train.budget import exhausted, spent

log = logger(__name__)


class Callback:
    def on_train_start(self, loop) -> None: ...

    def on_step_end(self, loop, metrics: dict) -> None: ...

    def on_train_end(self, loop, metrics: dict) -> None: ...


def is_log_step(loop) -> bool:
    return loop.progress.step % loop.train.log_every == 0 or loop.finished


class Throughput(Callback):
    """Tokens/s and model-FLOPs utilisation over each logging interval (all workers together), MFU
    against the peak of the precision in use on this device (``loop.peak``)."""

    def on_train_start(self, loop) -> None:
        self._t, self._tokens, self._flops = loop.progress.device_seconds, loop.progress.tokens, loop.progress.flops

    def on_step_end(self, loop, metrics: dict) -> None:
        if not is_log_step(loop):
            return
        p = loop.progress
        seconds = (p.device_seconds - self._t) / loop.world  # device-seconds → wall seconds
        if seconds > 0:
            metrics["tokens_per_s"] = (p.tokens - self._tokens) / seconds
            metrics["mfu"] = (p.flops - self._flops) / seconds / (loop.peak.flops * loop.world)
        self._t, self._tokens, self._flops = p.device_seconds, p.tokens, p.flops


def is_logged_step(loop, metrics: dict) -> bool:
    """Rank 0 logs every ``log_every`` steps and every evaluation (the learning curves are read from it)."""
    return loop.rank == 0 and (is_log_step(loop) or "eval.macro.loss" in metrics)


# Our metric names → the tags trackers show: the conventions of TensorBoard, MLflow and W&B dashboards.
TAGS = {"loss": "train/loss", "ce": "train/ce", "kd": "train/kd", "omega": "train/kd_weight", "lr": "train/lr",
        "smoothed_ce": "train/smoothed_ce", "z_loss": "train/z_loss",
        "grad_norm": "train/grad_norm", "tokens_per_s": "perf/tokens_per_s", "mfu": "perf/mfu",
        "tokens": "progress/tokens", "flops": "progress/flops", "device_seconds": "progress/device_seconds"}
EVAL_TAGS = {"perplexity": "ppl", "loss": "loss", "accuracy": "accuracy"}


def tracker_metrics(metrics: dict) -> dict[str, float]:
    """A step's metrics under their trackers' tags (``train/loss``, ``eval/<domain>/ppl``, …)."""
    out = {}
    for key, value in metrics.items():
        if not isinstance(value, int | float):
            continue
        if key in TAGS:
            out[TAGS[key]] = float(value)
        elif key.startswith("eval."):
            _, domain, name = key.split(".", 2)
            out[f"eval/{domain}/{EVAL_TAGS.get(name, name)}"] = float(value)
    return out


class MetricsLogger(Callback):
    """Rank 0: ``metrics.jsonl`` in the run's folder (always: the platform reads it) and, when
    ``train.loggers`` has it, TensorBoard event files (``tensorboard``: the run's folder in the run
    directory's TensorBoard logdir, else ``logs/tensorboard`` in its folder)."""

    def __init__(self, output: TrainOutput, tensorboard: str = "", enabled: bool = True):
        self.output, self.tensorboard = output, tensorboard or str(output.tensorboard)
        self.enabled = enabled

    def on_train_start(self, loop) -> None:
        if loop.rank != 0:
            return
        self.output.logs.mkdir(parents=True, exist_ok=True)
        self._truncate(loop.progress.step)
        self.jsonl = open(self.output.metrics, "a")  # noqa: SIM115 (open for the whole run)
        self.tb = SummaryWriter(self.tensorboard) if self.enabled else None
        if self.tb is not None and loop.progress.step == 0 and loop.initial_eval:
            # The evaluation before the first step (Evaluator, which runs first): every eval curve starts
            # at step 0, so a short specialization's curve is a line, not one dot at its last step.
            for tag, value in tracker_metrics(eval_metrics(loop.initial_eval)).items():
                self.tb.add_scalar(tag, value, 0)

    def _truncate(self, step: int) -> None:
        """A resumed run logs from its checkpoint's step on: the rows an interrupted run wrote after it
        go (and a line cut short by the interruption), so that the log has each step once."""
        path = self.output.metrics
        if not path.exists():
            return
        kept, dropped = [], 0
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                dropped += 1
                continue
            if row.get("step", 0) <= step:
                kept.append(line)
            else:
                dropped += 1
        if dropped:
            atomic_write_text(path, "".join(line + "\n" for line in kept))

    def on_step_end(self, loop, metrics: dict) -> None:
        if not is_logged_step(loop, metrics):
            return
        self.jsonl.write(json.dumps(metrics) + "\n")
        self.jsonl.flush()
        if self.tb is not None:
            for tag, value in tracker_metrics(metrics).items():
                self.tb.add_scalar(tag, value, metrics["step"])
            self.tb.flush()

    def on_train_end(self, loop, metrics: dict) -> None:
        if loop.rank == 0:
            self.jsonl.close()
            if self.tb is not None:
                self.tb.close()


class Trackers(Callback):
    """Rank 0: the run in MLflow and / or W&B (``train.loggers``), with the trackers' tags, its config as
    parameters and its name as the run name. A resumed run continues the same tracker run (its id is
    kept in ``logs/``)."""

    def __init__(self, names: list[str], tracking, run_name: str, params: dict):
        self.names, self.tracking, self.run_name, self.params = names, tracking, run_name, params
        self.mlflow = self.wandb = None  # the tracker modules' runs, once started (rank 0)

    def on_train_start(self, loop) -> None:
        if loop.rank != 0:
            return
        logs = loop.output.logs
        logs.mkdir(parents=True, exist_ok=True)
        if "mlflow" in self.names:
            import mlflow

            if self.tracking.mlflow_uri.startswith("file:"):
                # MLflow 3 keeps its file store in "maintenance mode" behind this opt-in: a local store
                # needs no server and no database package (mlflow-skinny has none).
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            mlflow.set_tracking_uri(self.tracking.mlflow_uri)
            mlflow.set_experiment(self.tracking.experiment)
            id_file = logs / "mlflow_run_id"
            run = mlflow.start_run(run_id=id_file.read_text().strip() if id_file.exists() else None,
                                   run_name=self.run_name)
            if not id_file.exists():
                id_file.write_text(run.info.run_id)
                mlflow.log_params(self.params)
            self.mlflow = mlflow
        if "wandb" in self.names:
            import wandb

            id_file = logs / "wandb_run_id"
            run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
            id_file.write_text(run_id)
            self.wandb = wandb.init(project=self.tracking.experiment, name=self.run_name, id=run_id,
                                    resume="allow", dir=str(logs), mode=self.tracking.wandb_mode,
                                    config=self.params, settings=wandb.Settings(silent=True))
            log.info(f"[train] {self.run_name}: W&B run {run_id} ({self.tracking.wandb_mode}) in {self.wandb.dir}")

    def on_step_end(self, loop, metrics: dict) -> None:
        if not is_logged_step(loop, metrics):
            return
        tagged = tracker_metrics(metrics)
        if self.mlflow is not None:
            self.mlflow.log_metrics(tagged, step=metrics["step"])
        if self.wandb is not None:
            self.wandb.log(tagged, step=metrics["step"])

    def on_train_end(self, loop, metrics: dict) -> None:
        if self.mlflow is not None:
            self.mlflow.end_run()
        if self.wandb is not None:
            self.wandb.finish()


class ProgressPrinter(Callback):
    """Rank 0: one plain line per logging interval — the step against the budget, its percentage, loss,
    throughput, MFU and the time left at the run's pace so far — and a summary when the run ends (where
    the model is, its valid perplexity, the wall time). Plain lines, no bars: a worker's output is a log
    file or a Ray driver's relay, never a terminal."""

    def __init__(self, name: str):
        self.name = name

    def on_train_start(self, loop) -> None:
        self._started, self._from_step = time.perf_counter(), loop.progress.step
        self._from_fraction = spent(loop.train.budget, loop.progress)[0]

    def on_step_end(self, loop, metrics: dict) -> None:
        if loop.rank != 0 or not is_log_step(loop):
            return
        fraction, done = spent(loop.train.budget, loop.progress)
        parts = [f"[train] {self.name} {done} ({100 * fraction:.0f}%)", f"loss {metrics['loss']:.4f}"]
        if "kd" in metrics:
            parts.append(f"kd {metrics['kd']:.4f} ω {metrics['omega']:.3f}")
        parts.append(f"lr {metrics['lr']:.2e}")
        if "tokens_per_s" in metrics:
            parts.append(f"{metrics['tokens_per_s']:.0f} tok/s mfu {100 * metrics['mfu']:.1f}%")
        if "eval.macro.perplexity" in metrics:
            evaluated = sorted(d for d in loop.last_eval if d != "macro")  # this step's (Evaluator runs first)
            parts.append(f"valid ppl {metrics['eval.macro.perplexity']:.2f} (mean over {', '.join(evaluated)})")
        elapsed, progressed = time.perf_counter() - self._started, fraction - self._from_fraction
        if progressed > 0 and fraction < 1:
            parts.append(f"ETA {format_seconds(elapsed * (1 - fraction) / progressed)}")
        # Through slm's logger, not print(): Ray Train patches print to go to its logger *and*, with stdout
        # redirected as in a Ray worker, to stdout too, so each line reached the job log twice.
        log.info(" | ".join(parts))

    def on_train_end(self, loop, metrics: dict) -> None:
        if loop.rank != 0:
            return
        result = loop.last_eval or {}
        ppl = ", ".join(f"{d} {r['perplexity']:.2f}" for d, r in result.items() if d != "macro")
        log.info(f"[train] {self.name} done: {loop.progress.step - self._from_step} steps in "
                 f"{format_seconds(time.perf_counter() - self._started)} (step {loop.progress.step}, "
                 f"stopped by {exhausted(loop.train.budget, loop.progress) or 'resume'}); "
                 f"valid ppl {ppl or 'not evaluated'}; model {loop.output.model}")


def format_seconds(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Evaluator(Callback):
    """Per-domain perplexity and accuracy every ``eval_every`` steps, before training and at the end."""

    def on_train_start(self, loop) -> None:
        if loop.valid and loop.progress.step == 0:
            loop.initial_eval = loop.run_evaluation()

    def on_step_end(self, loop, metrics: dict) -> None:
        every = loop.train.eval_every
        if loop.valid and (loop.finished or (every and loop.progress.step % every == 0)):
            result = loop.run_evaluation()
            loop.last_eval = result
            metrics.update(eval_metrics(result))


def eval_metrics(result: dict) -> dict:
    """An evaluation's result as flat metrics (``eval.<domain>.<measure>``)."""
    return {f"eval.{d}.{k}": v for d, r in result.items() for k, v in r.items() if k not in ("tokens", "rows")}


class AtSteps(Callback):
    """A callback that acts at given steps."""

    def __init__(self, steps: list[int]):
        self.steps = set(steps)

    def due(self, loop) -> bool:
        return loop.progress.step in self.steps


class Snapshotter(AtSteps):
    """The model as it is at given steps, kept for good: ``snapshots/step-<N>.safetensors`` plus its cost so
    far in ``snapshots.json``. One pretraining run then serves several pretraining budgets (the sweeps
    specialize from each snapshot)."""

    def on_step_end(self, loop, metrics: dict) -> None:
        if not self.due(loop):
            return
        step = loop.progress.step
        model = loop.exported_model()  # every rank: a gather under ZeRO-3
        if loop.rank != 0:
            return

        path = loop.output.snapshot(step)
        path.parent.mkdir(parents=True, exist_ok=True)
        loop.write_model(model, path)
        loop.output.record_snapshot(step, {
            "model": str(path), "step": step, "tokens": loop.progress.tokens,
            "cost": {"flops": loop.progress.flops, "device_seconds": loop.progress.device_seconds}})


class BranchPoints(AtSteps):
    """A WSD trunk's whole training state at given steps (model, optimizer, schedule, sampler, RNG,
    progress), kept for good in ``branch_points/step-<N>/``: a smaller budget's cooldown branch starts from
    it (``slm.train.trainer``). Every rank writes its part as for a checkpoint, into a folder of its own,
    then copies it into one staging folder (the ranks' files and their lists are distinct), which rank 0
    renames into place once all have (on a cluster the run's folder is shared storage). A resumed trunk
    that passes a step again finds its state there, whole, and leaves it."""

    def on_step_end(self, loop, metrics: dict) -> None:
        if not self.due(loop):
            return
        target = loop.output.branch_point(loop.progress.step)
        if target.exists() and integrity.problem(target) is None:
            return
        staging = target.with_name(f".{target.name}.tmp")
        if loop.rank == 0:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
        with tempfile.TemporaryDirectory(prefix="slm-branch-") as tmp:
            loop.save_state(Path(tmp))
            loop.gather(None)  # a barrier: the staging folder exists before any rank copies into it
            shutil.copytree(tmp, staging, dirs_exist_ok=True)
        loop.gather(None)  # … and every rank has copied before rank 0 renames it
        if loop.rank == 0:
            shutil.rmtree(target, ignore_errors=True)
            os.replace(staging, target)


class Checkpointer(Callback):
    """Every ``checkpoint_every`` steps and at the end: every rank writes its part of the state into a
    temporary folder and hands it to the session (Ray Train merges the ranks' folders into one checkpoint
    and returns once it is persisted; a local run renames it into place); every ``report_every`` steps
    it reports metrics alone.

    Ray Train's controller takes one report per worker per poll (every 2 s): reports more frequent than
    that queue up and the next synchronous one waits for the whole queue, so the per-step logs go to
    metrics.jsonl and TensorBoard (``log_every``) and Ray gets the sparser ``report_every``."""

    def on_step_end(self, loop, metrics: dict) -> None:
        every, report = loop.train.checkpoint_every, loop.train.report_every
        due = loop.finished or (every and loop.progress.step % every == 0)
        if not (due or (report and loop.progress.step % report == 0)):
            return
        reported = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
        if not due:
            loop.session.report(reported)
            return
        with tempfile.TemporaryDirectory(prefix="slm-ckpt-") as tmp:
            loop.save_state(Path(tmp))
            loop.session.report(reported, checkpoint=Path(tmp), step=loop.progress.step)


def timer() -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()
