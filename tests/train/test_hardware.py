"""Device placement, precision, compilation and the MFU peak (slm.train.hardware), and the training
paths they open: bf16 autocast and torch.compile for every method, and configs that must fail before
anything starts. (A compiled run that resumes to the same losses after a SIGKILL: tests/train/test_local.py.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from slm import methods
from slm.config import ConfigError, from_dict
from slm.job import load_job
from slm.models.config import ModelConfig
from slm.models.gpt import LMOutput, preset
from slm.models.soup import DomainPrior
from slm.runtime import native_bf16
from slm.train import hardware
from slm.train.config import TrainConfig
from slm.train.objectives import Objective
from slm.train.trainer import pretrain
from tests.conftest import REPO, logged_rows, train_overrides

METHODS = methods.names()  # every registered method: a new one is tested without editing a list
CPU_BF16 = native_bf16("cpu")


# ------------------------------------------------------------------------------------------ decisions


def test_a_one_worker_gpu_run_trains_on_cuda_unwrapped():
    one_gpu = hardware.plan_placement(use_gpu=True, world=1)  # a Tune trial on a GPU cluster
    assert one_gpu == hardware.Placement(device_type="cuda", wrap_ddp=False, pin_memory=True, tf32=True)
    assert hardware.plan_placement(use_gpu=True, world=4).wrap_ddp
    cpu = hardware.plan_placement(use_gpu=False, world=2)
    assert (cpu.device_type, cpu.wrap_ddp, cpu.pin_memory, cpu.tf32) == ("cpu", True, False, False)
    assert hardware.plan_placement(use_gpu=False, world=1).wrap_ddp is False


def test_precision_resolution():
    key = "pretrain.train.precision"
    assert hardware.resolve_precision("auto", "cpu", native=True, key=key) == "bf16"
    assert hardware.resolve_precision("auto", "cpu", native=False, key=key) == "fp32"
    assert hardware.resolve_precision("auto", "cuda", native=True, key=key) == "bf16"
    assert hardware.resolve_precision("fp32", "cuda", native=True, key=key) == "fp32"
    assert hardware.resolve_precision("bf16", "cpu", native=True, key=key) == "bf16"
    with pytest.raises(ConfigError, match=r"'pretrain\.train\.precision'.*no native bfloat16.*amx_bf16"):
        hardware.resolve_precision("bf16", "cpu", native=False, key=key)
    with pytest.raises(ConfigError, match=r"'specialize\.train\.precision'.*no bfloat16 support"):
        hardware.resolve_precision("bf16", "cuda", native=False, key="specialize.train.precision")
    with pytest.raises(ConfigError, match=r"'pretrain\.train\.precision': 'fp16' is not one of"):
        load_job(None, ["pretrain.train.precision=fp16"])
    with pytest.raises(ConfigError, match=r"'specialize\.train\.compile': 'sometimes' is not one of"):
        load_job(None, ["specialize.train.compile=sometimes"])
    with pytest.raises(ConfigError, match=r"'pretrain\.train\.peak_flops'"):
        load_job(None, ["pretrain.train.peak_flops=-3"])
    assert load_job(None, ["pretrain.train.peak_flops=312e12"]).pretrain.train.peak_flops == 312e12


def test_compile_resolution():
    resolve = hardware.resolve_compile
    assert resolve("auto", "cuda", "bf16", 50, None).enabled
    assert resolve("auto", "cuda", "fp32", None, 2).enabled
    assert not resolve("auto", "cpu", "fp32", 10_000, None).enabled
    assert not resolve("auto", "cpu", "bf16", hardware.CPU_BF16_COMPILE_MIN_STEPS - 1, None).enabled
    assert resolve("auto", "cpu", "bf16", hardware.CPU_BF16_COMPILE_MIN_STEPS, None).enabled
    assert resolve("auto", "cpu", "bf16", None, None).enabled  # a device-seconds budget: no budget in steps
    assert resolve("always", "cpu", "fp32", 5, 2).enabled
    assert not resolve("never", "cuda", "bf16", 10_000, None).enabled
    assert not resolve("auto", "cuda", "bf16", 10_000, 3).enabled  # ZeRO-3 stays eager
    with pytest.raises(ConfigError, match="ZeRO-3"):
        resolve("always", "cuda", "bf16", 10, 3)


def test_peak_flops_config_datasheet_and_a_cached_probe(tmp_path):
    cpu = torch.device("cpu")
    assert hardware.peak_flops(123e9, cpu, "fp32", tmp_path / "p.json") == hardware.Peak(123e9, "config")
    assert hardware.gpu_datasheet_peak("NVIDIA H200", "bf16") == 989e12
    assert hardware.gpu_datasheet_peak("NVIDIA H100 PCIe", "bf16") == 756e12
    assert hardware.gpu_datasheet_peak("NVIDIA A100-SXM4-80GB", "fp32") == 156e12  # TF32
    assert hardware.gpu_datasheet_peak("Some Other GPU", "bf16") is None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        first = hardware.peak_flops("auto", cpu, "fp32", tmp_path / "p.json")
        again = hardware.peak_flops("auto", cpu, "fp32", tmp_path / "p.json")
    finally:
        torch.set_num_threads(threads)
    assert first.source == "probe" and again == hardware.Peak(first.flops, "probe (cached)")
    assert 1e9 < first.flops < 1e13  # one core of any current CPU
    (key,) = json.loads((tmp_path / "p.json").read_text())
    assert "threads=1" in key and "fp32" in key and torch.__version__ in key


# ------------------------------------------------------------------------------------------ model level


def _step_fn(model, method: methods.Method, batch: tuple, prior: DomainPrior):
    """The method's training forward on a fixed batch: step i routed to cluster i mod 4 (the experts'
    methods read it), with an h drawn from the prior (the soup reads it)."""
    x, y = batch

    def step(i: int) -> LMOutput:  # the loss inside the model's forward, as TrainModule.step has it computed
        return method.forward(model, x, y, torch.full((x.shape[0],), i % 4), prior.sample(), Objective().data)

    return step


# The default suite compiles the dense GPT (below, through the loop) and the soup, the hardest graph (router,
# merge, functional call); the other families' compiles (tens of seconds each with a cold cache) are slow.
SOME_SLOW = {"mixture", "projected", "importance"}


def families(names: list[str]) -> list:
    return [pytest.param(n, marks=pytest.mark.slow) if n in SOME_SLOW else n for n in names]


@pytest.mark.parametrize("method", families(["generic", "mixture", "projected", "soup"]))
def test_bf16_autocast_compiled_step_learns_like_fp32(method):
    """bf16 autocast + torch.compile on the CPU for every model family: whole graphs (no breaks), float32
    parameters and loss, bfloat16 logits, and the loss after 25 steps within 2% of float32 eager's. On a
    CPU without native bf16 this runs emulated (slowly, at the same numerics): the tiny model keeps it short."""
    cfg = preset("tiny")
    model_config = from_dict(ModelConfig, {"mixture": {"n_experts": 4}, "projected": {"n_experts": 4}, "soup": {"experts": 4}})
    m = methods.get(method).bind(model_config)
    arch = m.architecture(cfg, 4)
    g = torch.Generator().manual_seed(0)
    batch = (torch.randint(0, cfg.vocab_size, (4, cfg.seq_len), generator=g),
             torch.randint(0, cfg.vocab_size, (4, cfg.seq_len), generator=g))
    losses = {}
    for precision, compiled in (("fp32", False), ("bf16", True)):
        torch.manual_seed(0)
        model = m.build(arch)
        if compiled:
            for unit in m.compile_units(model):
                unit.compile(fullgraph=True)  # fails on any graph break
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        step = _step_fn(model, m, batch, DomainPrior(4, 2, seed=0))
        curve = []
        for i in range(25):
            with hardware.autocast(precision, "cpu"):
                out = step(i)
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            opt.step()
            curve.append(out.loss.item())
        assert out.loss.dtype == torch.float32
        assert out.logits.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
        assert all(p.dtype == torch.float32 for p in model.parameters())
        losses[precision] = curve
    assert losses["bf16"][-1] < losses["bf16"][0] - 1.0, losses["bf16"]
    assert losses["bf16"][-1] == pytest.approx(losses["fp32"][-1], rel=0.02), (losses["bf16"][-1], losses["fp32"][-1])


def test_deepspeed_computes_in_the_precision_the_run_reports(monkeypatch):
    """DeepSpeed's engine turns an outer autocast off in its forward (unless its own ``torch_autocast``, which
    reduces gradients in bf16, is on): the strategy enters the loop's autocast inside the engine, so a ZeRO
    run's matmuls are bf16 when the run says bf16 (its logits come out bfloat16), as under DDP. DeepSpeed
    looks only at CUDA's autocast (``torch.is_autocast_enabled()``), so here its engine is made to do to the
    CPU's what it does to CUDA's (on an H200 the unwrapped ZeRO-2 ran float32: docs/training.md)."""
    import contextlib
    import socket

    import deepspeed.runtime.engine
    import torch.distributed as dist

    @contextlib.contextmanager
    def autocast_off(engine):  # deepspeed.runtime.torch_autocast.autocast_if_enabled's branch for CUDA
        with torch.autocast("cpu", enabled=False):
            yield

    monkeypatch.setattr(deepspeed.runtime.engine, "autocast_if_enabled", autocast_off)

    from slm.models.gpt import GPT
    from slm.train.config import OptimConfig
    from slm.train.strategies import DeepSpeedStrategy

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, value in {"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port)}.items():  # what Ray Train sets in its workers
        monkeypatch.setenv(name, value)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        tokens = torch.randint(0, 512, (2, 17), generator=torch.Generator().manual_seed(0))
        for precision, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
            strategy = DeepSpeedStrategy(GPT(preset("tiny")), OptimConfig(), 10, zero_stage=2, micro_batch=2,
                                         precision=precision, device_type="cpu")
            out = strategy.model(tokens[:, :-1], tokens[:, 1:], Objective().data)  # as TrainModule.step calls it
            assert out.logits.dtype == dtype, precision
            assert out.loss.dtype == torch.float32
            strategy.step(out.loss)
            assert all(p.dtype == torch.float32 for p in strategy.raw.parameters())
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------------------------------ the real loop


def job(train_run, *extra):
    return load_job(None, train_overrides(train_run, *extra))


@pytest.mark.ray
@pytest.mark.parametrize("method", families(METHODS))
def test_compiled_training_learns_for_every_method(train_run, method):
    """Every method through the real loop (in the test process, num_workers=0) with compile=always and the default
    precision: bf16 where this CPU has it natively, else float32."""
    cfg = job(train_run, "pretrain.train.num_workers=0", f"pretrain.method={method}", f"pretrain.name=compiled-{method}",
              "pretrain.train.compile=always", "pretrain.train.budget.steps=40", "pretrain.train.log_every=5",
              "pretrain.model.projected.bank_size=4")
    m = pretrain(cfg)
    rows = logged_rows(cfg.run.dir / "checkpoints" / f"compiled-{method}")
    assert m["compiled"] and m["compile_reason"] == "train.compile=always"
    assert m["precision"] == ("bf16" if CPU_BF16 else "fp32") and m["param_device"] == "cpu"
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.5, (rows[0]["loss"], rows[-1]["loss"])
    assert m["eval"]["macro"]["perplexity"] < m["eval_before"]["macro"]["perplexity"]
    assert 0 < rows[-1]["mfu"] < 1 and m["peak_flops"] > 0


@pytest.mark.ray
@pytest.mark.skipif(CPU_BF16, reason="this CPU computes bf16 natively")
def test_bf16_on_a_cpu_without_it_fails_before_anything_runs(train_run):
    cfg = job(train_run, "pretrain.train.precision=bf16", "pretrain.name=bf16-here")
    with pytest.raises(ConfigError, match=r"'pretrain\.train\.precision'.*no native bfloat16"):
        pretrain(cfg)
    assert not (cfg.run.dir / "checkpoints" / "bf16-here").exists()


def test_default_train_config_is_the_fast_path():
    t = TrainConfig()
    assert (t.precision, t.compile, t.peak_flops) == ("auto", "auto", "auto")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine runs the check itself")
def test_gpu_check_skips_cleanly_on_cpu():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu.py")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no CUDA device" in json.loads(proc.stdout)["skipped"]
