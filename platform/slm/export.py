"""Taking a model away: ``slm export`` writes a Hugging Face folder, ``slm generate`` samples from one.

A model is what a training run wrote (``model.safetensors``, or the run's folder): a dense GPT (the
generic model, SLM-is, DSIR, a distilled or SALT student, any specialized model) converts exactly to a
transformers architecture (:mod:`slm.models.hf`). A pretrained SLM-mix bank, SLM-pn or soup is many
models in one: specialization instantiates it for a domain, and that dense model is the one to export.
The tokenizer is the run's (``<run>/tokenizer/tokenizer.json``, found above the model) unless named.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from slm.artifacts import atomic_path, file_sha256
from slm.methods import display
from slm.methods.checkpoint import load_model
from slm.models.gpt import GPT
from slm.models.hf import hf_tokenizer, save_pretrained, to_hf

HF_CONFIG = "config.json"
EXPORT_RECORD = "slm_export.json"


def model_file(path: str | Path) -> Path:
    """A checkpoint file, or the run folder that holds one."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / "model.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: give a model.safetensors or the training run's folder "
                                "(e.g. runs/quickstart/specialized/legal/importance-legal)")
    return path


def find_tokenizer(model: Path) -> Path:
    """The run's BPE: ``tokenizer/tokenizer.json`` in the nearest folder above the model that has one."""
    for folder in model.resolve().parents:
        candidate = folder / "tokenizer" / "tokenizer.json"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no tokenizer/tokenizer.json in any folder above {model}: pass --tokenizer "
                            "(the run's tokenizer stage writes <run>/tokenizer/tokenizer.json)")


class Refusal(ValueError):
    """What the model commands refuse to do, said to the user without a traceback."""


class NotDenseError(Refusal):
    """The checkpoint holds a pretrained bank (SLM-mix, SLM-pn, soup), not one model to export."""


def load_exportable(path: Path) -> GPT:
    """The checkpoint's model, which must be one dense network (see the module's docstring)."""
    model, arch = load_model(path)
    if not isinstance(model, GPT):
        paper_name = display(arch.method)[0]
        raise NotDenseError(f"{path} holds a pretrained {paper_name} ({arch.method}), not one dense network: "
                         "specialize it for a domain (`slm train specialize`), which instantiates it, and "
                         "export the specialized model")
    return model.float().eval()


def export_hf(model: str | Path, out: str | Path, tokenizer: str | Path | None = None,
              replace: bool = False) -> dict:
    """``out``: a folder ``AutoModelForCausalLM`` / ``AutoTokenizer`` load offline, written atomically,
    with ``slm_export.json`` naming its source (path and hash) and tokenizer."""
    source = model_file(model)
    out = Path(out).expanduser()
    if out.exists() and not replace:
        raise FileExistsError(f"{out} already exists: pass --replace to overwrite it")
    gpt = load_exportable(source)
    tokenizer_file = Path(tokenizer).expanduser() if tokenizer else find_tokenizer(source)
    started = time.perf_counter()
    with atomic_path(out) as tmp:
        hf = save_pretrained(gpt, tmp, tokenizer_file)
        record = {"source": str(source.resolve()), "source_sha256": file_sha256(source),
                  "tokenizer": str(tokenizer_file.resolve()), "architecture": type(hf).__name__,
                  "parameters": gpt.num_params(), "seq_len": gpt.config.seq_len,
                  "seconds": round(time.perf_counter() - started, 2)}
        (tmp / EXPORT_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        ordinary_permissions(tmp)
    return {"out": str(out), **record}


def ordinary_permissions(folder: Path) -> None:
    """Every file as an ordinary new file is (0666 less the umask): transformers writes the weights
    through a private temporary file (0600), which another user of a shared export could not read."""
    umask = os.umask(0)
    os.umask(umask)
    for path in folder.rglob("*"):
        if path.is_file():
            path.chmod(0o666 & ~umask)


@dataclass(frozen=True)
class Sampling:
    """How ``slm generate`` samples: greedy at temperature 0, else softmax(logits / T) over the top k."""

    max_new_tokens: int = 64
    temperature: float = 0.8
    top_k: int = 50
    seed: int = 0

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise Refusal(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise Refusal(f"--temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise Refusal(f"--top-k must be >= 0 (0: the whole vocabulary), got {self.top_k}")


def load_causal_lm(path: str | Path, tokenizer: str | Path | None = None):
    """(transformers model, tokenizer) from an exported folder, or converted in memory from a checkpoint."""
    path = Path(path).expanduser()
    if (path / HF_CONFIG).is_file():
        return (AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval(),
                AutoTokenizer.from_pretrained(path, local_files_only=True))
    source = model_file(path)
    gpt = load_exportable(source)
    tok = hf_tokenizer(Path(tokenizer).expanduser() if tokenizer else find_tokenizer(source), gpt.config.seq_len)
    return to_hf(gpt, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id), tok


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], sampling: Sampling) -> list[str]:
    """Each prompt's continuation (transformers' ``generate``, KV cache on). A prompt starts after
    ``<|endoftext|>``, as every document did in training; a continuation stops at the next one or at
    ``max_new_tokens``, and never runs past the model's context."""
    torch.manual_seed(sampling.seed)
    context = model.config.max_position_embeddings
    outputs = []
    for prompt in prompts:
        ids = [tokenizer.bos_token_id, *tokenizer(prompt, add_special_tokens=False)["input_ids"]]
        if len(ids) >= context:
            raise Refusal(f"the prompt is {len(ids)} tokens; the model's context is {context}")
        new = min(sampling.max_new_tokens, context - len(ids))
        kwargs = ({"do_sample": True, "temperature": sampling.temperature, "top_k": sampling.top_k or None}
                  if sampling.temperature > 0 else {"do_sample": False})
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=new, pad_token_id=tokenizer.pad_token_id, **kwargs)
        outputs.append(tokenizer.decode(out[0, len(ids):], skip_special_tokens=True))
    return outputs
