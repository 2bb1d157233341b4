"""The loop in its own process (``train.num_workers: 0``, no Ray Train), as Tune trials and a sweep's
pretraining run it: a run SIGKILLed mid-run resumes from its own newest checkpoint when started again,
and every step after that checkpoint gives the uninterrupted run's loss. The run is compiled and in the
default precision (bf16 where this CPU has it natively): a checkpoint written by a compiled bf16 run
resumes, recompiled in a new process (from Inductor's cache), to the same losses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from safetensors.torch import load_file

from slm.job import load_job
from slm.runtime import native_bf16
from slm.train.trainer import pretrain
from tests.conftest import REPO, logged_rows, train_overrides

pytestmark = pytest.mark.ray  # the training data come from the data stages on a local Ray (train_run)

LOCAL = ["pretrain.train.num_workers=0", "pretrain.train.torch_threads=1", "pretrain.train.budget.steps=400",
         "pretrain.train.checkpoint_every=25", "pretrain.train.log_every=1", "pretrain.train.batch_size=16",
         "pretrain.train.compile=always"]
RUN = "import sys; from slm.job import load_job; from slm.train.trainer import pretrain; " \
      "cfg = load_job(None, sys.argv[1:]); pretrain(cfg)"


@pytest.mark.slow  # ~40 s; the Ray Train kill and the truncated-checkpoint fallback stay in the default suite
def test_a_local_run_killed_resumes_from_its_own_checkpoint(train_run):
    reference = load_job(None, train_overrides(train_run, *LOCAL, "pretrain.name=local-reference"))
    pretrain(reference)
    overrides = train_overrides(train_run, *LOCAL, "pretrain.name=local-killed")
    out = train_run.run.dir / "checkpoints" / "local-killed"
    proc = subprocess.Popen([sys.executable, "-c", RUN, *overrides], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline, killed_at = time.time() + 300, None
    while time.time() < deadline and proc.poll() is None:
        log = out / "logs" / "metrics.jsonl"
        step = logged_rows(out)[-1]["step"] if log.exists() and log.stat().st_size else 0
        if step >= 60:
            proc.kill()
            killed_at = step
            break
        time.sleep(0.02)
    output = proc.communicate(timeout=60)[0].decode()
    assert killed_at is not None and killed_at < 400, output[-3000:]
    (folder,) = (out / "local_train").iterdir()
    kept = sorted(p.name for p in folder.iterdir() if p.name.startswith("step-"))
    assert kept and len(kept) <= 2, kept  # keep_checkpoints: the newest two, complete ones only
    resumed_from = int(kept[-1].removeprefix("step-"))

    cfg = load_job(None, overrides)  # the same command again, in this process
    m = pretrain(cfg)
    assert m["steps"] == 400 and m["compiled"] and m["precision"] == ("bf16" if native_bf16("cpu") else "fp32")
    steps = [r["step"] for r in logged_rows(out)]
    # went back to its newest checkpoint, and its log has each step once (the killed run's rows after the
    # checkpoint were dropped when it resumed)
    assert len(steps) == len(set(steps)) == 400 and steps[-1] == 400 and resumed_from < killed_at
    a = {r["step"]: r["loss"] for r in logged_rows(reference.run.dir / "checkpoints" / "local-reference")}
    b = {r["step"]: r["loss"] for r in logged_rows(out)}
    # the same kernels on the same rows: equal in practice; the tolerance only allows for the order of a
    # reduction changing across a recompile
    for step in range(resumed_from + 1, 401):
        assert b[step] == pytest.approx(a[step], abs=1e-4), step
    final_a = load_file(reference.run.dir / "checkpoints" / "local-reference" / "model.safetensors")
    final_b = load_file(out / "model.safetensors")
    assert all((final_a[k] - final_b[k]).abs().max() < 1e-4 for k in final_a)


def test_a_truncated_newest_checkpoint_falls_back_to_the_previous_whole_one(train_run, capsys):
    """Issue 19: a truncated newest trainer.pt failed every rerun ("checkpoint file is corrupted", no
    path). Each checkpoint lists its files' sizes and hashes; a resume passes over one that does not
    match, says so, and takes the newest whole one; the run then ends as an uninterrupted run does."""
    overrides = train_overrides(train_run, "pretrain.train.num_workers=0", "pretrain.train.budget.steps=40",
                                "pretrain.train.checkpoint_every=10", "pretrain.train.log_every=10",
                                "pretrain.name=truncated")
    cfg = load_job(None, overrides)
    first = pretrain(cfg)
    out = cfg.run.dir / "checkpoints" / "truncated"
    (folder,) = (out / "local_train").iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["step-00000030", "step-00000040"]
    assert json.loads((folder / "step-00000040" / "files-0.json").read_text())["trainer.pt"]["bytes"] > 0
    trainer = folder / "step-00000040" / "trainer.pt"
    trainer.write_bytes(trainer.read_bytes()[: trainer.stat().st_size // 2])  # cut short, as by a full disk
    (out / "manifest.json").unlink()  # the run is not finished: it must resume
    weights = load_file(out / "model.safetensors")
    capsys.readouterr()
    again = pretrain(cfg)
    said = capsys.readouterr().out
    assert "resuming from step-00000030" in said and "step-00000040: trainer.pt is" in said, said
    assert "resumed at step 30" in said and again["steps"] == 40
    assert again["final_loss"] == pytest.approx(first["final_loss"], abs=1e-4)
    resumed = load_file(out / "model.safetensors")
    assert all((weights[k] - resumed[k]).abs().max() < 1e-4 for k in weights)
