"""Our dense GPT as a Hugging Face transformers model, so that a specialized model can leave the platform.

The GPT (RMSNorm, RoPE in the GPT-NeoX half-split layout, no biases, tied embeddings) is exactly a
transformers architecture: with the GELU MLP, Arcee's (``up_proj`` → activation → ``down_proj``, with
``hidden_act="gelu"``: exact GELU, as ``F.gelu``); with SwiGLU, Llama's (``down(silu(gate) · up)``: our
``fc`` is Llama's gate, our ``gate`` its up). ``to_hf`` builds that model with our weights;
``save_pretrained`` writes a folder ``AutoModelForCausalLM`` and ``AutoTokenizer`` load offline: the
byte-level BPE as a ``PreTrainedTokenizerFast`` whose ``<|endoftext|>`` is the beginning, end and padding
token, as in training, where it separates the packed documents (so it is also the context a document
starts from).
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer
from tokenizers.processors import TemplateProcessing
from transformers import (
    ArceeConfig,
    ArceeForCausalLM,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from slm.models.gpt import GPT, GPTConfig


def hf_config(cfg: GPTConfig, bos_token_id: int | None = None, eos_token_id: int | None = None):
    """The transformers config of the same architecture (Arcee for GELU, Llama for SwiGLU)."""
    common = dict(vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
                  num_hidden_layers=cfg.n_layer, num_attention_heads=cfg.n_head, num_key_value_heads=cfg.n_head,
                  head_dim=cfg.head_dim, max_position_embeddings=cfg.seq_len, rms_norm_eps=cfg.norm_eps,
                  rope_theta=cfg.rope_base, tie_word_embeddings=cfg.width_mult == 1, attention_bias=False, mlp_bias=False,
                  bos_token_id=bos_token_id, eos_token_id=eos_token_id, pad_token_id=eos_token_id)
    if cfg.mlp == "gelu":
        return ArceeConfig(hidden_act="gelu", **common)
    return LlamaConfig(hidden_act="silu", **common)


def hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """Our weights under the transformers model's names (the fused qkv split into q, k and v). µP's multipliers
    are folded into the weights they follow: CompleteP's branch multiplier into each branch's output
    projection, the readout's 1/m into an output projection of its own (untied: the embedding stays as it is)."""
    cfg, state = model.config, model.state_dict()
    out = {"model.embed_tokens.weight": state["embed.weight"], "model.norm.weight": state["norm.weight"]}
    if cfg.width_mult != 1:
        out["lm_head.weight"] = state["embed.weight"] / cfg.width_mult
    for i in range(cfg.n_layer):
        ours, theirs = f"blocks.{i}.", f"model.layers.{i}."
        q, k, v = state[ours + "attn.qkv.weight"].chunk(3, dim=0)
        out.update({
            theirs + "self_attn.q_proj.weight": q, theirs + "self_attn.k_proj.weight": k,
            theirs + "self_attn.v_proj.weight": v,
            theirs + "self_attn.o_proj.weight": state[ours + "attn.proj.weight"] * cfg.branch_mult,
            theirs + "input_layernorm.weight": state[ours + "attn_norm.weight"],
            theirs + "post_attention_layernorm.weight": state[ours + "mlp_norm.weight"],
            theirs + "mlp.down_proj.weight": state[ours + "mlp.proj.weight"] * cfg.branch_mult,
        })
        if cfg.mlp == "gelu":
            out[theirs + "mlp.up_proj.weight"] = state[ours + "mlp.fc.weight"]
        else:
            out[theirs + "mlp.gate_proj.weight"] = state[ours + "mlp.fc.weight"]
            out[theirs + "mlp.up_proj.weight"] = state[ours + "mlp.gate.weight"]
    return {name: t.detach().clone().contiguous() for name, t in out.items()}


def to_hf(model: GPT, bos_token_id: int | None = None, eos_token_id: int | None = None) -> PreTrainedModel:
    """The transformers model with our weights, in float32, in eval mode."""
    config = hf_config(model.config, bos_token_id, eos_token_id)
    hf = (ArceeForCausalLM if model.config.mlp == "gelu" else LlamaForCausalLM)(config)
    missing, unexpected = hf.load_state_dict(hf_state_dict(model), strict=False)
    # The tied output projection is the embedding: transformers lists it as missing and ties it.
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ValueError(f"the conversion does not fit {type(hf).__name__}: missing {missing}, unexpected {unexpected}")
    if config.tie_word_embeddings:
        hf.tie_weights()
    return hf.float().eval()


def hf_tokenizer(tokenizer_file: str | Path, max_length: int) -> PreTrainedTokenizerFast:
    """Our BPE file as a transformers tokenizer. Its one special token, id 0, separates documents (the
    data stages' ``<|endoftext|>``): it is read from the file, so that models need nothing of the data
    layer. Encoding puts it first (``add_special_tokens=False`` leaves it out), because every document
    the model trained on and every one the platform scores starts after it: plain
    ``AutoTokenizer(text)`` feeds the model what the platform measured."""
    raw = Tokenizer.from_file(str(tokenizer_file))
    specials = [t.content for i, t in raw.get_added_tokens_decoder().items() if t.special and i == 0]
    if not specials:
        raise ValueError(f"{tokenizer_file} has no special token at id 0 (the document separator): not an slm tokenizer")
    eot = specials[0]
    raw.post_processor = TemplateProcessing(single=f"{eot} $A", pair=f"{eot} $A {eot} $B", special_tokens=[(eot, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=raw, bos_token=eot, eos_token=eot, pad_token=eot,
                                   model_max_length=max_length, clean_up_tokenization_spaces=False)


def save_pretrained(model: GPT, out: str | Path, tokenizer_file: str | Path | None = None) -> PreTrainedModel:
    """Write ``out`` (config.json, model.safetensors, generation_config.json and, given the BPE file, the
    tokenizer's files); the caller makes the folder atomic."""
    tokenizer = hf_tokenizer(tokenizer_file, model.config.seq_len) if tokenizer_file else None
    if tokenizer is not None and len(tokenizer) != model.config.vocab_size:
        raise ValueError(f"{tokenizer_file} has {len(tokenizer)} tokens, the model {model.config.vocab_size}: "
                         "not the tokenizer this model was trained with")
    eot = tokenizer.eos_token_id if tokenizer is not None else None
    hf = to_hf(model, bos_token_id=eot, eos_token_id=eot)
    hf.generation_config = GenerationConfig(bos_token_id=eot, eos_token_id=eot, pad_token_id=eot)
    hf.save_pretrained(str(out))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out))
    return hf
