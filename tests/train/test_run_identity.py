"""A finished run stays finished when nothing of it changed (issue 65): a run's identity — the hash of what its
worker receives, `slm.train.trainer.pretrain_spec` — covers its own method's settings, its data and its training,
never another method's. Found by adding a label-smoothed method by the docs' recipe: registering it changed the key
of a plain generic run, and so did changing its ε alone."""

from __future__ import annotations

import pytest

from slm.config import config_hash
from slm.job import load_job
from slm.train.trainer import pretrain, pretrain_spec
from tests.conftest import REPO, registered_example, train_overrides

pytestmark = pytest.mark.ray  # the packed data come from the data stages on a local Ray (train_run)

QUICK = ["pretrain.train.num_workers=0", "pretrain.train.torch_threads=1", "pretrain.train.budget.steps=6",
         "pretrain.train.checkpoint_every=0", "pretrain.train.eval_every=0", "pretrain.train.log_every=3",
         "pretrain.train.batch_size=4", "pretrain.train.compile=never"]


def key(train_run, *overrides: str) -> str:
    return config_hash(pretrain_spec(load_job(None, train_overrides(train_run, *QUICK, *overrides)))[1])


def test_a_run_s_identity_is_its_own_method_s(train_run):
    generic = ("pretrain.method=generic", "pretrain.name=identity-generic")
    projected = ("pretrain.method=projected", "pretrain.name=identity-projected")
    before = {"generic": key(train_run, *generic), "projected": key(train_run, *projected)}
    finished = pretrain(load_job(None, train_overrides(train_run, *QUICK, *generic)))
    assert finished["config_hash"] == before["generic"]

    with registered_example("label_smoothing_method", REPO / "tests" / "label_smoothing_method.py", "smoothed"):
        # A method with settings of its own registered: every other method's runs keep their identity.
        assert key(train_run, *generic) == before["generic"]
        assert key(train_run, *projected) == before["projected"]
        # Its setting changed: its own runs are new ones, nobody else's.
        smoothed = ("pretrain.method=smoothed", "pretrain.name=identity-smoothed")
        assert key(train_run, *smoothed, "pretrain.model.smoothed.epsilon=0.2") != key(train_run, *smoothed)
        assert key(train_run, *generic, "pretrain.model.smoothed.epsilon=0.2") == before["generic"]
        # Another method's setting changed: SLM-pn's bank is SLM-pn's runs' business only.
        assert key(train_run, *generic, "pretrain.model.projected.bank_size=4") == before["generic"]
        assert key(train_run, *projected, "pretrain.model.projected.bank_size=4") != before["projected"]
        # …and the finished generic run is not trained again: the same command finds it complete and current.
        again = pretrain(load_job(None, train_overrides(train_run, *QUICK, *generic,
                                                        "pretrain.model.projected.bank_size=4")))
        assert again == finished
    # What makes the model still makes a new run: its own training settings.
    assert key(train_run, *generic, "pretrain.train.optim.lr=0.002") != before["generic"]
