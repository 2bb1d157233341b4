"""The loop of training steps every method shares (OLMo-core's Trainer), run by each Ray Train worker
(``train_worker``) or in this process (``train_here``).

One loop: draw the step's rows from the sampler, hand them to the train module (``slm.train.module``:
the method's model, the strategy, the teacher) for one step, advance the progress and hand the step to
the callbacks (throughput, evaluation, snapshots, checkpoints, logs, progress). Methods differ only in
what the registry gives the module and the sampler; parallelism and everything around the steps live
outside this loop.

The worker's ``spec`` is a :class:`~slm.train.spec.WorkerSpec` made by ``slm.train.trainer``: workers
never read the job's YAML.
"""

from __future__ import annotations

import dataclasses
import logging
import resource
import socket
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from slm.artifacts import atomic_write_json
from slm.layout import TrainOutput
from slm.log import logger
from slm.methods.samplers import UniformSampler
from slm.runtime import verbose
from slm.train import callbacks as cb
from slm.train import hardware, integrity, numerics
from slm.train.budget import TrainState, exhausted
from slm.train.data import PackedArrays
from slm.train.module import TrainModule
from slm.train.selection import select_hard_but_learnable
from slm.train.session import LocalSession, RayTrainSession
from slm.train.spec import WorkerSpec

log = logger(__name__)


