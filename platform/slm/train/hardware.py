"""Where and how a training worker computes: its device, precision, compilation, and the peak that
MFU is measured against. Every strategy and method asks this module, so DDP and DeepSpeed, pretraining
and specialization, student and teacher compute with the same numerics on the same device.

- **Placement**: a worker trains on ``ray.train.torch.get_device()`` when ``train.use_gpu`` (also with one
  worker: a Tune trial), on the CPU otherwise; DDP wraps the model only when there are several workers.
- **Precision** (``train.precision``): ``bf16`` is autocast of the forward (matmuls in bfloat16), never
  bfloat16 weights: parameters, gradients, optimizer state, the loss, softmax and KD stay float32.
  ``auto`` picks it where the device computes bfloat16 natively (``slm.runtime.native_bf16``).
- **Compilation** (``train.compile``): ``torch.compile`` of the units each method runs per step
  (``Method.compile_units``), with Inductor's on-disk caches in ``train.compile_cache_dir``
  so a machine compiles a graph once, whatever its worker or trial count.
- **Peak FLOP/s** (``train.peak_flops: auto``): datasheet peaks for known GPUs, else a matmul probe in
  the precision in use, measured once per machine and thread count and cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import ray.train.torch
import torch
from filelock import FileLock

from slm.artifacts import atomic_write_json
from slm.config import ConfigError
from slm.runtime import NATIVE_BF16_CPU_FLAGS, cpu_flags, cpu_model, native_bf16
from slm.train.config import TrainConfig

DeviceType = Literal["cpu", "cuda"]
Precision = Literal["fp32", "bf16"]


# ------------------------------------------------------------------------------------------ placement


@dataclass(frozen=True)
class Placement:
    """What a worker of a run with this config does with its device (decided without touching one)."""

    device_type: DeviceType
    wrap_ddp: bool  # DistributedDataParallel around the model (only with several workers)
    pin_memory: bool  # page-locked host copies of the memory-mapped batches, copied without blocking
    tf32: bool  # TensorFloat-32 matmuls for the float32 work (CUDA)


def plan_placement(use_gpu: bool, world: int) -> Placement:
    cuda = bool(use_gpu)
    return Placement(device_type="cuda" if cuda else "cpu", wrap_ddp=world > 1, pin_memory=cuda, tf32=cuda)


def worker_device(placement: Placement, ray_train: bool) -> torch.device:
    """This worker's device: its GPU or the CPU. A Ray Train worker asks Ray Train (which sets
    CUDA_VISIBLE_DEVICES and the local rank); a loop in its own process (a Tune trial given a GPU) takes the
    first GPU it sees."""
    if placement.device_type == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError("config key 'train.use_gpu': true, but this worker sees no CUDA device "
                          f"(torch {torch.__version__} built for CUDA {torch.version.cuda})")
    device = ray.train.torch.get_device() if ray_train else torch.device("cuda", 0)
    torch.cuda.set_device(device)
    if placement.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return device


def to_device(array, device: torch.device, pin: bool) -> torch.Tensor:
    """A host numpy batch on ``device``: through pinned memory and an asynchronous copy on CUDA."""
    tensor = torch.from_numpy(array)
    if pin:
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


# ------------------------------------------------------------------------------------------ precision


def resolve_precision(requested: str, device_type: DeviceType, native: bool, key: str) -> Precision:
    """``auto`` → bf16 where ``native``, else fp32; ``bf16`` without native support is a config error
    (emulated bfloat16 is far slower than float32, and a run should not silently crawl)."""
    if requested == "auto":
        return "bf16" if native else "fp32"
    if requested == "fp32":
        return "fp32"
    if requested != "bf16":
        raise ConfigError(f"config key '{key}': {requested!r} is not one of ['auto', 'fp32', 'bf16']")
    if not native:
        what = ("this GPU has no bfloat16 support" if device_type == "cuda" else
                f"this CPU has no native bfloat16 (none of the flags {sorted(NATIVE_BF16_CPU_FLAGS)})")
        raise ConfigError(f"config key '{key}': bf16 asked, but {what}; use auto or fp32")
    return "bf16"


def worker_precision(train: TrainConfig, device_type: DeviceType, key: str) -> Precision:
    return resolve_precision(train.precision, device_type, native_bf16(device_type), key)


def autocast(precision: Precision, device_type: DeviceType):
    """The forward's autocast region: bf16 matmuls under ``bf16``, a no-op under ``fp32``."""
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=precision == "bf16")


