"""The training loop every method shares, run by each Ray Train worker (``train_worker``).

One loop: draw the step's rows from the sampler, run the method's model on them (dense, routed by
cluster, or the soup at the step's h), add KD while a teacher is on, step the strategy, advance the
progress and hand the step to the callbacks. Methods differ only in their model, sampler and objective;
parallelism (DDP, DeepSpeed) and everything around the steps (logging, checkpoints, evaluation,
throughput) live outside it.

The worker's ``spec`` is a plain dict made by ``slm.train.trainer`` (paths, the architecture record,
the train/teacher/lora sections): workers never read the job's YAML.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from slm import methods
from slm.config import (
    BudgetConfig,
    LoraConfig,
    ModelConfig,
    OptimConfig,
    TeacherConfig,
    TrainConfig,
    from_dict,
)
from slm.data.samplers import UniformSampler
from slm.layout import TrainOutput
from slm.models.gpt import GPT, load_dense
from slm.train import callbacks as cb
from slm.train import hardware
from slm.train.budget import Progress, dense_flops_per_token, exhausted, horizon_steps
from slm.train.data import PackedArrays
from slm.train.evaluate import evaluate
from slm.train.objectives import KDSchedule, distillation_loss, learnable_difficulty
from slm.train.session import LocalSession, RayTrainSession
from slm.train.strategies import DDPStrategy, DeepSpeedStrategy


def _train_config(d: dict) -> TrainConfig:
    return from_dict(TrainConfig, d, prefix="train.")


def lora_wrap(model: GPT, lora: LoraConfig) -> torch.nn.Module:
    """Freeze the dense model and add LoRA adapters (peft) on the named Linear layers."""
    from peft import LoraConfig as PeftLora
    from peft import inject_adapter_in_model

    config = PeftLora(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                      target_modules=list(lora.targets))
    model = inject_adapter_in_model(config, model)
    for name, p in model.named_parameters():
        p.requires_grad = "lora_" in name
    return model


def lora_merged(model: torch.nn.Module, cfg) -> GPT:
    """Fold the adapters into the weights: W + (α/r)·B·A, returned as a plain dense GPT."""
    state = {}
    params = dict(model.named_parameters())
    for name, p in params.items():
        if "lora_" in name:
            continue
        if name.endswith(".base_layer.weight"):
            prefix = name[: -len(".base_layer.weight")]
            module = model.get_submodule(prefix)
            delta = module.get_delta_weight("default")
            state[f"{prefix}.weight"] = (p + delta).detach().clone()
        else:
            state[name] = p.detach().clone()
    dense = GPT(cfg)
    dense.load_state_dict(state, strict=True)
    return dense


class TrainLoop:
    def __init__(self, spec: dict, session: RayTrainSession | LocalSession):
        self.session = session
        self.rank, self.world = session.rank, session.world
        self.spec = spec
        self.train = _train_config(spec["train"])
        self.teacher_cfg = from_dict(TeacherConfig, spec.get("teacher") or {}, prefix="teacher.")
        self.lora = from_dict(LoraConfig, spec.get("lora") or {}, prefix="lora.")
        self.arch = spec["arch"]
        self.output = TrainOutput(Path(spec["output"]))
        torch.set_num_threads(self.train.torch_threads)
        torch.manual_seed(self.train.seed)  # identical initial weights on every rank
        key = spec["config_key"]  # "pretrain.train" or "specialize.train": errors name the user's key
        self.placement = hardware.plan_placement(self.train.use_gpu, self.world)
        self.device = hardware.worker_device(self.placement, ray_train=isinstance(session, RayTrainSession))
        self.precision = hardware.worker_precision(self.train, self.device.type, f"{key}.precision")

        # ---- model
        model = load_dense(spec["init"]) if spec.get("init") else methods.get(self.arch["method"]).build(self.arch)
        # What this loop trains: the method's model, or (specialization) the dense GPT instantiated from it.
        self.trained_arch = (methods.dense_record(dataclasses.asdict(model.config)) if spec.get("init")
                             else self.arch)
        self.dense_config = model.config
        if self.lora.rank:
            model = lora_wrap(model, self.lora)
        model.to(self.device)
        self.method = methods.get(self.trained_arch["method"])

        # ---- data
        self.data = PackedArrays.open(spec["data"])
        rows = np.load(spec["rows"]) if spec.get("rows") else np.arange(len(self.data))
        self.sampler = self.method.sampler(self.trained_arch, np.asarray(self.data.coarse), rows, self.train.seed,
                                           from_dict(ModelConfig, spec.get("model") or {}, prefix="model."))
        self.valid = {d: PackedArrays.open(p) for d, p in (spec.get("valid") or {}).items()}
        self.domain_h = spec.get("domain_h") or {}

        # ---- teacher (distillation, SALT)
        self.teacher = None
        self.kd = KDSchedule(self.teacher_cfg.omega, self.teacher_cfg.kd_steps, self.teacher_cfg.transition)
        if self.teacher_cfg.checkpoint:
            self.teacher = load_dense(self.teacher_cfg.checkpoint).eval().to(self.device)
            for p in self.teacher.parameters():
                p.requires_grad = False
            if self.teacher.config.vocab_size != self.dense_config.vocab_size:
                raise ValueError(f"teacher {self.teacher_cfg.checkpoint} has vocabulary "
                                 f"{self.teacher.config.vocab_size}, the student {self.dense_config.vocab_size}")
        self.kd_sampler = None

        # ---- costs per step
        self.tokens_per_step = self.train.batch_size * self.data.seq_len * self.world
        self.flops_per_step = (dense_flops_per_token(self.dense_config) * self.tokens_per_step
                               + self.method.step_overhead_flops(model, self.trained_arch))
        self.teacher_flops_per_step = (dense_flops_per_token(self.teacher.config, training=False)
                                       * self.tokens_per_step if self.teacher else 0.0)
        horizon = horizon_steps(from_dict(BudgetConfig, spec["train"]["budget"]), self.tokens_per_step,
                                self.flops_per_step)

        # ---- compilation (in place, before any wrapper) and the peak MFU is measured against
        deepspeed_stage = self.train.zero_stage if self.train.strategy == "deepspeed" else None
        self.compiled = hardware.resolve_compile(self.train.compile, self.device.type, self.precision, horizon,
                                                 deepspeed_stage)
        if self.compiled.enabled:
            hardware.use_compile_cache(self.train.compile_cache_dir)
            hardware.compile_modules(self.method.compile_units(model))
        self.peak = hardware.peak_flops(self.train.peak_flops, self.device, self.precision)
        if self.rank == 0:
            sys.stdout.write(f"[train] {spec['name']}: {self.device.type}, {self.precision}, "
                             f"{'compiled' if self.compiled.enabled else 'eager'} ({self.compiled.reason}); "
                             f"MFU against {self.peak.flops:.3g} FLOP/s per device ({self.peak.source})\n")
            sys.stdout.flush()

        # ---- strategy
        optim = from_dict(OptimConfig, spec["train"]["optim"])
        if self.train.strategy == "deepspeed":
            self.strategy = DeepSpeedStrategy(model, optim, horizon, zero_stage=self.train.zero_stage,
                                              micro_batch=self.train.batch_size)
        else:
            self.strategy = DDPStrategy(model, optim, horizon, distributed=self.placement.wrap_ddp,
                                        find_unused_parameters=self.method.find_unused_parameters)
        self.progress = Progress()
        self.finished = False
        self.initial_eval: dict | None = None
        self.last_eval: dict | None = None
        self.callbacks: list[cb.Callback] = [
            cb.Throughput(), cb.Evaluator(), cb.Snapshotter(spec.get("snapshot_steps") or []), cb.Checkpointer(),
            cb.MetricsLogger(self.output), cb.ProgressPrinter(spec["name"]),
        ]

    # ------------------------------------------------------------------------------------ state

    def save_state(self, folder: Path) -> None:
        self.strategy.save(folder, self.rank)
        worker = {"rng": torch.get_rng_state()}
        if self.rank == 0:
            worker.update(progress=self.progress.state_dict(), sampler=self.sampler.state_dict(),
                          initial_eval=self.initial_eval)
            if self.kd_sampler is not None:
                np.save(folder / "selection.npy", self.kd_sampler.rows)
        torch.save(worker, folder / f"worker-{self.rank}.pt")

    def load_state(self, folder: Path) -> None:
        self.strategy.load(folder)
        mine = torch.load(folder / f"worker-{self.rank}.pt", weights_only=True)
        lead = mine if self.rank == 0 else torch.load(folder / "worker-0.pt", weights_only=True)
        torch.set_rng_state(mine["rng"])
        self.progress.load_state_dict(lead["progress"])
        self.sampler.load_state_dict(lead["sampler"])
        self.initial_eval = lead.get("initial_eval")
        if (folder / "selection.npy").exists():
            self.kd_sampler = UniformSampler(np.load(folder / "selection.npy"), self.train.seed + 1)

    # ------------------------------------------------------------------------------------ model use

    def autocast(self):
        return hardware.autocast(self.precision, self.device.type)

    def batch(self, array: np.ndarray) -> torch.Tensor:
        return hardware.to_device(array, self.device, self.placement.pin_memory)

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor, coarse: torch.Tensor, step: int):
        with self.autocast():
            return self.method.forward(self.strategy.model, inputs, targets, coarse, self.sampler.context(step))

    def teacher_logits(self, inputs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), self.autocast():
            return self.teacher(inputs).logits

    def raw_model(self) -> torch.nn.Module:
        return self.strategy.raw

    def serving_forward(self, domain: str):
        """The dense model a domain is served by (instantiated for mixture / projected / soup)."""
        raw = self.raw_model()
        model = self.method.instantiate(raw, self.arch, self.domain_h[domain])[0] if self.method.clustered else raw

        def forward(x: torch.Tensor) -> torch.Tensor:
            # .forward, not __call__: a compiled model's __call__ is its compiled training graph, and
            # evaluation (no targets, other batch sizes) would recompile it for a few batches.
            with self.autocast():
                return model.forward(x).logits

        return forward

    def run_evaluation(self) -> dict:
        was_training = self.raw_model().training
        self.raw_model().eval()
        valid = self.valid
        if self.method.clustered:  # served through a domain's histogram: only domains with one
            valid = {d: v for d, v in valid.items() if d in self.domain_h}
        result = evaluate(self.serving_forward, valid, self.train.eval_tokens, self.train.batch_size,
                          self.device, self.rank, self.world)
        self.raw_model().train(was_training)
        return result

    # ------------------------------------------------------------------------------------ SALT-DS

    def select_hard_but_learnable(self) -> None:
        """SALT-DS: score every training sequence with the teacher (ranks split the rows, then gather),
        keep the top ``keep`` share by median learnable-token loss for the KD phase."""
        sel = self.spec["selection"]
        rows = np.arange(len(self.data))
        mine = rows[self.rank::self.world]
        scores = np.empty(len(mine), dtype=np.float64)
        with torch.no_grad():
            for start in range(0, len(mine), 32):
                tokens, _ = self.data.take(mine[start:start + 32])
                tokens = self.batch(tokens)
                logits = self.teacher_logits(tokens[:, :-1])
                scores[start:start + len(tokens)] = learnable_difficulty(logits, tokens[:, 1:], sel["topk"]).cpu()
        all_scores = np.empty(len(rows))
        if self.world > 1:
            gathered = [None] * self.world
            dist.all_gather_object(gathered, scores)
            for r, part in enumerate(gathered):
                all_scores[r::self.world] = part
        else:
            all_scores[:] = scores
        keep = max(1, int(round(sel["keep"] * len(rows))))
        chosen = np.sort(np.argsort(-all_scores, kind="stable")[:keep])
        self.kd_sampler = UniformSampler(chosen, self.train.seed + 1)
        self.progress.flops += float(dense_flops_per_token(self.teacher.config, training=False)
                                     * len(rows) * self.data.seq_len)

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
        with self.session.resume_from() as folder:
            if folder is not None:
                self.load_state(folder)
        if folder is not None:
            if self.rank == 0:
                print(f"[train] {self.spec['name']}: resumed at step {self.progress.step}", flush=True)
        elif self.teacher is not None and self.spec.get("selection", {}).get("enabled"):
            self.select_hard_but_learnable()
        for c in self.callbacks:
            c.on_train_start(self)
        model = self.strategy.model
        model.train()
        metrics: dict = {}
        budget = self.train.budget
        while not (self.finished or exhausted(budget, self.progress)):
            step = self.progress.step
            started = cb.timer()
            omega = self.kd.weight(step) if self.teacher is not None else 0.0
            sampler = self.kd_sampler if (self.kd_sampler is not None and omega > 0) else self.sampler
            rows = sampler.indices(step, self.rank, self.world, self.train.batch_size)
            tokens, coarse = self.data.take(rows)
            tokens = self.batch(tokens)
            inputs, targets = tokens[:, :-1], tokens[:, 1:]
            out = self.forward(inputs, targets, self.batch(coarse), step)
            ce = out.loss
            loss, kd = ce, None
            if omega > 0:  # KD in float32 on the bf16 logits (distillation_loss casts)
                loss, kd = distillation_loss(ce, out.logits, self.teacher_logits(inputs), omega,
                                             self.teacher_cfg.temperature)
            grad_norm = self.strategy.step(loss)
            elapsed = cb.timer() - started
            p = self.progress
            p.step += 1
            p.tokens += self.tokens_per_step
            p.flops += self.flops_per_step + (self.teacher_flops_per_step if omega > 0 else 0.0)
            p.device_seconds = self.agreed_device_seconds(p.device_seconds + elapsed * self.world)
            self.finished = exhausted(budget, p) is not None
            losses = self.mean_over_ranks([loss.item(), ce.item()] + ([kd.item()] if kd is not None else []),
                                          cb.is_log_step(self))
            metrics = {"step": p.step, "loss": losses[0], "ce": losses[1], "lr": self.strategy.lr,
                       "grad_norm": grad_norm, "tokens": p.tokens, "flops": p.flops,
                       "device_seconds": p.device_seconds, "wall_time": time.time()}
            if kd is not None:
                metrics.update(kd=losses[2], omega=omega)
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
        from slm.artifacts import atomic_write_json

        raw = self.exported_model()
        summary = {
            "name": self.spec["name"], "method": self.arch["method"], "steps": self.progress.step,
            "stopped_by": exhausted(self.train.budget, self.progress),
            "final_loss": last.get("loss"), "cost": {"flops": self.progress.flops,
                                                    "device_seconds": self.progress.device_seconds},
            "tokens": self.progress.tokens, "workers": self.world, "strategy": self.train.strategy,
            "device": self.device.type, "precision": self.precision, "compiled": self.compiled.enabled,
            "compile_reason": self.compiled.reason, "peak_flops": self.peak.flops, "peak_flops_source": self.peak.source,
            "eval_before": self.initial_eval, "eval": self.last_eval,
        }
        summary["peak_rss_mb"] = self.gather(round(peak_rss_mb(), 1))
        summary["param_device"] = str(next(self.raw_model().parameters()).device)  # where training ran
        if self.device.type == "cuda":
            summary["peak_device_mb"] = self.gather(round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1))
        if self.rank == 0:
            self.output.dir.mkdir(parents=True, exist_ok=True)
            self.write_model(raw, self.output.model)
            atomic_write_json(self.output.summary, summary)
        return summary

    def exported_model(self) -> torch.nn.Module:
        """The trained model as one plain module (a collective under DeepSpeed ZeRO-3, which gathers
        its partitions; LoRA adapters folded into the weights)."""
        raw = self.raw_model()
        if isinstance(self.strategy, DeepSpeedStrategy):
            state = self.strategy.full_state_dict()
            raw = self.method.build(self.trained_arch)
            raw.load_state_dict(state)
        if self.lora.rank:
            raw = lora_merged(raw, self.dense_config)
        return raw

    def write_model(self, model: torch.nn.Module, path: Path) -> None:
        # safetensors copies device tensors to host itself: the live model is never moved.
        methods.save_model(model, self.trained_arch, path, {"steps": self.progress.step, "name": self.spec["name"]})


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def train_worker(spec: dict) -> None:
    """The function ``TorchTrainer`` runs on every worker."""
    TrainLoop(spec, RayTrainSession()).fit()


def train_here(spec: dict, folder: Path, keep: int) -> None:
    """The loop in this process, without Ray Train (``train.num_workers: 0``), checkpoints under ``folder``."""
    TrainLoop(spec, LocalSession(folder, keep)).fit()
