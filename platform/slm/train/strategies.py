"""Parallelism, applied outside the model: DDP (gloo on CPU, nccl on GPU) or DeepSpeed ZeRO 1/2/3.

A strategy owns the wrapped model, the optimizer and the LR schedule, and knows how to step, save and
load them. The loop only calls ``forward``, ``step(loss)``, ``save(dir)`` and ``load(dir)``.

Checkpoint layout (one Ray Train checkpoint directory, every rank writing into it; Ray merges them):
- DDP: ``trainer.pt`` from rank 0 (model, optimizer, scheduler), loaded with ``weights_only=True``;
- DeepSpeed: ``deepspeed/`` from ``engine.save_checkpoint`` on every rank — rank 0's model states plus
  each rank's optimizer shard (``zero_pp_rank_<r>_…``), so a ZeRO run restores its own partitions;
- every rank: ``worker-<rank>.pt`` with its RNG states; rank 0 adds the loop's progress and sampler.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import ray.train.torch
import torch
import torch.nn as nn

from slm.train.config import OptimConfig
from slm.train.hardware import Precision, autocast


def lr_lambda(optim: OptimConfig, budget_steps: int | None):
    """Linear warm-up, then over ``budget_steps`` steps (constant if None) either cosine from 1 to
    ``min_lr_ratio`` or warmup–stable–decay: 1 until ``optim.decay_start(budget_steps)``, then ``decay_shape``
    down to ``min_lr_ratio`` at the budget's last step. Under wsd the factor before a run's decay does not depend
    on the budget: a shorter run's steps up to its decay are a longer run's (the branches' premise)."""
    def factor(step: int) -> float:
        if optim.warmup_steps and step < optim.warmup_steps:
            return (step + 1) / optim.warmup_steps
        if not budget_steps or budget_steps <= optim.warmup_steps:
            return 1.0
        if optim.schedule == "wsd":
            start = optim.decay_start(budget_steps)
            if step < start:
                return 1.0
            return optim.min_lr_ratio + (1 - optim.min_lr_ratio) * DECAY[optim.decay_shape](
                min(1.0, (step - start) / optim.decay_steps(budget_steps)))
        progress = min(1.0, (step - optim.warmup_steps) / (budget_steps - optim.warmup_steps))
        return optim.min_lr_ratio + (1 - optim.min_lr_ratio) * DECAY["cosine"](progress)

    return factor


# A decay's shape: the share of the way from the peak to the floor still to go, at progress p in [0, 1].
DECAY: dict[str, Callable[[float], float]] = {
    "cosine": lambda p: 0.5 * (1 + math.cos(math.pi * p)),
    "linear": lambda p: 1 - p,
    "1-sqrt": lambda p: 1 - math.sqrt(p),
}


LrScale = Callable[[str, torch.Tensor], float]


def param_groups(model: nn.Module, weight_decay: float, lr_scale: LrScale | None = None) -> list[dict]:
    """Weight decay on matrices only (not norms, not the soup router's biases); under µP each group also has
    its parameters' learning-rate factor (``GPTConfig.lr_scale``: 1/m for the hidden matrices). The groups at
    the peak rate come first: the rate a run logs is the first group's."""
    groups: dict[tuple[bool, float], list[torch.Tensor]] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            groups.setdefault((p.dim() >= 2, lr_scale(name, p) if lr_scale else 1.0), []).append(p)
    ordered = sorted(groups.items(), key=lambda kv: (kv[0][1] != 1.0, not kv[0][0]))
    return [{"params": params, "weight_decay": weight_decay if decay else 0.0, "lr_scale": scale}
            for (decay, scale), params in ordered]


def make_optimizer(model: nn.Module, optim: OptimConfig, budget_steps: int | None, fused: bool = False,
                   lr_scale: LrScale | None = None):
    """AdamW and its schedule. ``fused``: torch's single-kernel AdamW (DDP; DeepSpeed's ZeRO wrapper
    steps the optimizer over its own flattened partitions, so it gets the default implementation).
    ``lr_scale``: each parameter's factor on the peak rate (µP); the schedule scales every group alike."""
    groups = [{"params": g["params"], "weight_decay": g["weight_decay"], "lr": optim.lr * g["lr_scale"]}
              for g in param_groups(model, optim.weight_decay, lr_scale)]
    opt = torch.optim.AdamW(groups, lr=optim.lr, betas=(optim.beta1, optim.beta2), eps=1e-8, fused=fused or None)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(optim, budget_steps))


