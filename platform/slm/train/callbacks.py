"""Callbacks: what happens around the steps, kept out of the loop (OLMo-core's pattern).

Each callback sees the loop (``loop.step``, ``loop.progress``, ``loop.rank``…) and the step's metrics
dict, which it may add to; they run in list order, so ``Throughput`` fills in tokens/s and MFU before
the loggers write them. ``Checkpointer`` is the one place that reports to the session (Ray Train's
``ray.train.report``, or a local run's own checkpoints): every rank reports at the same steps (Ray Train
requires it), with a checkpoint attached when one is due.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.tensorboard import SummaryWriter

from slm.artifacts import atomic_write_json
from slm.layout import TrainOutput


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


class MetricsLogger(Callback):
    """Rank 0: ``metrics.jsonl`` and TensorBoard event files under the run's output folder."""

    def __init__(self, output: TrainOutput):
        self.output = output

    def on_train_start(self, loop) -> None:
        if loop.rank != 0:
            return

        self.output.logs.mkdir(parents=True, exist_ok=True)
        self.jsonl = open(self.output.metrics, "a")  # noqa: SIM115 (open for the whole run)
        self.tb = SummaryWriter(str(self.output.tensorboard))

    def _write(self, metrics: dict) -> None:
        self.jsonl.write(json.dumps(metrics) + "\n")
        self.jsonl.flush()
        for key, value in metrics.items():
            if isinstance(value, int | float) and key not in ("step", "wall_time"):
                self.tb.add_scalar(key.replace(".", "/"), value, metrics["step"])
        self.tb.flush()

    def on_step_end(self, loop, metrics: dict) -> None:
        # an evaluation's step is logged whatever the interval: the learning curves are read from here
        if loop.rank == 0 and (is_log_step(loop) or "eval.macro.loss" in metrics):
            self._write(metrics)

    def on_train_end(self, loop, metrics: dict) -> None:
        if loop.rank == 0:
            self.jsonl.close()
            self.tb.close()


class ProgressPrinter(Callback):
    """Rank 0: one line per logging interval in the job log."""

    def __init__(self, name: str):
        self.name = name

    def on_step_end(self, loop, metrics: dict) -> None:
        if loop.rank != 0 or not is_log_step(loop):
            return
        parts = [f"[train] {self.name} step {metrics['step']}", f"loss {metrics['loss']:.4f}"]
        if "kd" in metrics:
            parts.append(f"kd {metrics['kd']:.4f} ω {metrics['omega']:.3f}")
        parts.append(f"lr {metrics['lr']:.2e}")
        if "tokens_per_s" in metrics:
            parts.append(f"{metrics['tokens_per_s']:.0f} tok/s mfu {100 * metrics['mfu']:.1f}%")
        if "eval.macro.perplexity" in metrics:
            parts.append(f"valid ppl {metrics['eval.macro.perplexity']:.2f}")
        # Not print(): Ray Train patches it to go to its logger *and*, with stdout redirected as in a
        # Ray worker, to stdout too, so each line reached the job log twice.
        sys.stdout.write(" | ".join(parts) + "\n")
        sys.stdout.flush()


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
            metrics.update({f"eval.{d}.{k}": v for d, r in result.items() for k, v in r.items() if k != "tokens"})


class Snapshotter(Callback):
    """The model as it is at given steps, kept for good: ``snapshots/step-<N>.safetensors`` plus its cost so
    far in ``snapshots.json``. One pretraining run then serves several pretraining budgets (the sweeps
    specialize from each snapshot)."""

    def __init__(self, steps: list[int]):
        self.steps = set(steps)

    def on_step_end(self, loop, metrics: dict) -> None:
        step = loop.progress.step
        if step not in self.steps:
            return
        model = loop.exported_model()  # every rank: a gather under ZeRO-3
        if loop.rank != 0:
            return

        path, index = loop.output.snapshot(step), loop.output.snapshot_index
        path.parent.mkdir(parents=True, exist_ok=True)
        loop.write_model(model, path)
        known = json.loads(index.read_text()) if index.exists() else {}
        known[str(step)] = {"model": str(path), "step": step, "tokens": loop.progress.tokens,
                            "cost": {"flops": loop.progress.flops, "device_seconds": loop.progress.device_seconds}}
        atomic_write_json(index, known)


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
