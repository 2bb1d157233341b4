"""Warmup–stable–decay and its cooldown branches (issue 43): a budget B of a WSD trunk, trained as a branch
from the trunk's state at B's decay start, is the model a separate WSD run of B steps gives, bit for bit
(fp32, eager, one machine); a branch interrupted after one of its own checkpoints resumes from it, not from
the trunk; its snapshot carries the cost a run of B pays and, apart, what the branch added."""

from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file

from slm.artifacts import changed_files, check_recorded
from slm.job import load_job
from slm.train.config import OptimConfig
from slm.train.strategies import lr_lambda
from slm.train.trainer import TrainingInputError, pretrain
from tests.conftest import logged_rows, train_overrides

WSD = ["pretrain.train.num_workers=0", "pretrain.train.precision=fp32", "pretrain.train.compile=never",
       "pretrain.train.optim.schedule=wsd", "pretrain.train.optim.decay_fraction=0.25",
       "pretrain.train.optim.warmup_steps=5", "pretrain.train.optim.min_lr_ratio=0.0",
       "pretrain.train.log_every=1", "pretrain.train.checkpoint_every=2", "pretrain.train.batch_size=8"]


def test_a_wsd_schedule_is_the_same_for_every_horizon_until_its_decay():
    optim = OptimConfig(schedule="wsd", warmup_steps=5, decay_fraction=0.25, min_lr_ratio=0.0)
    long, short = lr_lambda(optim, 40), lr_lambda(optim, 20)
    assert [long(s) for s in range(15)] == [short(s) for s in range(15)]  # 20's decay starts at 15
    assert [short(s) for s in range(5, 16)] == [1.0] * 11  # stable after the warm-up, decaying after 15
    decay = [short(s) for s in range(15, 20)]
    assert decay == sorted(decay, reverse=True) and decay[-1] < 0.15 and long(19) == 1.0
    assert optim.decay_start(20) == 15 and optim.decay_start(40) == 30
    # cosine keeps its meaning for existing specs: a budget-dependent decay from the warm-up's end
    cosine = OptimConfig(warmup_steps=5)
    assert lr_lambda(cosine, 40)(10) != lr_lambda(cosine, 20)(10)


@pytest.mark.ray  # the training data come from the data stages on a local Ray (train_run)
def test_a_branch_is_the_separate_run_of_its_budget_bit_for_bit(train_run):
    trunk = pretrain(load_job(None, train_overrides(train_run, *WSD, "pretrain.name=wsd-trunk",
                                                    "pretrain.train.budget.steps=40",
                                                    "pretrain.snapshot_steps=[20, 40]")))
    separate = pretrain(load_job(None, train_overrides(train_run, *WSD, "pretrain.name=wsd-20",
                                                       "pretrain.train.budget.steps=20")))
    runs = train_run.run.dir / "checkpoints"
    branched = load_file(runs / "wsd-trunk" / "snapshots" / f"step-{20:08d}.safetensors")
    alone = load_file(runs / "wsd-20" / "model.safetensors")
    assert branched.keys() == alone.keys()
    assert all(branched[k].equal(alone[k]) for k in alone)  # bit for bit
    trunk_model = load_file(runs / "wsd-trunk" / "model.safetensors")
    assert not all(trunk_model[k].equal(alone[k]) for k in alone)  # the trunk went on: a different model
    # the branch trained steps 16-20 on the decay of a 20-step run, as the separate run did
    branch_log = {r["step"]: r for r in logged_rows(runs / "wsd-trunk" / "branches" / f"step-{20:08d}")}
    alone_log = {r["step"]: r for r in logged_rows(runs / "wsd-20")}
    assert sorted(branch_log) == list(range(16, 21))
    assert all(branch_log[s]["lr"] == alone_log[s]["lr"] and branch_log[s]["loss"] == alone_log[s]["loss"]
               for s in branch_log)
    index = json.loads((runs / "wsd-trunk" / "snapshots" / "snapshots.json").read_text())
    # what a user who trains 20 steps pays; the branch itself added its 5 decay steps
    assert index["20"]["cost"]["flops"] == separate["cost"]["flops"] and index["20"]["tokens"] == separate["tokens"]
    assert index["20"]["branch_cost"]["flops"] == pytest.approx(separate["cost"]["flops"] * 5 / 20)
    assert index["20"]["branch_point"] == 15 and index["40"]["cost"]["flops"] == trunk["cost"]["flops"]
    # The trunk's manifest records what the branches wrote into it: a sweep reading the snapshot checks it.
    assert changed_files(runs / "wsd-trunk") == {}
    assert check_recorded(runs / "wsd-trunk" / "snapshots" / f"step-{20:08d}.safetensors")

    # Interrupted mid-branch, after its checkpoint at step 18: the branch's later state removed, as a kill
    # leaves it. The rerun skips the complete trunk and resumes the branch from its own step 18.
    branch = runs / "wsd-trunk" / "branches" / f"step-{20:08d}"
    (checkpoints,) = (branch / "local_train").iterdir()
    shutil.rmtree(checkpoints / f"step-{20:08d}")
    for name in ("model.safetensors", "manifest.json", "summary.json"):
        (branch / name).unlink()
    (runs / "wsd-trunk" / "snapshots" / f"step-{20:08d}.safetensors").unlink()
    pretrain(load_job(None, train_overrides(train_run, *WSD, "pretrain.name=wsd-trunk",
                                            "pretrain.train.budget.steps=40", "pretrain.snapshot_steps=[20, 40]")))
    resumed = load_file(runs / "wsd-trunk" / "snapshots" / f"step-{20:08d}.safetensors")
    assert all(resumed[k].equal(alone[k]) for k in alone)
    assert [r["step"] for r in logged_rows(branch)] == list(range(16, 21))  # each step once


@pytest.mark.ray
def test_branches_that_cannot_be_trained_are_refused_naming_the_key(train_run):
    def refused(*extra):
        with pytest.raises(TrainingInputError) as err:
            pretrain(load_job(None, train_overrides(train_run, *WSD, "pretrain.name=wsd-refused", *extra)))
        return str(err.value)

    assert "pretrain.snapshot_steps" in refused("pretrain.train.budget.steps=40", "pretrain.snapshot_steps=[20, 80]")
    # 6 steps decay from step 5: inside the warm-up
    assert "warm-up" in refused("pretrain.train.budget.steps=40", "pretrain.snapshot_steps=[6]")
    assert "pretrain.train.budget.steps" in refused("pretrain.train.budget={tokens: 100000}",
                                                    "pretrain.snapshot_steps=[20]")
