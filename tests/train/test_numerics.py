"""Training numerics the same on every CPU (slm.train.numerics; issue 63): under ``pinned`` a short training
of the d1 model ends on a golden loss, bit for bit, on whatever machine runs this test; a process whose
kernels are not the pinned ones refuses to train, naming the key.

The golden numbers were measured under the pins on a 2-core AMD EPYC (AVX512-BF16); the CPUs they have been
checked on since are listed in docs/training.md ("Reproducible numerics"). A failure here on a new CPU means
pinned training is not reproducible there: that CPU's parts cannot be combined with others' (say so in
docs/training.md), not that the golden value should be changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from slm.config import ConfigError, from_dict
from slm.runtime import cpu_flags
from slm.train import numerics
from slm.train.config import TrainConfig
from tests.conftest import REPO

pytestmark = pytest.mark.skipif("avx2" not in cpu_flags(), reason="pinned numerics need a CPU with AVX2")

# A training process: pin (before any kernel, as TrainLoop does), then 30 steps of the d1 model (width 64, the
# second edition's small model) with the platform's AdamW and WSD schedule, on a learnable token chain from starts
# numpy draws the same on every machine; prints each step's loss as a float's hex and a digest of the weights.
TRAIN = """
import hashlib, json, sys
from slm.train import numerics
numerics.pin(sys.argv[1], "pretrain.train.numerics")
import numpy as np, torch
from slm.models.gpt import GPT, GPTConfig
from slm.train.config import OptimConfig
from slm.train.strategies import make_optimizer
torch.set_num_threads(1)
torch.manual_seed(0)
model = GPT(GPTConfig.from_depth(1, vocab_size=1024, seq_len=64))
opt, schedule = make_optimizer(model, OptimConfig(lr=1e-2, warmup_steps=5, schedule="wsd", min_lr_ratio=0.0), 30,
                               fused=True)
chain = np.empty((30, 16, 65), dtype=np.int64)
chain[..., 0] = np.random.default_rng(63).integers(0, 1024, size=(30, 16))
for t in range(64):  # a learnable chain: each token follows from the one before
    chain[..., t + 1] = (5 * chain[..., t] + 17) % 1024
tokens = torch.from_numpy(chain)
losses = []
for batch in tokens:
    loss = model(batch[:, :-1], batch[:, 1:]).loss
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    schedule.step()
    losses.append(loss.item().hex())
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
print(json.dumps({"losses": losses, "weights": digest, "probe": numerics.kernel_probe()}))
"""

GOLDEN_LAST_LOSS = "0x1.dfdbcc0000000p-2"
GOLDEN_WEIGHTS = "c23ae19f930ce72a"


def run(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in numerics.PINNED_ENV}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO,
                          env={**clean, **(env or {})}, timeout=300)


def trained(mode: str, env: dict | None = None) -> dict:
    proc = run(TRAIN, mode, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_pinned_training_ends_on_the_golden_loss_on_this_cpu():
    """Pinned in-process (the variables set by ``pin`` before the first kernel) and pinned from the start (a
    sweep's pinned pretraining tasks) train the same bits, and those are the golden ones."""
    in_process = trained("pinned")
    from_start = trained("pinned", env=numerics.pinned_environment())
    assert in_process == from_start
    assert in_process["probe"] == numerics.PINNED_KERNEL_PROBE
    assert (in_process["losses"][-1], in_process["weights"]) == (GOLDEN_LAST_LOSS, GOLDEN_WEIGHTS), (
        f"pinned training on this CPU ends on {in_process['losses'][-1]} / weights {in_process['weights']}, not the "
        f"golden {GOLDEN_LAST_LOSS} / {GOLDEN_WEIGHTS}: pinned numerics do not reproduce here")
    # the golden run trains: the chain is learnable
    assert float.fromhex(in_process["losses"][-1]) < float.fromhex(in_process["losses"][0])


def test_native_kernels_differ_from_the_pinned_ones_where_this_cpu_has_wider_ones():
    """What pinning is for: on a CPU whose widest kernels are not AVX2's the same seed trains to other
    numbers (an AVX-512 Xeon or EPYC); on an AVX2-only CPU native is already the pinned code."""
    native = trained("native")
    if native["probe"] == numerics.PINNED_KERNEL_PROBE:
        pytest.skip("this CPU's native kernels are the pinned ones (AVX2 is its widest)")
    assert native["losses"][-1] != GOLDEN_LAST_LOSS or native["weights"] != GOLDEN_WEIGHTS


def test_a_process_that_ran_a_kernel_before_pinning_refuses_to_train():
    """ATen reads its capability once: a process that computed anything before ``pin`` would train on native
    kernels while its config says pinned. It is refused, naming the key and what to do."""
    late = "import torch; torch.softmax(torch.ones(64, 64), -1); from slm.train import numerics; " \
           "numerics.pin('pinned', 'specialize.train.numerics')"
    proc = run(late)
    if proc.returncode == 0:
        assert trained("native")["probe"] == numerics.PINNED_KERNEL_PROBE  # nothing to refuse: native is AVX2 here
        pytest.skip("this CPU's native kernels are the pinned ones")
    assert "NumericsError: config key 'specialize.train.numerics' is 'pinned'" in proc.stderr, proc.stderr[-2000:]
    assert "ATEN_CPU_CAPABILITY=avx2" in proc.stderr


def test_pinned_is_refused_for_a_gpu_run():
    with pytest.raises(ConfigError, match="'pretrain.train.numerics': 'pinned' pins CPU kernels"):
        from_dict(TrainConfig, {"numerics": "pinned", "use_gpu": True}, "pretrain.train.")
    with pytest.raises(ConfigError, match="numerics"):
        from_dict(TrainConfig, {"numerics": "exact"}, "pretrain.train.")
