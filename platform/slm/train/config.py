"""The training sections: ``pretrain`` and ``specialize``, and what they share (``train``, ``optim``,
``budget``, ``teacher``, ``selection``, ``lora``).
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field
from typing import Literal, Protocol

from slm.config import HASHED_WHEN_SET, NOT_HASHED, ConfigError, check_name
from slm.corpus.config import CorpusConfig
from slm.data.config import (
    ClusterConfig,
    EmbedConfig,
    HistogramConfig,
    PackConfig,
    ResampleConfig,
    StatsConfig,
    TokenizerConfig,
)
from slm.layout import RunDirConfig
from slm.models.config import ModelConfig
from slm.runtime import RayConfig
from slm.train.numerics import Numerics


def cooldown_branches(snapshots, steps: int) -> tuple[int, ...]:
    """The budgets a WSD run of ``steps`` trains as cooldown branches: each of its snapshot steps below its own
    length (the rule the plan prices and the trainer trains: written once, here)."""
    return tuple(sorted(b for b in set(snapshots) if b < steps))


def decay_steps(decay_fraction: float, budget_steps: int) -> int:
    """Under wsd, how many of a ``budget_steps``-step run's last steps decay (at least one): what its cooldown
    branch trains beyond the trunk (the sweep's plan pays it per budget). Halves round up (``round`` would
    take 2.5 to 2)."""
    return max(1, math.floor(decay_fraction * budget_steps + 0.5))


@dataclass
class OptimConfig:
    """AdamW with linear warm-up, then over the run's budget in steps either a cosine decay to
    ``min_lr_ratio``·lr (``cosine``) or warmup–stable–decay (``wsd``: the peak until the last
    ``decay_fraction`` of the budget, then a decay of ``decay_shape`` to ``min_lr_ratio``·lr; Hägele et al.
    2024). Under ``wsd`` the steps before a budget's decay are those of every longer run, so one run (the
    trunk) serves every smaller budget with a short cooldown branch (``pretrain.snapshot_steps``)."""

    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    schedule: Literal["cosine", "wsd"] = "cosine"
    decay_fraction: float = 0.2  # wsd: the share of the budget's steps that decays (its last steps)
    decay_shape: Literal["1-sqrt", "linear", "cosine"] = "1-sqrt"  # wsd: 1-sqrt is Hägele et al.'s best
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # 0: off

    def validate(self, prefix: str = "") -> None:
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"config key '{prefix}lr': must be a positive number, got {self.lr}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"config key '{prefix}min_lr_ratio': must be in [0, 1], got {self.min_lr_ratio}")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ConfigError(f"config key '{prefix}{name}': must be in [0, 1), got {getattr(self, name)}")
        for name in ("warmup_steps", "weight_decay", "grad_clip"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"config key '{prefix}{name}': must be ≥ 0, got {value}")
        if not 0 < self.decay_fraction <= 1:
            raise ConfigError(f"config key '{prefix}decay_fraction': must be in (0, 1], got {self.decay_fraction}")

    def decay_steps(self, budget_steps: int) -> int:
        """wsd: how many of a ``budget_steps``-step run's last steps decay."""
        return decay_steps(self.decay_fraction, budget_steps)

    def decay_start(self, budget_steps: int) -> int:
        """wsd: the step a ``budget_steps``-step run's decay starts from: where its branch leaves a longer trunk."""
        return budget_steps - self.decay_steps(budget_steps)


@dataclass
class BudgetConfig:
    """When a run stops: the first of these limits reached (0 = no limit of that kind; at least one).

    A budget given in a YAML or override replaces the default budget whole: `budget.tokens=1e6` means
    a token budget, not a token budget on top of the default step count."""

    replaced_whole: typing.ClassVar[bool] = True

    steps: int = 0
    tokens: int = 0
    flops: float = 0.0
    device_seconds: float = 0.0

    def validate(self, prefix: str = "") -> None:
        values = {"steps": self.steps, "tokens": self.tokens, "flops": self.flops,
                  "device_seconds": self.device_seconds}
        bad = [k for k, v in values.items() if not math.isfinite(v)]
        if bad:
            raise ConfigError(f"config key '{prefix}{bad[0]}': a budget must be a finite number, got {values[bad[0]]}")
        negative = [k for k, v in values.items() if v < 0]
        if negative:
            raise ConfigError(f"config key '{prefix}{negative[0]}': a budget cannot be negative")
        if not any(values.values()):
            raise ConfigError(f"config key '{prefix.rstrip('.') or 'budget'}': set at least one of "
                              f"steps, tokens, flops, device_seconds (all are 0)")


