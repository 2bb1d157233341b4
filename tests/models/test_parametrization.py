"""µP (``model.parametrization: mup``; issue 63): the coordinate check — how much each layer's activations move
in the first steps, across widths — flat under µP and growing with width under the standard parametrization;
every method's model takes its learning-rate factors from the same rule; the standard parametrization is the
model it was before (its golden training: tests/train/test_numerics.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from slm import methods
from slm.config import ConfigError
from slm.models.config import ModelConfig, size_config
from slm.models.gpt import GPT, GPTConfig
from slm.train.config import OptimConfig
from slm.train.strategies import make_optimizer, param_groups

WIDTHS = (64, 128, 256)


def config(width: int, depth: int, parametrization: str) -> GPTConfig:
    return GPTConfig.from_depth(depth, vocab_size=256, seq_len=64, d_model=width, n_head=width // 64, d_ff=4 * width,
                                parametrization=parametrization)


def movement(width: int, depth: int, parametrization: str, steps: int = 5) -> dict[str, float]:
    """Mean |Δ| per coordinate of each block's output and of the logits on a fixed batch after ``steps``
    AdamW steps at one rate (the platform's optimizer, with the parametrization's factors)."""
    torch.manual_seed(0)
    cfg = config(width, depth, parametrization)
    model = GPT(cfg)
    opt, _ = make_optimizer(model, OptimConfig(lr=1e-2, warmup_steps=0, weight_decay=0.0), None,
                            lr_scale=cfg.lr_scale)
    chain = np.empty((steps + 1, 16, 65), dtype=np.int64)
    chain[..., 0] = np.random.default_rng(0).integers(0, 256, size=(steps + 1, 16))
    for t in range(64):
        chain[..., t + 1] = (5 * chain[..., t] + 17) % 256
    tokens = torch.from_numpy(chain)
    seen: dict[str, torch.Tensor] = {}
    for k, block in enumerate(model.blocks):
        block.register_forward_hook(lambda module, args, out, k=k: seen.__setitem__(f"block{k}", out.detach()))

    def activations() -> dict[str, torch.Tensor]:
        with torch.no_grad():
            logits = model(tokens[0, :, :-1]).logits
        return {**{k: v.clone() for k, v in seen.items()}, "logits": logits}

    before = activations()
    for batch in tokens[1:]:
        loss = model(batch[:, :-1], batch[:, 1:]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = activations()
    return {k: float((after[k] - before[k]).abs().mean()) for k in before}


@pytest.mark.parametrize("depth", [1, 2])
def test_the_coordinate_check(depth):
    """From width 64 to 256 (4×) a layer's movement grows ≥ 3× under the standard parametrization (Adam moves
    every weight by ~lr whatever its fan-in) and stays within a factor 2 under µP."""
    sp = {w: movement(w, depth, "sp") for w in WIDTHS}
    mup = {w: movement(w, depth, "mup") for w in WIDTHS}
    for layer in sp[64]:
        assert sp[256][layer] / sp[64][layer] >= 3 or layer == "logits", (layer, sp)
        assert 0.5 <= mup[256][layer] / mup[64][layer] <= 2, (layer, mup)
    assert sp[256]["logits"] / sp[64]["logits"] >= 2.5 and sp[256]["block0"] / sp[64]["block0"] >= 5


def test_every_methods_model_takes_the_rules_factors():
    """Hidden matrices (inside the blocks: a dense GPT's, the soup's experts, SLM-pn's bank, SLM-mix's experts)
    train at lr/m under µP, the rest at lr; under the standard parametrization every group is at lr."""
    for name in methods.names():
        method = methods.get(name).bind(ModelConfig())
        arch = method.architecture(config(128, 2, "mup"), 4)
        model = method.build(arch)
        groups = param_groups(model, 0.1, arch.gpt.lr_scale)
        scales = {p: g["lr_scale"] for g in groups for p in map(id, g["params"])}
        for pname, p in model.named_parameters():
            expected = 0.5 if p.dim() >= 2 and "blocks" in pname else 1.0
            assert scales[id(p)] == expected, (name, pname)
        sp_arch = method.architecture(config(128, 2, "sp"), 4)
        assert {g["lr_scale"] for g in param_groups(method.build(sp_arch), 0.1, sp_arch.gpt.lr_scale)} == {1.0}


def test_mup_initialises_hidden_weights_over_root_m_and_scales_the_readout():
    torch.manual_seed(0)
    wide = GPT(config(256, 2, "mup"))
    assert wide.config.width_mult == 4 and wide.config.branch_mult == 0.5
    assert wide.blocks[0].mlp.fc.weight.std().item() == pytest.approx(0.02 / 2, rel=0.05)
    assert wide.blocks[1].attn.proj.weight.std().item() == pytest.approx(0.02 / 2, rel=0.05)  # no GPT-2 depth factor
    assert wide.embed.weight.std().item() == pytest.approx(0.02, rel=0.05)
    x = torch.randint(0, 256, (2, 16))
    plain = torch.nn.functional.linear(wide.norm(wide.embed(x)), wide.embed.weight)
    wide.blocks = torch.nn.ModuleList()  # no blocks: the logits are the readout of the embedding alone
    torch.testing.assert_close(wide(x).logits, plain / 4)


def test_sizes_name_a_width_and_bad_ones_are_refused():
    wide = size_config("d2w256")
    assert (wide.depth, wide.width, wide.size_name) == (2, 256, "d2w256")
    assert size_config("d2").size_name == size_config("d2w128").size_name == "d2"  # 128 is d2's own width
    with pytest.raises(ConfigError, match="width 100"):
        size_config("d1w100")
    with pytest.raises(ConfigError, match="'pretrain.model.width'"):
        from slm.config import from_dict

        from_dict(ModelConfig, {"width": 96, "depth": 1}, "pretrain.model.")