class DDPStrategy:
    """Plain PyTorch data parallelism; the model arrives on the worker's device, and with one worker
    (``distributed=False``: a single GPU, a Tune trial, a run in its own process) it trains unwrapped there."""

    name = "ddp"
    autocasts = False  # the loop enters the autocast around the forward (TrainModule.step)

    def __init__(self, model: nn.Module, optim: OptimConfig, budget_steps: int | None, *, distributed: bool,
                 find_unused_parameters: bool = False, lr_scale: LrScale | None = None):
        self.raw = model
        self.optimizer, self.scheduler = make_optimizer(model, optim, budget_steps, fused=True, lr_scale=lr_scale)
        self.grad_clip = optim.grad_clip
        if distributed:

            self.model = ray.train.torch.prepare_model(
                model, move_to_device=False,
                parallel_strategy_kwargs={"find_unused_parameters": find_unused_parameters})
        else:
            self.model = model

    def step(self, loss: torch.Tensor) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = (torch.nn.utils.clip_grad_norm_(self.raw.parameters(), self.grad_clip)
                if self.grad_clip else torch.tensor(0.0))
        self.optimizer.step()
        self.scheduler.step()
        return float(norm)

    @property
    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def save(self, folder: Path, rank: int) -> None:
        if rank == 0:
            torch.save({"model": self.raw.state_dict(), "optimizer": self.optimizer.state_dict(),
                        "scheduler": self.scheduler.state_dict()}, folder / "trainer.pt")

    def load(self, folder: Path) -> None:
        state = torch.load(folder / "trainer.pt", map_location="cpu", weights_only=True)
        self.raw.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def full_model(self, build: Callable[[], nn.Module]) -> nn.Module:
        """The trained model, whole on this rank: the module it trains."""
        return self.raw


class UnderAutocast(nn.Module):
    """The model under the loop's autocast *inside* DeepSpeed's engine. The engine's forward turns an outer
    autocast off (``deepspeed.runtime.torch_autocast.autocast_if_enabled``) unless the engine's own
    ``torch_autocast`` is configured, which would reduce Linear gradients in bfloat16. Without this wrapper a
    ZeRO run trained in float32 while it reported bf16 (found on an H200: ZeRO-2 at 0.35× DDP's tokens/s,
    docs/training.md)."""

    def __init__(self, model: nn.Module, precision: Precision, device_type: str):
        super().__init__()
        self.model, self.precision, self.device_type = model, precision, device_type

    def forward(self, *args, **kwargs):
        with autocast(self.precision, self.device_type):
            return self.model(*args, **kwargs)


class DeepSpeedStrategy:
    """``deepspeed.initialize`` inside the worker (as in Ray's DeepSpeed guide), ZeRO stage from config;
    the model arrives on the worker's device (DeepSpeed keeps it there).

    The optimizer is torch's AdamW handed to DeepSpeed (``zero_allow_untested_optimizer``): the same
    update as the DDP strategy, and no C++ Adam to compile on CPU."""

    name = "deepspeed"
    # The engine enters the loop's autocast itself (UnderAutocast): an outer one would only be turned off
    # by the engine, with a warning.
    autocasts = True

    def __init__(self, model: nn.Module, optim: OptimConfig, budget_steps: int | None, *, zero_stage: int,
                 micro_batch: int, precision: Precision, device_type: str, lr_scale: LrScale | None = None):
        import deepspeed  # only with train.strategy: deepspeed (its import alone takes seconds)

        self.raw = model
        opt, sched = make_optimizer(model, optim, budget_steps, lr_scale=lr_scale)
        config = {
            "train_micro_batch_size_per_gpu": micro_batch,
            "gradient_accumulation_steps": 1,
            "gradient_clipping": optim.grad_clip,
            "zero_optimization": {"stage": zero_stage},
            "zero_allow_untested_optimizer": True,
            # Precision is the loop's autocast, as under DDP, entered inside the engine (UnderAutocast).
            # DeepSpeed's own `bf16` (bfloat16 weights and gradients) and `torch_autocast` (Linear gradients
            # reduced in bfloat16) would each give ZeRO other numerics than DDP: both stay off, and master
            # weights stay float32 everywhere.
            "bf16": {"enabled": False},
            "steps_per_print": 1 << 30,
            "wall_clock_breakdown": False,
        }
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=UnderAutocast(model, precision, device_type), optimizer=opt, lr_scheduler=sched, config=config, dist_init_required=False)
        self.model = self.engine

    def step(self, loss: torch.Tensor) -> float:
        self.engine.backward(loss)
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0

    @property
    def lr(self) -> float:
        return self.engine.get_lr()[0]

    def save(self, folder: Path, rank: int) -> None:
        self.engine.save_checkpoint(str(folder / "deepspeed"), tag="state")

    def load(self, folder: Path) -> None:
        path, _ = self.engine.load_checkpoint(str(folder / "deepspeed"), tag="state")
        if path is None:
            raise FileNotFoundError(f"no DeepSpeed state under {folder / 'deepspeed'}")

    def full_model(self, build: Callable[[], nn.Module]) -> nn.Module:
        """The trained model, whole on every rank: a fresh ``build()`` loaded with the gathered weights (a
        collective under ZeRO-3)."""
        model = build()
        model.load_state_dict(self.full_state_dict())
        return model

    def full_state_dict(self) -> dict:
        """The unsharded weights on every rank (ZeRO-3 gathers its partitions)."""
        if self.engine.zero_optimization_partition_weights():
            import deepspeed  # as in __init__: deepspeed runs only

            with deepspeed.zero.GatheredParameters(list(self.raw.parameters()), modifier_rank=None):
                return {k: v.detach().clone() for k, v in self.raw.state_dict().items()}
        return self.raw.state_dict()