@dataclass
class ObjectiveConfig:
    """What a run optimizes besides the teacher's term (``slm.train.objectives.Objective``, the one place the loss
    is computed): next-token cross-entropy, with label smoothing (the target's mass ``label_smoothing`` moved to
    the uniform distribution over the vocabulary) and a z-loss (``z_loss``·log²Z, PaLM's stabilizer) when set.
    Every run logs the plain cross-entropy as ``ce`` whatever it optimizes (``loss``)."""

    label_smoothing: float = 0.0
    z_loss: float = 0.0

    def validate(self, prefix: str = "") -> None:
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"config key '{prefix}label_smoothing': must be in [0, 1), got {self.label_smoothing}")
        if not (math.isfinite(self.z_loss) and self.z_loss >= 0):
            raise ConfigError(f"config key '{prefix}z_loss': must be ≥ 0, got {self.z_loss}")


@dataclass
class TeacherConfig:
    """Knowledge distillation from a dense teacher checkpoint: distill (whole run) or SALT (first steps).

    loss = (1 − ω)·CE + ω·KD(p_teacher^(ρ) ‖ p_student) while KD is on, then plain CE."""

    checkpoint: str = ""  # a dense model.safetensors; "" = no teacher
    omega: float = 0.667  # ω
    temperature: float = 0.25  # ρ, applied to the teacher's logits
    kd_steps: int = 0  # n_KD: steps with KD (0 = every step: plain distillation)
    transition: Literal["step", "linear"] = "step"  # linear: ω decays to 0 over the n_KD steps

    def validate(self, prefix: str = "") -> None:
        if not 0 <= self.omega <= 1:
            raise ConfigError(f"config key '{prefix}omega': must be in [0, 1], got {self.omega}")
        if self.temperature <= 0:
            raise ConfigError(f"config key '{prefix}temperature': must be positive, got {self.temperature}")
        if self.kd_steps < 0:
            raise ConfigError(f"config key '{prefix}kd_steps': must be ≥ 0, got {self.kd_steps}")


@dataclass
class SelectionConfig:
    """SALT-DS: the KD phase trains on the "hard but learnable" sequences the teacher picks."""

    enabled: bool = False
    topk: int = 10  # a token is learnable if its target is in the teacher's top-k
    keep: float = 0.5  # top-m as a share of the training sequences, by median learnable-token loss

    def validate(self, prefix: str = "") -> None:
        if not 0 < self.keep <= 1:
            raise ConfigError(f"config key '{prefix}keep': must be in (0, 1], got {self.keep}")
        if self.topk < 1:
            raise ConfigError(f"config key '{prefix}topk': must be at least 1, got {self.topk}")


LOGGERS = ("tensorboard", "mlflow", "wandb")


@dataclass
class TrackingConfig:
    """Where the ``train.loggers`` beyond TensorBoard send a run: MLflow's tracking URI (default: a file
    store, ``mlruns`` in the run directory) and experiment; W&B's project (the same name) and mode
    (offline: files under the run's ``logs/``, which ``wandb sync`` uploads later)."""

    experiment: str = "slm"
    mlflow_uri: str = ""
    wandb_mode: Literal["offline", "online"] = "offline"


