"""The model zoo: parity of instantiation, Soup-of-Experts gradients, parameter counts, learning, errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from slm.models import (
    GPT,
    DomainPrior,
    MixtureOfExperts,
    ModelConfigError,
    ProjectedNetwork,
    SoupOfExperts,
    load_dense,
    preset,
    save_dense,
)

# Real text (Genesis 1:1-5, KJV, public domain) as byte-level tokens: the tiny preset's vocabulary
# (512) holds every byte value.
TEXT = (
    b"In the beginning God created the heaven and the earth. And the earth was without form, and void; "
    b"and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. "
    b"And God said, Let there be light: and there was light. And God saw the light, that it was good: and "
    b"God divided the light from the darkness. And God called the light Day, and the darkness he called Night."
)


def batch(cfg, b=4, seed=0):
    tokens = torch.tensor(list(TEXT), dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(tokens) - cfg.seq_len - 1, (b,), generator=g)
    x = torch.stack([tokens[s : s + cfg.seq_len] for s in starts])
    y = torch.stack([tokens[s + 1 : s + cfg.seq_len + 1] for s in starts])
    return x, y


@pytest.fixture
def cfg():
    torch.manual_seed(0)
    return preset("tiny")


def models(cfg):
    return {
        "dense": GPT(cfg),
        "mixture": MixtureOfExperts(cfg, n_experts=3),
        "projected": ProjectedNetwork(cfg, n_experts=3, expert_dim=4, bank_size=5),
        "soup": SoupOfExperts(cfg, n_experts=4, n_domains=6, expert_init_std=0.02),
        "soup-mlp": SoupOfExperts(cfg, n_experts=4, n_domains=6, experts_on="mlp", expert_init_std=0.02),
    }


def forward(name, model, x, y=None, expert=1, h=None):
    if name == "dense":
        return model(x, y)
    if name.startswith("soup"):
        return model(x, h, y)
    return model(x, torch.full((x.shape[0],), expert), y)


H = torch.tensor([0.0, 0.2, 0.8, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("name", ["mixture", "projected", "soup", "soup-mlp"])
def test_instantiated_dense_model_matches_parent(cfg, name):
    model = models(cfg)[name]
    x, _ = batch(cfg)
    with torch.no_grad():
        parent = forward(name, model, x, expert=2, h=H).logits
        dense = model.instantiate(H if name.startswith("soup") else 2)
        assert type(dense) is GPT
        child = dense(x).logits
    torch.testing.assert_close(child, parent, atol=1e-5, rtol=0)
    assert dense.num_params() == GPT(cfg).num_params()


def test_mixed_batches_route_each_row_to_its_expert(cfg):
    for name in ("mixture", "projected"):
        model = models(cfg)[name]
        x, _ = batch(cfg, b=6)
        ids = torch.tensor([0, 2, 1, 2, 0, 1])
        with torch.no_grad():
            logits = model(x, ids).logits
            for row, e in enumerate(ids.tolist()):
                torch.testing.assert_close(logits[row], model.instantiate(e)(x[row : row + 1]).logits[0],
                                           atol=1e-5, rtol=0)


def test_projected_experts_differ_and_share_attention(cfg):
    pn = ProjectedNetwork(cfg, n_experts=3, expert_dim=4, bank_size=5)
    a, b = pn.instantiate(0), pn.instantiate(1)
    assert not torch.allclose(a.blocks[0].mlp.fc.weight, b.blocks[0].mlp.fc.weight)
    torch.testing.assert_close(a.blocks[0].attn.qkv.weight, b.blocks[0].attn.qkv.weight)
    # Instantiated FFN weights have the dense init's scale (within sampling noise).
    std = a.blocks[0].mlp.fc.weight.std().item()
    assert 0.5 * cfg.init_std < std < 2 * cfg.init_std


def test_projected_with_identity_maps_is_a_mixture(cfg):
    """SLM-mix is PN with h = k_e, E = I, M = I: expert i's FFN weights are then exactly T[i]."""
    pn = ProjectedNetwork(cfg, n_experts=3, expert_dim=3, bank_size=3)
    with torch.no_grad():
        pn.expert_embedding.copy_(torch.eye(3))
        for m in pn.mixing.values():
            m.copy_(torch.eye(3))
    for i in range(3):
        weights = pn.expert_weights(i)
        for name, w in weights.items():
            torch.testing.assert_close(w, pn.bank[name.replace(".", "__")][i])


