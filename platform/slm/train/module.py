"""What is trained and how one step of it runs (OLMo-core's TrainModule), apart from the loop of steps.

A :class:`TrainModule` holds the method's model — or, in a specialization, the dense GPT instantiated
for the domain, LoRA-wrapped when asked — on its device and precision, compiled or not, inside the
parallelism strategy (DDP or DeepSpeed) that owns its optimizer; the teacher and its KD schedule
(distillation, SALT); the cost of a step. It runs a training step on a batch, serves each domain's model
for evaluation, and exports the trained model. ``slm.train.loop`` owns everything around it: the data
and its order, progress and budgets, checkpoints, callbacks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from slm import methods
from slm.log import logger
from slm.models.gpt import load_dense
from slm.train import hardware
from slm.train.budget import budget_in_steps, dense_flops_per_token
from slm.train.data import PackedArrays
from slm.train.evaluate import evaluate
from slm.train.objectives import KDSchedule, Objective
from slm.train.spec import WorkerSpec
from slm.train.strategies import DDPStrategy, DeepSpeedStrategy

log = logger(__name__)


@dataclass
class StepResult:
    loss: torch.Tensor  # what was optimized
    ce: torch.Tensor  # the plain next-token cross-entropy, whatever was optimized
    terms: dict[str, torch.Tensor]  # the objective's other terms while on: smoothed_ce, z_loss, kd
    grad_norm: float


class TrainModule:
    def __init__(self, spec: WorkerSpec, placement: hardware.Placement, device: torch.device, precision: str,
                 seq_len: int, world: int, rank: int):
        train = spec.train
        self.device, self.precision, self.placement = device, precision, placement
        self.arch, self.domain_h = spec.arch, spec.domain_h
        self.lora = spec.lora
        torch.manual_seed(train.seed)  # identical initial weights on every rank

        # ---- model: the method's, or (specialization) the dense GPT instantiated from it
        model = load_dense(spec.init) if spec.init else methods.get(self.arch.method).build(self.arch)
        self.trained_arch = methods.dense_record(model.config) if spec.init else self.arch
        self.dense_config = model.config
        if self.lora.rank:
            from slm.train.lora import lora_wrap  # peft (and transformers): seconds to import, LoRA runs only

            model = lora_wrap(model, self.lora)
        model.to(device)
        self.method = methods.get(self.trained_arch.method).bind(spec.model)

        # ---- teacher (distillation, SALT)
        teacher = spec.teacher
        self.teacher = None
        self.kd = KDSchedule(teacher.omega, teacher.kd_steps, teacher.transition)
        # The loss, in one place: the configured objective as the method has it, the teacher's ρ for its KD term.
        objective = self.method.objective(train.objective)
        self.objective = Objective(objective.label_smoothing, objective.z_loss, teacher.temperature)
        if teacher.checkpoint:
            self.teacher = load_dense(teacher.checkpoint).eval().to(device)
            for p in self.teacher.parameters():
                p.requires_grad = False
            if self.teacher.config.vocab_size != self.dense_config.vocab_size:
                raise ValueError(f"teacher {teacher.checkpoint} has vocabulary "
                                 f"{self.teacher.config.vocab_size}, the student {self.dense_config.vocab_size}")

        # ---- costs per step, and the run's budget in steps (the learning-rate schedule's length; slm.train.budget)
        self.tokens_per_step = train.batch_size * seq_len * world
        self.flops_per_step = (dense_flops_per_token(self.dense_config) * self.tokens_per_step
                               + self.method.step_overhead_flops(model, self.trained_arch))
        self.teacher_flops_per_step = (dense_flops_per_token(self.teacher.config, training=False)
                                       * self.tokens_per_step if self.teacher else 0.0)
        budget_steps = budget_in_steps(train.budget, self.tokens_per_step, self.flops_per_step)

        # ---- compilation (in place, before any wrapper) and the peak MFU is measured against
        deepspeed_stage = train.zero_stage if train.strategy == "deepspeed" else None
        self.compiled = hardware.resolve_compile(train.compile, device.type, precision, budget_steps, deepspeed_stage)
        if self.compiled.enabled:
            hardware.use_compile_cache(train.compile_cache_dir)
            hardware.compile_modules(self.method.compile_units(model))
        self.peak = hardware.peak_flops(train.peak_flops, device, precision)
        if rank == 0:
            log.info(f"[train] {spec.name}: {device.type}, {precision}, "
                     f"{'compiled' if self.compiled.enabled else 'eager'} ({self.compiled.reason}); "
                     f"MFU against {self.peak.flops:.3g} FLOP/s per device ({self.peak.source})")

        # ---- parallelism, applied from outside the model
        if train.strategy == "deepspeed":
            self.strategy = DeepSpeedStrategy(model, train.optim, budget_steps, zero_stage=train.zero_stage,
                                              micro_batch=train.batch_size, precision=precision,
                                              device_type=device.type, lr_scale=self.dense_config.lr_scale)
        else:
            self.strategy = DDPStrategy(model, train.optim, budget_steps, distributed=placement.wrap_ddp,
                                        find_unused_parameters=self.method.find_unused_parameters,
                                        lr_scale=self.dense_config.lr_scale)

    # ------------------------------------------------------------------------------------ running

    def autocast(self):
        return hardware.autocast(self.precision, self.device.type)

    def batch(self, array: np.ndarray) -> torch.Tensor:
        return hardware.to_device(array, self.device, self.placement.pin_memory)

    @property
    def raw(self) -> torch.nn.Module:
        """The model itself, outside any parallel wrapper."""
        return self.strategy.raw

    def train(self) -> None:
        self.strategy.model.train()

    def teacher_logits(self, inputs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), self.autocast():
            return self.teacher(inputs).logits

    def step(self, tokens: np.ndarray, coarse: np.ndarray, context, omega: float) -> StepResult:
        """One optimizer step on a batch of packed rows; ``context`` is the sampler's for the step (the
        soup's h), ``omega`` the KD weight (0: no teacher this step)."""
        tokens = self.batch(tokens)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        with contextlib.nullcontext() if self.strategy.autocasts else self.autocast():
            out = self.method.forward(self.strategy.model, inputs, targets, self.batch(coarse), context,
                                      self.objective.data)  # the loss in float32 whatever the logits' precision
        # KD in float32 on the bf16 logits (kd_loss casts), outside the model's graph
        losses = self.objective.with_teacher(out, self.teacher_logits(inputs) if omega > 0 else None, omega)
        return StepResult(losses.loss, losses.ce, losses.terms, self.strategy.step(losses.loss))

    @property
    def lr(self) -> float:
        return self.strategy.lr

    # ------------------------------------------------------------------------------------ serving

    def serving_forward(self, domain: str) -> Callable[[torch.Tensor], torch.Tensor]:
        """The dense model a domain is served by (instantiated for clustered methods), as logits."""
        raw = self.raw
        model = self.method.instantiate(raw, self.arch, self.domain_h[domain])[0] if self.method.clustered else raw

        def forward(x: torch.Tensor) -> torch.Tensor:
            # .forward, not __call__: a compiled model's __call__ is its compiled training graph, and
            # evaluation (no targets, other batch sizes) would recompile it for a few batches.
            with self.autocast():
                return model.forward(x).logits

        return forward

    def evaluate(self, valid: dict[str, PackedArrays], tokens: int, batch: int, rank: int, world: int) -> dict:
        """Each domain's valid perplexity under the model it is served by (clustered methods: the domains
        with a histogram)."""
        was_training = self.raw.training
        self.raw.eval()
        if self.method.clustered:
            valid = {d: v for d, v in valid.items() if d in self.domain_h}
        result = evaluate(self.serving_forward, valid, tokens, batch, self.device, rank, world)
        self.raw.train(was_training)
        return result

    def exported_model(self) -> torch.nn.Module:
        """The trained model as one plain module (a collective under DeepSpeed ZeRO-3, which gathers
        its partitions; LoRA adapters folded into the weights)."""
        raw = self.strategy.full_model(lambda: self.method.build(self.trained_arch))
        if self.lora.rank:
            from slm.train.lora import lora_merged  # peft: see __init__

            raw = lora_merged(raw, self.dense_config)
        return raw

    def write_model(self, model: torch.nn.Module, path: Path, metadata: dict) -> None:
        # safetensors copies device tensors to host itself: the live model is never moved.
        methods.save_model(model, self.trained_arch, path, metadata)

    # ------------------------------------------------------------------------------------ state

    def save(self, folder: Path, rank: int) -> None:
        self.strategy.save(folder, rank)

    def load(self, folder: Path) -> None:
        self.strategy.load(folder)
