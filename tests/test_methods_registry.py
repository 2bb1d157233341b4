"""The method registry: every method behind one protocol, and a new method added by one module
(docs/examples/uniform_method.py, the how-to's example) without touching anything else."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from slm import methods
from slm.config import ConfigError
from slm.job import load_job
from slm.methods import registry
from slm.models.config import ModelConfig
from slm.models.gpt import preset
from slm.pipeline import check_methods
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


def test_every_method_builds_trains_and_serves_a_dense_gpt():
    """The protocol, for each shipped method: build, a training forward with a loss, instantiate a dense
    GPT for a domain histogram, and a checkpoint round trip through the one file format."""
    gpt = preset("tiny")
    h = [0.1, 0.2, 0.3, 0.4]
    x = torch.randint(0, gpt.vocab_size, (4, gpt.seq_len))
    for name in methods.names():
        method = methods.get(name)
        arch = method.architecture(gpt, ModelConfig(n_experts=4, soup_experts=2), 4)
        model = method.build(arch)
        sampler = method.sampler(arch, torch.arange(4).repeat(8).numpy(), torch.arange(32).numpy(), 0,
                                 ModelConfig(soup_active=2))
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


def test_unknown_methods_fail_with_the_key():
    for override, key in (("pretrain.method=moe", "pretrain.method"), ("sweep.methods=[generic, moe]", "sweep.methods")):
        with pytest.raises(ConfigError, match=key):
            check_methods(load_job(None, [override]))
    with pytest.raises(ConfigError, match="sweep.all_experts"):
        check_methods(load_job(None, ["sweep.methods=[generic]", "sweep.all_experts=true"]))
