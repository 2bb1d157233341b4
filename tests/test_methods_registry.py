"""The method registry: every method behind one protocol, and a new method added by one module
(docs/examples/uniform_method.py; docs/examples/tempered_method.py, the how-to's example, with a setting
of its own) without touching anything else."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
import torch

from slm import methods
from slm.config import ConfigError, dump_yaml, from_dict
from slm.job import load_job
from slm.methods import registry
from slm.models.config import METHOD_SETTINGS, ModelConfig
from slm.models.gpt import preset
from slm.pipeline import check_methods
from slm.tune.plan import compared_methods
from slm.tune.sweep import plan
from tests.conftest import REPO


@pytest.fixture
def uniform_method():
    """The how-to's example, registered for one test and removed after it."""
    spec = importlib.util.spec_from_file_location("uniform_method", REPO / "docs" / "examples" / "uniform_method.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # @register makes it known
    yield methods.get("uniform")
    registry._METHODS.pop("uniform")


@pytest.fixture
def tempered_method():
    """The how-to's example with a setting of its own, registered for one test and removed after it."""
    spec = importlib.util.spec_from_file_location("tempered_method", REPO / "docs" / "examples" / "tempered_method.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves its annotations through it
    spec.loader.exec_module(module)
    yield module
    registry._METHODS.pop("tempered")
    METHOD_SETTINGS._classes.pop("tempered")
    sys.modules.pop(spec.name)


def test_every_method_builds_trains_and_serves_a_dense_gpt():
    """The protocol, for each shipped method: build, a training forward with a loss, instantiate a dense
    GPT for a domain histogram, and a checkpoint round trip through the one file format."""
    gpt = preset("tiny")
    h = [0.1, 0.2, 0.3, 0.4]
    x = torch.randint(0, gpt.vocab_size, (4, gpt.seq_len))
    for name in methods.names():
        method = methods.get(name)
        model_config = from_dict(ModelConfig, {"mixture": {"n_experts": 4}, "projected": {"n_experts": 4},
                                               "soup": {"experts": 2, "active": 2}})
        arch = method.architecture(gpt, model_config, 4)
        model = method.build(arch)
        sampler = method.sampler(arch, torch.arange(4).repeat(8).numpy(), torch.arange(32).numpy(), 0, model_config)
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
    p = plan(cfg, check_data=False)
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
    assert methods.get("tempered").settings(cfg.pretrain.model) == tempered_method.TemperedSettings(temperature=4.0)
    assert "  model:\n    preset: cpu-small\n    depth: 0\n" in dump_yaml(cfg)
    assert "    tempered:\n      temperature: 4.0\n" in dump_yaml(cfg)  # the resolved config, as it was given
    assert load_job(None, []).pretrain.model.settings("tempered").temperature == 2.0  # its default
    with pytest.raises(ConfigError, match=r"'pretrain.model.tempered.temperature': must be ≥ 1"):
        load_job(None, ["pretrain.model.tempered.temperature=0.5"])
    with pytest.raises(ConfigError, match=r"unknown config key 'pretrain.model.tempered.temp'"):
        load_job(None, ["pretrain.model.tempered.temp=3"])
    with pytest.raises(ConfigError, match=r"unknown config key 'pretrain.model.tempred'.*'tempered'"):
        load_job(None, ["pretrain.model.tempred.temperature=3"])
    assert sorted(r.name for r in plan(cfg, check_data=False).runs) == ["generic-d1", "tempered-d1"]
    assert "tempered" not in compared_methods(load_job(None, ["sweep.methods=[]"]).sweep)
    assert methods.display("tempered") == ("generic, T-sampled clusters", "tab:pink")

    coarse = np.repeat([0, 1], [900, 100])  # a cluster of 90% of the windows and one of 10%
    for temperature, small_share in ((1.0, 0.1), (1e9, 0.5)):  # T = 1: ∝ size; T → ∞: every cluster alike
        sampler = tempered_method.TemperedSampler(coarse, np.arange(1000), temperature, seed=0)
        drawn = sampler.indices(0, 0, 1, 20_000)
        assert abs((coarse[drawn] == 1).mean() - small_share) < 0.01, temperature
        assert np.array_equal(drawn, tempered_method.TemperedSampler(coarse, np.arange(1000), temperature, 0).indices(0, 0, 1, 20_000))


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