@dataclass
class TrainConfig:
    """How a run trains: workers, strategy, batch, optimizer, budget, and the callbacks' intervals."""

    strategy: Literal["ddp", "deepspeed"] = "ddp"
    zero_stage: int = 2  # deepspeed only: ZeRO stage 1, 2 or 3
    num_workers: int = 2  # 0: the loop in this process, without Ray Train (Tune trials on one core, tests)
    use_gpu: bool = False
    cpus_per_worker: float = 1.0
    # With use_gpu, the share of a GPU each worker (or a run in its own process) asks Ray for: 1/N puts N small
    # runs on one device (Ray's fractional GPUs; the memory they need is checked before a sweep starts).
    # Where a run is scheduled does not change its model: not hashed.
    gpus_per_worker: float = field(default=1.0, metadata=NOT_HASHED)
    torch_threads: int = 1  # intra-op threads per CPU worker
    batch_size: int = 8  # sequences per worker per step
    seed: int = 0
    optim: OptimConfig = field(default_factory=OptimConfig)
    # Added after runs were keyed: at its default (plain cross-entropy) a run's hash is what it was before.
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig, metadata=HASHED_WHEN_SET)
    budget: BudgetConfig = field(default_factory=lambda: BudgetConfig(steps=100))
    log_every: int = 10  # steps between metrics.jsonl / TensorBoard / progress lines (rank 0, local)
    # steps between ray.train.report of the metrics (Tune and the dashboard see these; 0: with checkpoints
    # only). Ray's controller accepts reports at a limited rate: keep this interval some seconds long.
    report_every: int = 50
    checkpoint_every: int = 50  # steps between checkpoints (0: only the final one)
    keep_checkpoints: int = 2
    eval_every: int = 0  # steps between evaluations on the valid split (0: only at the end)
    eval_tokens: int = 32768  # per domain, at most
    max_failures: int = 1  # worker failures the run recovers from (FailureConfig)
    # auto: bf16 autocast where the device computes bf16 natively (CUDA with bf16; CPUs with AMX or
    # AVX512-BF16), else fp32. Weights, optimizer state, loss, softmax and KD stay fp32 either way.
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    # Which CPU kernels train (slm.train.numerics): native (this CPU's widest: fastest, reproducible on the same
    # kind of CPU only) or pinned (AVX2 in ATen, oneMKL and oneDNN: the same numbers on any CPU with AVX2).
    numerics: Numerics = "native"
    # torch.compile of the training forward/backward. auto: where it pays for its warm-up
    # (slm.train.hardware.resolve_compile; the worker logs what it chose and why).
    compile: Literal["auto", "always", "never"] = "auto"
    # Inductor's FX-graph / AOTAutograd caches (TORCHINDUCTOR_CACHE_DIR): one compile per machine, not per
    # worker or trial; on a cluster a node-local path.
    compile_cache_dir: str = "~/.cache/slm/inductor"
    # Per device, what MFU divides by. auto: the precision's peak on this device (a table for known GPUs,
    # else a matmul probe measured once per machine and cached). A number overrides it.
    peak_flops: float | Literal["auto"] = "auto"
    # Where the metrics go besides metrics.jsonl (always written): any of tensorboard, mlflow, wandb, with
    # standard tags (train/loss, eval/<domain>/ppl, …). Neither changes what a run computes: not hashed.
    loggers: list[str] = field(default_factory=lambda: ["tensorboard"], metadata=NOT_HASHED)
    tracking: TrackingConfig = field(default_factory=TrackingConfig, metadata=NOT_HASHED)

    def validate(self, prefix: str = "") -> None:
        unknown = [name for name in self.loggers if name not in LOGGERS]
        if unknown:
            raise ConfigError(f"config key '{prefix}loggers': unknown logger {unknown[0]!r}; "
                              f"choose from {list(LOGGERS)}")
        if self.peak_flops != "auto" and not (self.peak_flops > 0 and math.isfinite(self.peak_flops)):
            raise ConfigError(f"config key '{prefix}peak_flops': must be 'auto' or a positive number, "
                              f"got {self.peak_flops}")
        if self.numerics == "pinned" and self.use_gpu:
            raise ConfigError(f"config key '{prefix}numerics': 'pinned' pins CPU kernels; a GPU run's numbers are "
                              "its CUDA kernels' (set it to 'native' with use_gpu)")
        if not 0 < self.gpus_per_worker <= 1:
            raise ConfigError(f"config key '{prefix}gpus_per_worker': a share of one GPU, in (0, 1], got "
                              f"{self.gpus_per_worker}")
        if self.zero_stage not in (1, 2, 3):
            raise ConfigError(f"config key '{prefix}zero_stage': must be 1, 2 or 3, got {self.zero_stage}")
        if self.num_workers < 0:
            raise ConfigError(f"config key '{prefix}num_workers': must be ≥ 0, got {self.num_workers}")
        for name in ("batch_size", "log_every", "torch_threads", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ConfigError(f"config key '{prefix}{name}': must be at least 1, got {getattr(self, name)}")
        for name, zero in (("checkpoint_every", "off"), ("report_every", "off"), ("eval_every", "off"),
                           ("eval_tokens", "the whole valid split")):
            if getattr(self, name) < 0:
                raise ConfigError(f"config key '{prefix}{name}': must be ≥ 0 (0: {zero}), got {getattr(self, name)}")
        if self.max_failures < -1:
            raise ConfigError(f"config key '{prefix}max_failures': must be ≥ 0, or -1 for no limit, "
                              f"got {self.max_failures}")
        if not (math.isfinite(self.cpus_per_worker) and self.cpus_per_worker > 0):
            raise ConfigError(f"config key '{prefix}cpus_per_worker': must be positive, got {self.cpus_per_worker}")
        if self.strategy == "deepspeed" and self.num_workers == 0:
            raise ConfigError(f"config key '{prefix}strategy': deepspeed needs num_workers ≥ 1")


@dataclass
class PretrainConfig:
    """Pretraining one method at one size: what `slm run` stage `pretrain` trains."""

    method: str = "generic"  # a registered method (slm.pipeline.check_methods checks it before a job runs)
    name: str = ""  # default: <method>-<size>; outputs in <run dir>/checkpoints/<name>/
    data: str = ""  # packed folder; default: packed/generic, or packed/resampled/<domain>/<crisp|dsir>
    # The domain a per-domain method's pretraining set is chosen for (SLM-is, DSIR); default: resample.domain
    domain: str = ""
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)  # SALT: a small teacher for a larger student
    selection: SelectionConfig = field(default_factory=SelectionConfig)  # SALT-DS
    # Pretraining budgets (in steps) one run serves besides its own, each saved for good as
    # snapshots/step-N.safetensors with its cost. Under train.optim.schedule: cosine, the model as it is at
    # step N of this run (a snapshot mid-decay); under wsd, a fully trained budget: a cooldown branch from
    # this run's state at N's decay start, trained after this run as a run of N steps would end.
    snapshot_steps: list[int] = field(default_factory=list)
    output: str = "checkpoints"

    def validate(self, prefix: str = "") -> None:
        if self.name:  # folders in the run directory: never a path out of it
            check_name(self.name, f"{prefix}name")
        check_name(self.output, f"{prefix}output")

    @property
    def run_name(self) -> str:
        return self.name or f"{self.method}-{self.model.size_name}"