# ------------------------------------------------------------------------------------------ compile

# A CPU run compiles under `auto` only in bf16 and only when it is at least this many steps long: there
# the compiled step is faster than the eager one, and the warm-up (tens of seconds cold, a few seconds
# from the cache) is repaid within this many steps (docs/training.md, "Precision and compilation").
# In fp32 on CPU the matmuls are already the step: compiling measured no gain worth its warm-up.
CPU_BF16_COMPILE_MIN_STEPS = 300


@dataclass(frozen=True)
class CompileChoice:
    enabled: bool
    reason: str


def resolve_compile(mode: str, device_type: DeviceType, precision: Precision, budget_steps: int | None,
                    zero_stage: int | None) -> CompileChoice:
    """Whether this run compiles its training step, and why (the worker prints the reason)."""
    if mode == "never":
        return CompileChoice(False, "train.compile=never")
    if zero_stage == 3:
        # ZeRO-3 gathers and frees each parameter in module hooks around every forward; Dynamo would trace
        # through DeepSpeed's partitioning, which DeepSpeed supports only through its own engine.compile.
        if mode == "always":
            raise ConfigError("config key 'train.compile': always is not supported with DeepSpeed ZeRO-3 "
                              "(train.zero_stage=3); use auto or never")
        return CompileChoice(False, "DeepSpeed ZeRO-3: eager")
    if mode == "always":
        return CompileChoice(True, "train.compile=always")
    if device_type == "cuda":
        return CompileChoice(True, "CUDA: compiled")
    if precision == "fp32":
        return CompileChoice(False, "fp32 on CPU: the matmuls are the step, compiling does not pay")
    if budget_steps is not None and budget_steps < CPU_BF16_COMPILE_MIN_STEPS:
        return CompileChoice(False, f"{budget_steps} steps < {CPU_BF16_COMPILE_MIN_STEPS}: too short to repay the warm-up")
    return CompileChoice(True, "bf16 on CPU, a long run: compiled")


def use_compile_cache(folder: str) -> Path:
    """Point Inductor's on-disk caches (FX graphs, AOTAutograd, Triton kernels) at ``folder``, shared by
    every worker and trial of the machine. Must run before the first compile in the process."""
    path = Path(folder).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    return path


def compile_modules(modules: list[torch.nn.Module]) -> None:
    """Compile each module in place (``nn.Module.compile``): wrappers applied afterwards (DDP, DeepSpeed)
    call the compiled forward, and the state dict keeps its plain names."""
    for module in modules:
        module.compile()


# ------------------------------------------------------------------------------------------ peak FLOP/s

# Datasheet dense peaks per GPU (no sparsity): bf16 tensor cores, and TF32 for float32 matmuls. Matched on
# torch.cuda.get_device_name(), most specific first.
GPU_PEAKS: list[tuple[str, dict[str, float]]] = [
    ("H200", {"bf16": 989e12, "fp32": 494e12}),
    ("H100 PCIe", {"bf16": 756e12, "fp32": 378e12}),
    ("H100", {"bf16": 989e12, "fp32": 494e12}),
    ("A100", {"bf16": 312e12, "fp32": 156e12}),
]
PEAK_CACHE = Path("~/.cache/slm/peak_flops.json")


@dataclass(frozen=True)
class Peak:
    flops: float  # per device, FLOP/s
    source: str  # "config", "datasheet <GPU>", "probe (cached)", "probe"


def gpu_datasheet_peak(name: str, precision: Precision) -> float | None:
    for pattern, peaks in GPU_PEAKS:
        if pattern in name:
            return peaks[precision]
    return None


