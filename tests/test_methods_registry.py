"""The method registry: every method behind one protocol, and a new method added by one module
(docs/examples/uniform_method.py; docs/examples/tempered_method.py, the how-to's example, with a setting
of its own) without touching anything else."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from slm import methods
from slm.config import ConfigError, dump_yaml, from_dict
from slm.job import load_job
from slm.models.config import ModelConfig
from slm.models.gpt import preset
from slm.pipeline import check_methods
from slm.tune.plan import compared_methods
from slm.tune.sweep import plan_sweep
from tests.conftest import REPO, registered_example


@pytest.fixture
def uniform_method():
    """The how-to's example, registered for one test and removed after it."""
    with registered_example("uniform_method", REPO / "docs" / "examples" / "uniform_method.py", "uniform"):
        yield methods.get("uniform")


@pytest.fixture
def tempered_method():
    """The how-to's example with a setting of its own, registered for one test and removed after it."""
    with registered_example("tempered_method", REPO / "docs" / "examples" / "tempered_method.py", "tempered") as module:
        yield module


@pytest.fixture
def smoothed_method():
    """Issue 47's method whose loss has a setting (tests/label_smoothing_method.py), registered for one test."""
    with registered_example("label_smoothing_method", REPO / "tests" / "label_smoothing_method.py", "smoothed") as module:
        yield module



def test_every_method_builds_trains_and_serves_a_dense_gpt():
    """The protocol, for each shipped method: build, a training forward with a loss, instantiate a dense
    GPT for a domain histogram, and a checkpoint round trip through the one file format."""
    gpt = preset("tiny")
    h = [0.1, 0.2, 0.3, 0.4]
    x = torch.randint(0, gpt.vocab_size, (4, gpt.seq_len))
    for name in methods.names():
        model_config = from_dict(ModelConfig, {"mixture": {"n_experts": 4}, "projected": {"n_experts": 4},
                                               "soup": {"experts": 2, "active": 2}})
        method = methods.get(name).bind(model_config)
        arch = method.architecture(gpt, 4)
        model = method.build(arch)
        sampler = method.sampler(arch, torch.arange(4).repeat(8).numpy(), torch.arange(32).numpy(), 0)
        rows = sampler.indices(0, 0, 1, 4)
        out = method.forward(model, x, x, torch.arange(4), sampler.context(0))
        assert out.loss is not None and torch.isfinite(out.loss) and len(rows) == 4, name
        dense, chosen = method.instantiate(model, arch, h)
        assert dense.forward(x).logits.shape == (4, gpt.seq_len, gpt.vocab_size), name
        assert (chosen.get("expert") == 3) if method.has_experts else ("expert" not in chosen), name
        assert method.dense == (dense is model), name


def test_a_new_method_is_one_module(uniform_method, tmp_path):
    assert uniform_method.per_domain and uniform_method.pretrain_set("legal") == "resampled/legal/uniform"
    cfg = load_job(None, [f"run.root={tmp_path}", "sweep.methods=[generic, uniform]", "sweep.sizes=[d1]",
                          "sweep.domains=[legal, medical]", "sweep.pretrain_steps=[10]",
                          "sweep.domain_tokens=[1000]", "sweep.specialize_steps=[5]"])
    check_methods(cfg)
    p = plan_sweep(cfg, check_data=False)
    assert sorted(r.name for r in p.runs) == ["generic-d1", "uniform-legal-d1", "uniform-medical-d1"]
    assert methods.display("uniform") == ("uniform subset (SLM-is's control)", "tab:brown")


def test_a_new_method_with_its_own_setting_is_one_module(tempered_method, tmp_path):
    """The example's setting is a config section of its own, strict and validated, written back under its
    name; the method plans like any other, joins only sweeps that name it, and its sampler does what the
    setting says."""
    overrides = [f"run.root={tmp_path}", "pretrain.method=tempered", "pretrain.model.tempered.temperature=4",
                 "sweep.methods=[generic, tempered]", "sweep.sizes=[d1]", "sweep.domains=[legal]",
                 "sweep.pretrain_steps=[10]", "sweep.domain_tokens=[1000]", "sweep.specialize_steps=[5]"]
    cfg = load_job(None, overrides)
    check_methods(cfg)
    assert methods.get("tempered").bind(cfg.pretrain.model).settings == tempered_method.TemperedSettings(temperature=4.0)
    assert "  model:\n    preset: cpu-small\n    depth: 0\n" in dump_yaml(cfg)
    assert "    tempered:\n      temperature: 4.0\n" in dump_yaml(cfg)  # the resolved config, as it was given
    assert load_job(None, []).pretrain.model.settings("tempered").temperature == 2.0  # its default
    with pytest.raises(ConfigError, match=r"'pretrain.model.tempered.temperature': must be ≥ 1"):
        load_job(None, ["pretrain.model.tempered.temperature=0.5"])
    with pytest.raises(ConfigError, match=r"unknown config key 'pretrain.model.tempered.temp'"):
        load_job(None, ["pretrain.model.tempered.temp=3"])
    with pytest.raises(ConfigError, match=r"unknown config key 'pretrain.model.tempred'.*'tempered'"):
        load_job(None, ["pretrain.model.tempred.temperature=3"])
    assert sorted(r.name for r in plan_sweep(cfg, check_data=False).runs) == ["generic-d1", "tempered-d1"]
    assert "tempered" not in compared_methods(load_job(None, ["sweep.methods=[]"]).sweep)
    assert methods.display("tempered") == ("generic, T-sampled clusters", "tab:pink")

    coarse = np.repeat([0, 1], [900, 100])  # a cluster of 90% of the windows and one of 10%
    for temperature, small_share in ((1.0, 0.1), (1e9, 0.5)):  # T = 1: ∝ size; T → ∞: every cluster alike
        sampler = tempered_method.TemperedSampler(coarse, np.arange(1000), temperature, seed=0)
        drawn = sampler.indices(0, 0, 1, 20_000)
        assert abs((coarse[drawn] == 1).mean() - small_share) < 0.01, temperature
        assert np.array_equal(drawn, tempered_method.TemperedSampler(coarse, np.arange(1000), temperature, 0).indices(0, 0, 1, 20_000))


