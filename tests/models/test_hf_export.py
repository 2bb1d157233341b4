"""Our dense GPT as a transformers model (issue 18): the same logits, reloaded offline, generating."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from slm.models.gpt import GPT, GPTConfig
from slm.models.hf import save_pretrained


@pytest.mark.parametrize("mlp, architecture", [("gelu", "ArceeForCausalLM"), ("swiglu", "LlamaForCausalLM")])
def test_exported_model_has_our_logits_and_generates(mlp, architecture, tmp_path):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=300, seq_len=64, n_layer=2, d_model=64, n_head=2, d_ff=128, mlp=mlp)).eval()
    for p in model.parameters():  # not the init's ones and zeros: every weight must land in its place
        p.data.add_(0.05 * torch.randn_like(p))
    save_pretrained(model, tmp_path)  # no end-of-text token: generation runs its 6 steps
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True).eval()
    assert type(hf).__name__ == architecture
    x = torch.randint(0, 300, (3, 40))
    with torch.no_grad():
        torch.testing.assert_close(hf(x).logits, model(x).logits, rtol=0, atol=1e-5)
        out = hf.generate(x[:1, :5], max_new_tokens=6, do_sample=False)
        greedy = x[:1, :5]
        for _ in range(6):  # our own greedy decoding, step by step
            greedy = torch.cat([greedy, model(greedy).logits[:, -1:].argmax(-1)], dim=1)
    assert out.tolist() == greedy.tolist()
