"""Ray Train with 2 CPU workers over gloo: a real SIGKILL of a training worker mid-run (the run resumes
from its last checkpoint and its losses after that point equal an uninterrupted run's), and DeepSpeed
ZeRO-2 (every rank's optimizer shard checkpointed, the run resumed from it, the same losses as DDP)."""

from __future__ import annotations

import shutil
import time

import pytest
from safetensors.torch import load_file

from slm.artifacts import read_manifest
from slm.job import load_job
from slm.train.trainer import pretrain
from tests.conftest import WorkerKiller, logged_rows, train_overrides

pytestmark = pytest.mark.ray

TWO_WORKERS = ["pretrain.train.num_workers=2", "pretrain.train.log_every=1", "pretrain.train.report_every=0", "pretrain.train.batch_size=8",
               "ray.include_dashboard=false"]


def rows_by_step(folder) -> dict[int, dict]:
    """The logged row of every step."""
    return {row["step"]: row for row in logged_rows(folder)}


def logged_steps(folder) -> list[int]:
    return [row["step"] for row in logged_rows(folder)]


@pytest.fixture(scope="module")
def uninterrupted(train_run):
    cfg = load_job(None, train_overrides(train_run, *TWO_WORKERS, "pretrain.name=ddp-reference",
                                         "pretrain.train.budget.steps=200", "pretrain.train.checkpoint_every=50"))
    return pretrain(cfg, cfg.run.dir), cfg.run.dir / "checkpoints" / "ddp-reference"


def test_worker_sigkill_resumes_from_the_last_checkpoint(train_run, uninterrupted):
    cfg = load_job(None, train_overrides(train_run, *TWO_WORKERS, "pretrain.name=ddp-killed",
                                         "pretrain.train.budget.steps=200", "pretrain.train.checkpoint_every=50",
                                         "pretrain.train.max_failures=1"))
    out = cfg.run.dir / "checkpoints" / "ddp-killed"
    with WorkerKiller(out, after_step=60) as killer:
        m = pretrain(cfg, cfg.run.dir)
    assert killer.killed, "no training worker was killed"
    steps = logged_steps(out)
    assert m["steps"] == 200 and steps[-1] == 200
    # the run went back to its step-50 checkpoint after a kill past step 60, and dropped the rows the killed
    # workers had logged after it: the log has each step once (issue 19)
    assert steps == list(range(1, 201))
    ref, _ = uninterrupted
    a, b = rows_by_step(uninterrupted[1]), rows_by_step(out)
    for step in range(51, 201):
        assert b[step]["loss"] == pytest.approx(a[step]["loss"], abs=1e-4), step
    final_a = load_file(uninterrupted[1] / "model.safetensors")
    final_b = load_file(out / "model.safetensors")
    assert all((final_a[k] - final_b[k]).abs().max() < 1e-4 for k in final_a)


def test_deepspeed_zero2_checkpoints_every_rank_and_resumes(train_run, uninterrupted, capsys):
    args = [*TWO_WORKERS, "pretrain.name=zero2", "pretrain.train.strategy=deepspeed", "pretrain.train.zero_stage=2",
            "pretrain.train.budget.steps=20", "pretrain.train.checkpoint_every=10"]
    cfg = load_job(None, train_overrides(train_run, *args))
    m = pretrain(cfg, cfg.run.dir)
    out = cfg.run.dir / "checkpoints" / "zero2"
    assert m["steps"] == 20 and m["strategy"] == "deepspeed"
    (ray_dir,) = (out / "ray_train").glob("zero2-*")
    shards = sorted(p.name for p in (ray_dir / "step-00000020" / "deepspeed" / "state").iterdir())
    assert any("zero_pp_rank_0" in s and "optim" in s for s in shards)
    assert any("zero_pp_rank_1" in s and "optim" in s for s in shards)
    # ZeRO-2 partitions the optimizer, not the arithmetic: the losses follow DDP's
    ddp = rows_by_step(uninterrupted[1])
    for step, row in rows_by_step(out).items():
        assert row["loss"] == pytest.approx(ddp[step]["loss"], rel=1e-3), step
    # the job dies after its last checkpoint: a rerun resumes from it (model, optimizer, progress) and
    # has nothing left to train
    before = load_file(out / "model.safetensors")
    (out / "manifest.json").unlink()
    again = pretrain(cfg, cfg.run.dir)
    assert again["steps"] == 20 and logged_steps(out)[-1] == 20
    after = load_file(out / "model.safetensors")
    assert all(bool((before[k] == after[k]).all()) for k in before)
    assert read_manifest(out)["complete"]
    # Issue 19: the newest checkpoint folder deleted by hand. Ray Train's record still named it and every
    # rerun failed (CheckpointManagerInitializationError) until the whole ray_train folder went; the record
    # is set aside and the run resumes from the checkpoint before, to the same model.
    shutil.rmtree(ray_dir / "step-00000020")
    (out / "manifest.json").unlink()
    capsys.readouterr()
    started = time.time()
    third = pretrain(cfg, cfg.run.dir)
    said = capsys.readouterr().out
    assert "names checkpoints that are gone (step-00000020)" in said, said
    rows = rows_by_step(out)  # steps 1-10 logged before this rerun, 11-20 by it: resumed at step 10
    assert third["steps"] == 20 and sorted(rows) == list(range(1, 21))
    assert all((rows[step]["wall_time"] > started) == (step > 10) for step in rows)
    again_after = load_file(out / "model.safetensors")
    assert all((before[k] - again_after[k]).abs().max() < 1e-4 for k in before)