def test_a_method_chooses_its_objective_with_its_own_settings(smoothed_method):
    """A change of objective is the method's choice, the loss still computed in one place (issue 65): each run
    binds the registered method to its settings (a new object: two runs' settings never mix), its ``objective``
    hook returns the configured objective with its ε, and an unbound method refuses to guess. The logged ``ce`` is
    the plain cross-entropy whatever is optimized; the smoothed loss is ``smoothed_ce``."""
    from slm.train.config import ObjectiveConfig
    from slm.train.objectives import Objective

    gpt = preset("tiny")
    torch.manual_seed(0)
    model = methods.get("generic").build(methods.dense_record(gpt))
    x = torch.randint(0, gpt.vocab_size, (2, gpt.seq_len))
    logits = model(x).logits.float().flatten(0, 1)
    logp = torch.log_softmax(logits, -1)
    plain = -logp.gather(-1, x.flatten()[:, None]).mean()
    runs = {epsilon: methods.get("smoothed").bind(load_job(None, [f"pretrain.model.smoothed.epsilon={epsilon}"]).pretrain.model)
            for epsilon in (0.0, 0.3)}
    for epsilon, method in runs.items():
        assert method.settings.epsilon == epsilon
        chosen = method.objective(ObjectiveConfig(z_loss=1e-4))
        assert chosen == ObjectiveConfig(label_smoothing=epsilon, z_loss=1e-4)  # the rest as configured
        out = method.forward(model, x, x, torch.zeros(2), None, Objective(chosen.label_smoothing).data)
        losses = Objective().with_teacher(out, None, 0.0)
        # label smoothing by its definition: (1 − ε)·CE + ε·mean over the vocabulary of −log p
        expected = (1 - epsilon) * plain - epsilon * logp.mean()
        assert torch.allclose(losses.loss, expected, atol=1e-5), (epsilon, float(losses.loss), float(expected))
        assert torch.allclose(losses.ce, plain, atol=1e-6) and (("smoothed_ce" in losses.terms) == (epsilon > 0))
    assert methods.get("generic").objective(ObjectiveConfig(0.2)) == ObjectiveConfig(0.2)  # as configured
    with pytest.raises(RuntimeError, match="'smoothed'.*before the method was bound"):
        _ = methods.get("smoothed").settings
    with pytest.raises(ConfigError, match=r"'pretrain.model.smoothed.epsilon': must be in \[0, 1\)"):
        load_job(None, ["pretrain.model.smoothed.epsilon=1.5"])


def test_every_registered_method_says_whether_sweeps_compare_it():
    """``swept_by_default`` is each method's own statement: a method that inherits it is refused."""

    class Undecided(methods.get("generic").__class__):
        name = "undecided"

    with pytest.raises(TypeError, match="'undecided'.*must set swept_by_default"):
        methods.register(Undecided)
    assert "undecided" not in methods.names()


def test_unknown_methods_fail_with_the_key():
    for override, key in (("pretrain.method=moe", "pretrain.method"), ("sweep.methods=[generic, moe]", "sweep.methods")):
        with pytest.raises(ConfigError, match=key):
            check_methods(load_job(None, [override]))
    with pytest.raises(ConfigError, match="sweep.all_experts"):
        check_methods(load_job(None, ["sweep.methods=[generic]", "sweep.all_experts=true"]))


def test_one_registry_type_names_its_rules():
    """Issue 65: methods, subset methods and methods' settings sections are one registry type (slm.config.Registry):
    a name registered once, folder- and run-name-safe (it becomes part of `generic-d1-seed0` and of
    `resampled/legal/crisp`), and an unknown one refused naming the config key."""
    from slm.config import Registry
    from slm.data.resample import SUBSETS
    from slm.methods.registry import METHODS
    from slm.models.config import METHOD_SETTINGS

    assert all(isinstance(r, Registry) for r in (METHODS, SUBSETS, METHOD_SETTINGS))
    for bad in ("my-method", "Generic", "2stage", "a" * 33, "../x"):
        class Named(methods.get("generic").__class__):
            name = bad
            swept_by_default = False

        with pytest.raises(ValueError, match="lower-case letters, digits or '_'"):
            methods.register(Named)
        assert bad not in methods.names()
    with pytest.raises(ConfigError, match=r"config key 'resample.methods': unknown resample method 'random'; "
                                          r"resample methods: \["):
        SUBSETS.get("random")
    with pytest.raises(ConfigError, match=r"config key 'sweep.methods': unknown method 'moe'"):
        methods.get("moe", "sweep.methods")