@dataclass
class LoraConfig:
    """Specialize with LoRA adapters (peft) instead of full fine-tuning: rank 0 = off."""

    rank: int = 0
    alpha: float = 16.0
    dropout: float = 0.0
    targets: list[str] = field(default_factory=lambda: ["qkv", "proj", "fc"])


@dataclass
class SpecializeConfig:
    """Instantiate a pretrained model for a domain and fine-tune it on an in-domain subset."""

    source: str = ""  # a pretrain name under checkpoints/ or a model.safetensors path; default pretrain's
    name: str = ""  # default: the source's name; outputs in <run dir>/specialized/<domain>/<name>/
    domain: str = ""  # default: resample.domain
    domain_tokens: int = 50_000  # the in-domain data budget: tokens of the domain's train split used
    # mixture / projected: the expert to fine-tune; -1 = the domain's most frequent coarse cluster's.
    expert: int = -1
    train: TrainConfig = field(default_factory=lambda: TrainConfig(
        budget=BudgetConfig(steps=50), optim=OptimConfig(lr=1e-3, warmup_steps=5)))
    teacher: TeacherConfig = field(default_factory=lambda: TeacherConfig(omega=0.5, temperature=1.0))  # distill
    lora: LoraConfig = field(default_factory=LoraConfig)
    output: str = "specialized"

    def validate(self, prefix: str = "") -> None:
        if self.name:  # folders in the run directory: never a path out of it
            check_name(self.name, f"{prefix}name")
        check_name(self.output, f"{prefix}output")
        if self.domain_tokens <= 0:
            raise ConfigError(f"config key '{prefix}domain_tokens': must be positive, got {self.domain_tokens}")
        if self.expert < -1:
            raise ConfigError(f"config key '{prefix}expert': an expert index ≥ 0, or -1, got {self.expert}")


class TrainJob(Protocol):
    """What the training side reads of a job: the run, the data sections and its own two
    (``slm.job.JobConfig`` has them all; the job root sits above every layer and gathers their sections)."""

    run: RunDirConfig
    ray: RayConfig
    corpus: CorpusConfig
    stats: StatsConfig
    embed: EmbedConfig
    cluster: ClusterConfig
    histogram: HistogramConfig
    resample: ResampleConfig
    tokenizer: TokenizerConfig
    pack: PackConfig
    pretrain: PretrainConfig
    specialize: SpecializeConfig
