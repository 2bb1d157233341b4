"""The sentence-transformers embedder as the embedding actors run it: exported once per machine.

Importing sentence-transformers costs a fresh process ~3.7 s of CPU (it pulls in transformers,
scikit-learn, SciPy and pandas), and every actor of every embed stage paid it before its first batch: on
2 cores, the largest part of a small stage's start-up. So the model's forward — ``SentenceTransformer``'s
modules in order (transformer, pooling, normalization): token tensors in, sentence embeddings out — is
exported once per machine with ``torch.export`` (6–9 s with that import, by the first actor that needs
it) and saved under ``embed.cache_dir``; an actor then imports torch and loads the program (~2.5 s in
all). The texts are tokenized with the model's own ``tokenizer.json`` as ``SentenceTransformer.encode``
tokenizes them (truncation to ``max_seq_length``, padding to the longest of each batch, batches sorted by
length), so the vectors are encode()'s up to the dtype's rounding (tested against it).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
from pathlib import Path

import numpy as np

from slm.artifacts import atomic_write_bytes

# What the exported program is a function of, besides the model's files: a newer torch may not read an
# older file, and the graph is traced through the installed transformers and sentence-transformers code.
TRACED_BY = ("torch", "transformers", "sentence-transformers")


def export_key(model_path: str | Path, dtype: str, device: str) -> str:
    """The cache name of one model's exported forward: its files (name, size, time), dtype, device type
    and the versions that traced it. Cheap: no file is read, so an actor can check it at every start."""
    root = Path(model_path).resolve()
    files = sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                   for p in root.rglob("*") if p.is_file())
    versions = {name: importlib.metadata.version(name) for name in TRACED_BY}
    identity = json.dumps([str(root), files, dtype, device.split(":")[0], versions])
    return hashlib.blake2b(identity.encode(), digest_size=10).hexdigest()


class SentenceEmbedder:
    """``SentenceTransformer.encode`` over an exported forward: texts → float32 sentence embeddings."""

    def __init__(self, program, tokenizer, inputs: list[str], device: str):
        self.forward, self.tokenizer, self.inputs, self.device = program, tokenizer, inputs, device

    @classmethod
    def load(cls, model_path: str | Path, *, dtype: str, device: str, max_tokens: int,
             cache_dir: str | Path) -> SentenceEmbedder:
        """The exported forward of the model at ``model_path`` from ``cache_dir``, exported there first
        if this machine has not yet (written atomically: actors exporting at once each write a whole file)."""
        import torch
        from tokenizers import Tokenizer

        path = Path(cache_dir).expanduser() / f"{export_key(model_path, dtype, device)}.pt2"
        if not path.exists():
            export_sentence_transformer(model_path, dtype=dtype, device=device, path=path)
        extra = {"inputs.json": ""}
        try:
            program = torch.export.load(path, extra_files=extra)
        except Exception as error:  # a damaged cache file (a full disk, a hand copy): export it anew
            print(f"[embed] {path} did not load ({error!r}); exporting the embedder again", flush=True)
            export_sentence_transformer(model_path, dtype=dtype, device=device, path=path)
            program = torch.export.load(path, extra_files=extra)
        tokenizer = Tokenizer.from_file(str(Path(model_path) / "tokenizer.json"))
        tokenizer.enable_truncation(max_tokens)  # [CLS] and [SEP] included, as max_seq_length counts them
        # Padded positions are masked out of attention and pooling: the pad id does not change a vector.
        tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]") or 0)
        return cls(program.module(), tokenizer, json.loads(extra["inputs.json"]), device)

    def compile(self) -> None:
        """torch.compile the forward for no-grad calls over varying batch and sequence sizes.

        Inductor's freezing treats the weights as constants: on CPU it packs them for oneDNN once and
        fuses the GELU and biases into the matmuls (1.17x eager's windows/s inside the stage here; see
        docs/data.md). ``dynamic=True`` makes one graph for every (batch, length) instead of a compile per
        new shape. Outputs match eager to a cosine of 0.999 (tested).
        """
        import torch
        import torch._inductor.config as inductor

        compiled = torch.compile(self.forward, dynamic=True)

        def forward(*tensors):
            # Inductor's settings are per thread (a ContextVar in torch 2.13), and Ray Data calls the
            # actor in another thread than its constructor: set them around each call, where compiling
            # happens (set once in the constructor, the actors compiled without freezing: eager speed).
            # Kernels are generated in this process (compile_threads=1): a pool of compile workers per
            # actor raised the whole-corpus run's peak from 6.6 to 7.6 GiB, for CPUs the other actors use.
            with inductor.patch(freezing=True, compile_threads=1):
                return compiled(*tensors)

        self.forward = forward

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """Sentence embeddings (float32) of ``texts``, in their order, ``batch_size`` texts a forward."""
        import torch

        if not texts:
            return np.zeros((0, self.dimension()), dtype=np.float32)
        # Longest first, as encode() orders them: batches of similar lengths pad little.
        order = np.argsort([-len(t) for t in texts], kind="stable")
        parts = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                encodings = self.tokenizer.encode_batch([texts[i] for i in order[start:start + batch_size]])
                parts.append(self.forward(*self._tensors(encodings)).float().cpu())
        vectors = np.empty((len(texts), parts[0].shape[1]), dtype=np.float32)
        vectors[order] = torch.cat(parts).numpy()
        return vectors

    def dimension(self) -> int:
        return int(self.encode(["dimension"], 1).shape[1])

    def _tensors(self, encodings) -> list:
        import torch

        field = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
        return [torch.tensor([getattr(e, field[name]) for e in encodings], device=self.device)
                for name in self.inputs]


def export_sentence_transformer(model_path: str | Path, *, dtype: str, device: str, path: Path) -> None:
    """Export ``SentenceTransformer(model_path).forward`` (token tensors → ``sentence_embedding``) with
    dynamic batch and sequence sizes to ``path``."""
    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local model: never ask the hub
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_path), device=device,
                                model_kwargs={} if dtype == "float32" else {"torch_dtype": getattr(torch, dtype)})
    model.eval()
    preprocess = getattr(model, "preprocess", None) or model.tokenize  # sentence-transformers ≥ 6 / older
    example = preprocess(["an example sentence to trace the model with", "and a second, longer one " * 8])
    # Token tensors become the program's inputs; anything else (sentence-transformers 6 adds
    # ``modality="text"``) is a constant of the traced call.
    inputs = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in example]
    constants = {k: v for k, v in example.items() if not isinstance(v, torch.Tensor)}
    unknown = set(example) - set(inputs) - set(constants)
    if unknown:
        raise ValueError(f"embed.model_path {model_path}: its tokenizer makes inputs {sorted(unknown)} "
                         "that the exported embedder does not feed")

    class Forward(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            return self.model({**constants, **dict(zip(inputs, tensors, strict=True))})["sentence_embedding"]

    args = tuple(example[name].to(device) for name in inputs)
    dynamic = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}  # batch and length: any
    with torch.no_grad():
        program = torch.export.export(Forward(), args, dynamic_shapes=((dynamic,) * len(args),))  # one *tensors
    buffer = io.BytesIO()  # torch.export.save wants a name ending in .pt2: not a temporary one
    torch.export.save(program, buffer, extra_files={"inputs.json": json.dumps(inputs)})
    atomic_write_bytes(path, buffer.getvalue())