def test_soup_gradients_are_alpha_times_theta_gradient(cfg):
    soup = SoupOfExperts(cfg, n_experts=4, n_domains=6, expert_init_std=0.02).double()
    x, y = batch(cfg)
    soup(x, H.double(), y).loss.backward()
    alpha = soup.coefficients(H.double()).detach()
    # The same loss through a dense model holding Θ(h) as leaves gives ∂L/∂Θ directly.
    theta = soup.instantiate(H.double()).double()
    theta(x, y).loss.backward()
    theta_grads = dict(theta.named_parameters())
    for name in soup.mixed_names:
        g_theta = theta_grads[name].grad
        torch.testing.assert_close(dict(soup.shared.named_parameters())[name].grad, g_theta)
        g_experts = soup.experts[name.replace(".", "__")].grad
        for j in range(soup.n_experts):
            torch.testing.assert_close(g_experts[j], alpha[j] * g_theta, atol=1e-10, rtol=1e-7)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in soup.router.parameters())


def test_soup_merge_cost_does_not_depend_on_batch(cfg):
    """Θ(h) is computed once per forward, not once per example: the merged tensors have the dense shapes."""
    soup = SoupOfExperts(cfg, n_experts=4, n_domains=6)
    merged = soup.merged(H)
    shapes = {n: p.shape for n, p in GPT(cfg).named_parameters()}
    assert all(merged[n].shape == shapes[n] for n in merged)


@pytest.mark.parametrize("name", ["dense", "mixture", "projected", "soup"])
def test_each_architecture_learns_a_fixed_batch(cfg, name):
    torch.manual_seed(0)
    model = models(cfg)[name]
    x, y = batch(cfg, b=4, seed=1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    first = None
    for _step in range(300):
        loss = forward(name, model, x, y, expert=1, h=H).loss
        first = first if first is not None else loss.item()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if loss.item() <= 0.1 * first:
            break
    assert loss.item() <= 0.1 * first, f"{name}: loss {first:.3f} → {loss.item():.3f}"


def test_outputs_for_kd_and_salt(cfg):
    model = GPT(cfg)
    x, y = batch(cfg)
    out = model(x, y)
    assert out.logits.shape == (*x.shape, cfg.vocab_size)
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), y.flatten()))


def test_dense_checkpoint_round_trip(cfg, tmp_path):
    dense = ProjectedNetwork(cfg, 2, 2, 2).instantiate(1)
    save_dense(dense, tmp_path / "m.safetensors", metadata={"method": "projected", "expert": 1})
    loaded = load_dense(tmp_path / "m.safetensors")
    x, _ = batch(cfg)
    torch.testing.assert_close(loaded(x).logits, dense(x).logits)
    assert loaded.config == dense.config
    assert loaded.state_dict().keys() == dense.state_dict().keys()
    for name, tensor in dense.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    # A safetensors file that is not one of our dense checkpoints is refused by name, not loaded.
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="is not a dense slm GPT checkpoint"):
        load_dense(tmp_path / "other.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(Exception, match="(?i)header|invalid|deserializ"):
        load_dense(tmp_path / "bad.safetensors")


def test_domain_prior(cfg):
    prior = DomainPrior(k=10, s=2, seed=3)
    draws = [prior.sample() for _ in range(200)]
    assert all(int((h > 0).sum()) == 2 and abs(float(h.sum()) - 1) < 1e-6 for h in draws)
    assert len({tuple(h.nonzero().flatten().tolist()) for h in draws}) > 20  # the active set changes
    state = prior.state_dict()
    again = [prior.sample() for _ in range(5)]
    prior.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(again, [prior.sample() for _ in range(5)], strict=True))


def test_bad_configs_fail_clearly(cfg):
    with pytest.raises(ModelConfigError, match="d_model=100 is not divisible by n_head=3"):
        GPT(dataclasses.replace(cfg, d_model=100, n_head=3))
    with pytest.raises(ModelConfigError, match="n_experts must be at least 1"):
        MixtureOfExperts(cfg, 0)
    with pytest.raises(ModelConfigError, match="n_experts must be at least 1"):
        SoupOfExperts(cfg, 0, 4)
    with pytest.raises(ModelConfigError, match="bank_size must be at least 1"):
        ProjectedNetwork(cfg, 2, 2, 0)
    with pytest.raises(ModelConfigError, match="unknown model preset 'huge'"):
        preset("huge")
    soup = SoupOfExperts(cfg, 2, 6)
    x, _ = batch(cfg)
    with pytest.raises(ValueError, match="vector of length 6"):
        soup(x, torch.ones(5) / 5)
    with pytest.raises(ValueError, match="simplex"):
        soup(x, torch.tensor([0.5, 0.6, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match="simplex"):
        soup.instantiate(torch.tensor([1.5, -0.5, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match=r"expert ids must be in \[0, 3\)"):
        MixtureOfExperts(cfg, 3)(x, torch.tensor([0, 1, 3, 0]))
    with pytest.raises(ModelConfigError, match="active domains s"):
        DomainPrior(k=4, s=5)


def test_paper_presets_have_the_papers_shapes():
    with torch.device("meta"):
        small, large = GPT(preset("slm-126m")), GPT(preset("llm-771m"))
    assert 115e6 < small.num_params() < 135e6
    assert 740e6 < large.num_params() < 800e6
    assert small.flops_per_token() > 6 * small.num_params()