class TrainLoop:
    def __init__(self, spec: WorkerSpec, session: RayTrainSession | LocalSession):
        self.session = session
        self.rank, self.world = session.rank, session.world
        self.spec, self.train = spec, spec.train
        self.output = TrainOutput(Path(spec.output))
        self.numerics = numerics.pin(self.train.numerics, f"{spec.config_key}.numerics")  # before any kernel
        torch.set_num_threads(self.train.torch_threads)
        placement = hardware.plan_placement(self.train.use_gpu, self.world)
        self.device = hardware.worker_device(placement, ray_train=isinstance(session, RayTrainSession))
        precision = hardware.worker_precision(self.train, self.device.type, f"{spec.config_key}.precision")
        self.data = PackedArrays.open(spec.data)
        self.module = TrainModule(spec, placement, self.device, precision, self.data.seq_len, self.world, self.rank)

        rows = np.load(spec.rows) if spec.rows else np.arange(len(self.data))
        self.sampler = self.module.method.sampler(self.module.trained_arch, np.asarray(self.data.coarse), rows,
                                                  self.train.seed)
        self.kd_sampler: UniformSampler | None = None  # SALT-DS: the KD phase's rows
        self.valid = {d: PackedArrays.open(p) for d, p in spec.valid.items()}
        self.progress = TrainState()
        self.finished = False
        self.initial_eval: dict | None = None
        self.last_eval: dict | None = None
        self.callbacks: list[cb.Callback] = [
            cb.Throughput(), cb.Evaluator(), cb.Snapshotter(spec.snapshot_steps), cb.BranchPoints(spec.branch_points),
            cb.Checkpointer(),
            cb.MetricsLogger(self.output, spec.tensorboard, "tensorboard" in self.train.loggers),
            cb.ProgressPrinter(spec.name),
        ]
        trackers = [name for name in self.train.loggers if name != "tensorboard"]
        if trackers:
            self.callbacks.append(cb.Trackers(trackers, self.train.tracking, spec.name, run_params(spec)))

    # ------------------------------------------------------------------------------------ what callbacks use

    @property
    def peak(self) -> hardware.Peak:
        return self.module.peak

    @property
    def flops_per_step(self) -> float:
        return self.module.flops_per_step

    def run_evaluation(self) -> dict:
        return self.module.evaluate(self.valid, self.train.eval_tokens, self.train.batch_size, self.rank, self.world)

    def exported_model(self) -> torch.nn.Module:
        return self.module.exported_model()

    def write_model(self, model: torch.nn.Module, path: Path) -> None:
        self.module.write_model(model, path, {"steps": self.progress.step, "name": self.spec.name})

    # ------------------------------------------------------------------------------------ state

    def save_state(self, folder: Path) -> None:
        before = integrity.files_under(folder)
        self.module.save(folder, self.rank)
        worker = {"rng": torch.get_rng_state()}
        if self.rank == 0:
            worker.update(progress=self.progress.state_dict(), sampler=self.sampler.state_dict(),
                          initial_eval=self.initial_eval)
            if self.kd_sampler is not None:
                np.save(folder / "selection.npy", self.kd_sampler.rows)
        torch.save(worker, folder / f"worker-{self.rank}.pt")
        integrity.write_list(folder, self.rank, integrity.files_under(folder) - before)  # last: it vouches for them

    def load_state(self, folder: Path) -> None:
        self.module.load(folder)
        mine = torch.load(folder / f"worker-{self.rank}.pt", weights_only=True)
        lead = mine if self.rank == 0 else torch.load(folder / "worker-0.pt", weights_only=True)
        torch.set_rng_state(mine["rng"])
        self.progress.load_state_dict(lead["progress"])
        self.sampler.load_state_dict(lead["sampler"])
        self.initial_eval = lead.get("initial_eval")
        if (folder / "selection.npy").exists():
            self.kd_sampler = UniformSampler(np.load(folder / "selection.npy"), self.train.seed + 1)

    # ------------------------------------------------------------------------------------ the loop

    def agreed_device_seconds(self, local: float) -> float:
        """Wall-clock budgets must stop every rank at the same step: take the slowest rank's clock."""
        if self.world > 1 and self.train.budget.device_seconds and dist.is_initialized():
            t = torch.tensor([local], dtype=torch.float64, device=self.device)  # NCCL reduces device tensors
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return float(t)
        return local

    def gather(self, value):
        """``value`` from every rank, in rank order (a collective)."""
        if self.world == 1 or not dist.is_initialized():
            return [value]
        out = [None] * self.world
        dist.all_gather_object(out, value)
        return out

    def mean_over_ranks(self, values: list[float], needed: bool) -> list[float]:
        """The logged losses are the mean over ranks (only at logging steps: it is a collective)."""
        if not needed or self.world == 1 or not dist.is_initialized():
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return (t / self.world).tolist()

    def fit(self) -> dict:
        module = self.module
        with self.session.resume_from() as folder:
            if folder is not None:
                self.load_state(folder)
        if folder is None and self.spec.start_from:  # a cooldown branch's first start: the trunk's state
            start = Path(self.spec.start_from)
            reason = integrity.problem(start) if start.is_dir() else "not there"
            if reason is not None:
                raise RuntimeError(f"{self.spec.name}: the trunk's state at {start} cannot be started from "
                                   f"({reason}): the trunk must train again (delete {start.parent.parent} and rerun)")
            self.load_state(start)
            if self.rank == 0:
                log.info(f"[train] {self.spec.name}: branches from the trunk at step {self.progress.step}")
        elif folder is not None:
            if self.rank == 0:
                log.info(f"[train] {self.spec.name}: resumed at step {self.progress.step}")
        elif module.teacher is not None and self.spec.selection.enabled:
            rows, flops = select_hard_but_learnable(module, self.data, self.spec.selection, self.rank, self.world)
            self.kd_sampler = UniformSampler(rows, self.train.seed + 1)
            self.progress.flops += flops
        for c in self.callbacks:
            c.on_train_start(self)
        module.train()
        metrics: dict = {}
        budget = self.train.budget
        self.began = time.time()
        while not (self.finished or exhausted(budget, self.progress)):
            step = self.progress.step
            started = cb.timer()
            omega = module.kd.weight(step) if module.teacher is not None else 0.0
            sampler = self.kd_sampler if (self.kd_sampler is not None and omega > 0) else self.sampler
            rows = sampler.indices(step, self.rank, self.world, self.train.batch_size)
            tokens, coarse = self.data.take(rows)
            out = module.step(tokens, coarse, self.sampler.context(step), omega)
            elapsed = cb.timer() - started
            p = self.progress
            p.step += 1
            p.tokens += module.tokens_per_step
            p.flops += module.flops_per_step + (module.teacher_flops_per_step if omega > 0 else 0.0)
            p.device_seconds = self.agreed_device_seconds(p.device_seconds + elapsed * self.world)
            self.finished = exhausted(budget, p) is not None
            losses = self.mean_over_ranks([out.loss.item(), out.ce.item(), *(t.item() for t in out.terms.values())],
                                          cb.is_log_step(self))
            metrics = {"step": p.step, "loss": losses[0], "ce": losses[1], "lr": module.lr,
                       "grad_norm": out.grad_norm, "tokens": p.tokens, "flops": p.flops,
                       "device_seconds": p.device_seconds, "wall_time": time.time()}
            metrics.update(zip(out.terms, losses[2:], strict=True))  # each term of the objective by its name
            if "kd" in out.terms:
                metrics["omega"] = omega
            for c in self.callbacks:
                c.on_step_end(self, metrics)
        if not self.finished:  # resumed after the last step: nothing left to train, still report
            self.finished = True
        summary = self.finish(metrics)
        for c in self.callbacks:
            c.on_train_end(self, metrics)
        return summary

    def finish(self, last: dict) -> dict:
        """Rank 0 writes the final model and ``summary.json``; every rank takes part in the gathers."""
        module = self.module
        raw = self.exported_model()
        summary = {
            "name": self.spec.name, "method": module.arch.method, "steps": self.progress.step,
            "stopped_by": exhausted(self.train.budget, self.progress),
            "final_loss": last.get("loss"), "cost": {"flops": self.progress.flops,
                                                    "device_seconds": self.progress.device_seconds},
            "tokens": self.progress.tokens, "workers": self.world, "strategy": self.train.strategy,
            "device": self.device.type, "precision": module.precision, "compiled": module.compiled.enabled,
            "compile_reason": module.compiled.reason, "peak_flops": self.peak.flops,
            "peak_flops_source": self.peak.source, "eval_before": self.initial_eval, "eval": self.last_eval,
            "numerics": dataclasses.asdict(self.numerics),
            # where and when its steps ran (rank 0's host; Unix seconds, from its first step to its end, waiting for
            # resources not included): which runs of a sweep trained side by side, and on which node
            "ran": {"host": socket.gethostname(), "node": ray_node(), "from": round(self.began, 2),
                    "to": round(time.time(), 2)},
        }
        summary["peak_rss_mb"] = self.gather(round(peak_rss_mb(), 1))
        summary["param_device"] = str(next(module.raw.parameters()).device)  # where training ran
        if self.device.type == "cuda":
            summary["peak_device_mb"] = self.gather(round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1))
        if self.rank == 0:
            self.output.dir.mkdir(parents=True, exist_ok=True)
            self.write_model(raw, self.output.model)
            atomic_write_json(self.output.summary, summary)
        return summary