def matmul_flops(device: torch.device, dtype: torch.dtype, n: int = 2048, reps: int = 5) -> float:
    """FLOP/s of an n×n matmul in ``dtype`` on ``device`` with this process's threads (median of reps)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    times = []
    for i in range(reps + 2):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= 2:  # the first calls pick kernels and fault in memory
            times.append(time.perf_counter() - t)
    return 2 * n**3 / statistics.median(times)


def _probe_key(device: torch.device, precision: Precision) -> str:
    if device.type == "cuda":
        where = torch.cuda.get_device_name(device)
    else:
        model = cpu_model()
        flags = hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:12]
        where = f"{model}|{flags}|threads={torch.get_num_threads()}"
    return f"{device.type}|{where}|{precision}|torch={torch.__version__}"


def peak_flops(configured: float | str, device: torch.device, precision: Precision,
               cache: Path = PEAK_CACHE) -> Peak:
    """The peak MFU divides by: the configured number, a GPU's datasheet peak, or a cached probe."""
    if configured != "auto":
        return Peak(float(configured), "config")
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        sheet = gpu_datasheet_peak(name, precision)
        if sheet is not None:
            return Peak(sheet, f"datasheet {name}")

    cache = cache.expanduser()
    cache.parent.mkdir(parents=True, exist_ok=True)
    key = _probe_key(device, precision)
    # One probe per machine at a time: two workers probing at once would each measure half a machine.
    with FileLock(str(cache) + ".lock"):
        known = {}
        with contextlib.suppress(OSError, ValueError):
            known = json.loads(cache.read_text())
        if key in known:
            return Peak(float(known[key]), "probe (cached)")
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        measured = matmul_flops(device, dtype)
        atomic_write_json(cache, {**known, key: measured})
    return Peak(measured, "probe")


def planning_peak(train: TrainConfig) -> Peak:
    """The per-device peak a plan (``slm sweep --dry-run``) estimates device-seconds with, on the driver:
    the configured number; for CPU workers this machine's probe at the workers' threads and precision;
    for GPU workers the driver's own GPU if it has one, else the A100's bf16 datasheet peak, as an
    assumption the plan states."""
    if train.peak_flops != "auto":
        return Peak(float(train.peak_flops), "config")
    device_type: DeviceType = "cuda" if train.use_gpu else "cpu"
    if device_type == "cuda" and not torch.cuda.is_available():
        return Peak(gpu_datasheet_peak("A100", "bf16"), "assumed A100 bf16 datasheet (set train.peak_flops)")
    precision = resolve_precision(train.precision, device_type, native_bf16(device_type), "train.precision")
    threads = torch.get_num_threads()
    torch.set_num_threads(train.torch_threads)
    try:
        return peak_flops("auto", torch.device(device_type), precision)
    finally:
        torch.set_num_threads(threads)


# ----------------------------------------------------------------------------------------- device memory

# What a CUDA process holds before its first tensor (context, cuBLAS workspace, the allocator's reserve): an
# assumption, stated in docs/cluster.md, not a measurement of this platform.
CUDA_CONTEXT_BYTES = 512 * 2**20


def training_memory_bytes(params: int, gpt, batch_size: int, teacher_params: int = 0) -> int:
    """A training process's device memory, estimated from its shape (an upper estimate for sharing a device, not
    a measurement): the CUDA context; fp32 weights, gradients and AdamW's two moments (16 bytes a parameter);
    a frozen teacher's fp32 weights; and the activations autograd keeps, fp32, ~34 values per layer and width
    and the logits' ~6 per vocabulary entry, per token of the batch (Korthikanti et al. 2022's count)."""
    tokens = batch_size * gpt.seq_len
    activations = 4 * tokens * (34 * gpt.n_layer * gpt.d_model + 6 * gpt.vocab_size)
    return CUDA_CONTEXT_BYTES + 16 * params + 4 * teacher_params + activations


def gpu_memory_bytes(share: float) -> int:
    """The memory of a GPU of this Ray cluster, asked of a GPU by a task holding ``share`` of one (the driver may
    run on a node without one)."""
    import ray

    @ray.remote(num_gpus=share, num_cpus=0)
    def total_memory() -> int:
        return torch.cuda.get_device_properties(0).total_memory

    return ray.get(total_memory.remote())
