"""Training numerics that do not depend on which CPU runs them (``train.numerics``; issue 63).

A float32 CPU step goes through three kernel libraries, and each picks its code by the processor it finds:
ATen's vectorized ops (norms, softmax, the optimizer; ``ATEN_CPU_CAPABILITY``), oneMKL's SGEMM (every
matmul; ``MKL_CBWR``) and oneDNN's JIT kernels (GELU; ``ONEDNN_MAX_CPU_ISA``). Different code sums in a
different order, so the same seed trains to different weights on an AVX-512 Intel Xeon (MKL's AVX-512 SGEMM),
an AMD EPYC (MKL takes its AVX2 path there) or an AVX2-only machine: measured in docs/training.md
("Reproducible numerics"), and the reason the second edition's parts cannot be assumed alike.

``native`` (the default) lets each library use this CPU's widest code: fastest, reproducible only on the same
kind of CPU. ``pinned`` starts every training process with all three pinned to AVX2 (MKL's conditional
numerical reproducibility, strict): the same code on any CPU with AVX2, so the same numbers, at a measured
cost (docs/training.md). The pins are environment variables each library reads once, when it first runs: they
must be set before a process's first kernel runs: a training process sets them itself before it computes
anything (``pin``), and a sweep starts its pinned pretraining tasks in workers of their own, launched with them
(``runtime_env``), so that no worker that already ran a kernel is reused. ``pin`` then checks that the kernels
are the pinned ones, so a pinned run never trains on native kernels unnoticed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

Numerics = Literal["native", "pinned"]

# One instruction set every x86-64 server of the last decade has (Haswell, Zen 1 and later): AVX2 with FMA.
PINNED_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2,STRICT",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}


class NumericsError(RuntimeError):
    """A process that cannot train with the numerics its config asks for; the message says what to do."""


def pinned_environment() -> dict[str, str]:
    """The variables a process must start with to train under ``pinned`` numerics."""
    return dict(PINNED_ENV)


def environment_pinned() -> bool:
    return all(os.environ.get(k) == v for k, v in PINNED_ENV.items())


@dataclass(frozen=True)
class NumericsInEffect:
    """What this process's kernels are: recorded beside a run's results, compared before tables combine."""

    numerics: Numerics
    aten: str  # torch.backends.cpu.get_cpu_capability(): AVX2, AVX512, DEFAULT, …
    mkl_cbwr: str  # "" when MKL picks its own branch
    onednn_max_isa: str
    torch: str

    @classmethod
    def here(cls) -> NumericsInEffect:
        import torch

        aten = torch.backends.cpu.get_cpu_capability()
        pinned = environment_pinned() and aten == "AVX2"
        return cls("pinned" if pinned else "native", aten, os.environ.get("MKL_CBWR", ""),
                   os.environ.get("ONEDNN_MAX_CPU_ISA", ""), torch.__version__)


def pin(numerics: Numerics, key: str) -> NumericsInEffect:
    """In a process about to train, before its first kernel runs: under ``pinned``, put the pins in its
    environment (a process started with them already has them), then check that its kernels are the pinned
    ones — ATen's capability is AVX2 and ``kernel_probe`` gives ``PINNED_KERNEL_PROBE`` — and refuse to train
    otherwise, saying why (a kernel ran before the pins, or this CPU computes AVX2 differently). Returns what is
    in effect, for the run's summary."""
    if numerics == "pinned":
        os.environ.update(PINNED_ENV)
    here = NumericsInEffect.here()
    if numerics != "pinned":
        return here
    if here.aten != "AVX2":
        raise NumericsError(
            f"config key '{key}' is 'pinned', but ATen runs {here.aten} kernels here, not AVX2: either this CPU lacks "
            "AVX2 (set the key to 'native' to train on numbers no other CPU reproduces) or a kernel ran in this "
            "process before its training pinned them; start the process with "
            + " ".join(f"{k}={v}" for k, v in PINNED_ENV.items()))
    probe = kernel_probe()
    if probe != PINNED_KERNEL_PROBE:
        raise NumericsError(
            f"config key '{key}' is 'pinned', but this process's kernels compute the probe as {probe}, not "
            f"{PINNED_KERNEL_PROBE} as pinned AVX2 kernels do on every CPU measured (docs/training.md, \"Reproducible "
            "numerics\"): a kernel library ran before the pins (start the process with them), or this CPU does not "
            "reproduce them — then its runs cannot be combined with other machines' and it should train 'native'")
    return here


# kernel_probe() under the pins: measured on an AMD EPYC (AVX512-BF16) — see docs/training.md for every CPU checked.
PINNED_KERNEL_PROBE = "6a601b1f2020c66e"


def kernel_probe() -> str:
    """A digest of one small computation through each library a step uses (an MKL SGEMM, oneDNN's GELU,
    ATen's softmax and a reduction), on inputs numpy makes the same everywhere. Under ``pinned`` numerics it
    is ``PINNED_KERNEL_PROBE`` on every CPU with AVX2 (tests/train/test_numerics.py checks it wherever the
    tests run); native kernels give another value on most CPUs."""
    import hashlib

    import numpy as np
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng(63)
    x = torch.from_numpy(rng.standard_normal((64, 256), dtype=np.float32))
    w = torch.from_numpy(rng.standard_normal((256, 256), dtype=np.float32) / 16)
    h = F.gelu(x @ w)
    y = torch.softmax(h @ w.T, dim=-1) * h.sum(dim=-1, keepdim=True)
    return hashlib.sha256(y.numpy().tobytes()).hexdigest()[:16]


def kernels(numerics: Numerics) -> str:
    """What a sweep records of the kernels a training section runs on (``Plan.kernels``): ``pinned`` and the
    probe every pinned process checked, or ``native`` and this process's probe (the same CPU's workers)."""
    return f"pinned {PINNED_KERNEL_PROBE}" if numerics == "pinned" else f"native {kernel_probe()}"