def ray_node() -> str | None:
    """The Ray node this process runs on (its id: on a simulated cluster every node has the same host), or None
    outside Ray (``slm train`` in this process)."""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def run_params(spec: WorkerSpec) -> dict:
    """What a tracker shows as the run's parameters: the method, the model's shape and the training
    settings, flattened (``optim.lr``, ``budget.steps``)."""
    params = {"method": spec.arch.method, "config_key": spec.config_key,
              **{f"model.{k}": v for k, v in dataclasses.asdict(spec.arch.gpt).items()}}
    for key, value in dataclasses.asdict(spec.train).items():
        if isinstance(value, dict):
            params.update({f"{key}.{k}": v for k, v in value.items()})
        elif key != "loggers":
            params[key] = value
    return params


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def train_worker(config: dict) -> None:
    """The function ``TorchTrainer`` runs on every worker (its ``train_loop_config``: ``{"spec": …}``)."""
    if not verbose():
        # Ray Train logs every report at INFO, with the whole metrics dict, from every rank: the progress
        # lines say it once per interval. Its logger is named by its file's path (ray 2.60).
        from ray.train.v2._internal.execution import context

        logging.getLogger(context.__file__).setLevel(logging.WARNING)
    TrainLoop(config["spec"], RayTrainSession()).fit()


def train_here(spec: WorkerSpec, folder: Path, keep: int) -> None:
    """The loop in this process, without Ray Train (``train.num_workers: 0``), checkpoints under ``folder``."""
    TrainLoop(spec, LocalSession(folder, keep)).fit()
