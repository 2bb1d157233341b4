"""The sentence-transformers embedder as the embedding actors run it: exported once per machine.

Importing sentence-transformers costs a fresh process ~3.7 s of CPU (it pulls in transformers,
scikit-learn, SciPy and pandas), and every actor of every embed stage paid it before its first batch: on
2 cores, the largest part of a small stage's start-up. So the model's forward — ``SentenceTransformer``'s
modules in order (transformer, pooling, normalization): token tensors in, sentence embeddings out — is
exported once per machine with ``torch.export`` by the first actor that needs it (the others wait for it
on a file lock) and kept under ``embed.cache_dir`` in one of two forms, both loaded with torch alone:

- **compiled** (``embed.compile``'s default on CPU): AOTInductor compiles the exported program ahead of
  time into a shared library: Inductor's fused C++ kernels for everything between the matmuls (layer
  norms, GELU, softmax, pooling), the matmuls left to torch's own. ~30 s once per machine (a C++
  compiler is needed); an actor then loads it in ~0.1 s and runs 1.07× the eager program's windows/s in
  the stage here (docs/data.md).
- **eager**: the graph module the program unlifts to (generated Python over aten ops, and the weights),
  ~0.1 s to load.

Either way an actor pays only torch's import (~1.2 s). The ``.pt2`` archive of ``torch.export.save``
took ~2.2 s more to load, and the public AOTInductor loader ~2.8 s more: both import the export
deserializer, TorchDynamo and Inductor's compiler. The texts are tokenized with the model's own
``tokenizer.json`` as ``SentenceTransformer.encode`` tokenizes them (truncation to ``max_seq_length``,
padding to the longest of each batch, batches sorted by length), so the vectors are encode()'s up to
the dtype's rounding (tested against it).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import json
import os
import platform
import warnings
from pathlib import Path

import numpy as np
import torch
from filelock import FileLock
from tokenizers import Tokenizer

from slm.artifacts import atomic_write_bytes, file_sha256
from slm.log import logger
from slm.runtime import verbose

log = logger(__name__)

# What an exported program is a function of, besides the model's files: a newer torch may not read an
# older file, and the graph is traced through the installed transformers and sentence-transformers code.
TRACED_BY = ("torch", "transformers", "sentence-transformers")


def export_key(model_path: str | Path, dtype: str, device: str, compiled: bool = False, threads: int = 1) -> str:
    """The cache name of one model's exported forward: its files (name, size, time), dtype, device type,
    the versions that traced it and, compiled for a CPU, that CPU (its instruction set) and the thread
    count the kernels were generated for. Cheap: no file is read but the CPU's description, so an actor
    can check it at every start."""
    root = Path(model_path).resolve()
    files = sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                   for p in root.rglob("*") if p.is_file())
    versions = {name: importlib.metadata.version(name) for name in TRACED_BY}
    target = f"{cpu_target()} threads={threads}" if compiled and device.startswith("cpu") else ""
    identity = json.dumps([str(root), files, dtype, device.split(":")[0], versions, compiled, target])
    return hashlib.blake2b(identity.encode(), digest_size=10).hexdigest()


def cpu_target() -> str:
    """The CPU's architecture and instruction-set flags: code compiled for one may not run on another (a
    cache folder shared by machines of different CPUs)."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        flags = ""
    return f"{platform.machine()} {flags}"


class SentenceEmbedder:
    """``SentenceTransformer.encode`` over an exported forward: texts → float32 sentence embeddings."""

    def __init__(self, forward, tokenizer, inputs: list[str], device: str):
        self.forward, self.tokenizer, self.inputs, self.device = forward, tokenizer, inputs, device

    @classmethod
    def load(cls, model_path: str | Path, *, dtype: str, device: str, max_tokens: int,
             cache_dir: str | Path, compiled: bool = False, threads: int = 1) -> SentenceEmbedder:
        """The exported forward of the model at ``model_path`` (AOTInductor-compiled for ``threads``
        CPU threads, or eager) from ``cache_dir``, exported there first if this machine has not yet."""
        suffix = ".aoti.pt2" if compiled else ".pt"
        path = Path(cache_dir).expanduser() / f"{export_key(model_path, dtype, device, compiled, threads)}{suffix}"
        export_once(model_path, dtype=dtype, device=device, path=path, compiled=compiled, threads=threads)
        if not trusted(path):
            # Loading runs code (a pickled graph module, or a compiled library): only what this machine
            # wrote. A cache shared with other machines serves them its own exports, never theirs.
            local = LOCAL_EXPORTS / path.name
            log.info(f"[embed] {path} was not written by this machine: not loaded; exporting to {local}")
            path = local
            export_once(model_path, dtype=dtype, device=device, path=path, compiled=compiled, threads=threads)
        settings = {"dtype": dtype, "device": device, "path": path, "compiled": compiled, "threads": threads}
        try:
            forward, inputs = _load_program(path, compiled)
        except Exception as error:  # a damaged cache file (a full disk, a hand copy): export it anew
            log.info(f"[embed] {path} did not load ({error!r}); exporting the embedder again")
            path.unlink(missing_ok=True)
            export_once(model_path, **settings)
            forward, inputs = _load_program(path, compiled)
        tokenizer = Tokenizer.from_file(str(Path(model_path) / "tokenizer.json"))
        tokenizer.enable_truncation(max_tokens)  # [CLS] and [SEP] included, as max_seq_length counts them
        # Padded positions are masked out of attention and pooling: the pad id does not change a vector.
        tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]") or 0)
        return cls(forward, tokenizer, inputs, device)

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """Sentence embeddings (float32) of ``texts``, in their order, ``batch_size`` texts a forward."""
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
        field = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
        return [torch.tensor([getattr(e, field[name]) for e in encodings], device=self.device)
                for name in self.inputs]


def _load_program(path: Path, compiled: bool):
    """(forward, its input names) from a cache file ``export_sentence_transformer`` wrote."""
    if compiled:
        # torch's C++ package loader, the one torch._inductor.aoti_load_package wraps: the wrapper's
        # module imports Inductor and TorchDynamo (~2.8 s of an actor's start). Positional tensors in, a
        # list of tensors out.
        loader = torch._C._aoti.AOTIModelPackageLoader(str(path), "model", False, 1, -1)
        return (lambda *tensors: loader.run(list(tensors))[0]), json.loads(loader.get_metadata()["inputs"])
    # A pickle (a graph module is code plus weights): only ever one this machine's export wrote.
    with torch_own_deprecations():
        saved = torch.load(path, weights_only=False)
    return saved["forward"], saved["inputs"]


@contextlib.contextmanager
def torch_own_deprecations():
    """torch 2.13 calls an API it deprecates when it copies or unpickles a program's tree specs ("isinstance(
    treespec, LeafSpec) is deprecated"), in torch.export and AOTInductor's compile as in loading an eager export:
    torch's to change, nothing for a user to do, and every first embed's worker log carried it (issue 64)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                                category=FutureWarning)
        yield


def export_once(model_path: str | Path, *, dtype: str, device: str, path: Path, compiled: bool,
                threads: int) -> None:
    """Export (and compile) the embedder to ``path`` unless there already: one process per machine does
    it while the others starting with it wait on a lock, instead of each compiling the same program."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock"):
        if not path.exists():  # not written meanwhile by the process that held the lock
            with torch_own_deprecations():
                export_sentence_transformer(model_path, dtype=dtype, device=device, path=path, compiled=compiled,
                                            threads=threads)
            vouch(path)


# What this machine exported, by content hash: kept in the user's home on this machine, never in
# embed.cache_dir (which a cluster may share, and anyone who can write there could plant a file).
TRUST_DIR = Path("~/.cache/slm/trusted-exports").expanduser()
LOCAL_EXPORTS = Path("~/.cache/slm/embedders-local").expanduser()


def vouch(path: Path) -> None:
    """Record that this machine wrote ``path`` (as it is now)."""
    TRUST_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    (TRUST_DIR / file_sha256(path)).write_text(str(path))


def trusted(path: Path) -> bool:
    return (TRUST_DIR / file_sha256(path)).is_file()


def export_sentence_transformer(model_path: str | Path, *, dtype: str, device: str, path: Path,
                                compiled: bool = False, threads: int = 1) -> None:
    """Export ``SentenceTransformer(model_path).forward`` (token tensors → ``sentence_embedding``) with
    dynamic batch and sequence sizes to ``path``: compiled by AOTInductor (its CPU kernels for ``threads``
    threads), or its eager graph module."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local model: never ask the hub
    # sentence-transformers (and transformers) only here: the export runs once per machine, the actors
    # that load its result need torch alone.
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    if not verbose():  # its "Loading weights" bar: carriage returns in every log of a first embed
        hf_logging.disable_progress_bar()
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
    buffer = io.BytesIO()
    if compiled:
        try:
            torch._inductor.aoti_compile_and_package(
                program, package_path=buffer,
                # Kernels built in this process (a pool of compile workers would hold memory for nothing:
                # this runs once). Inductor writes the OpenMP thread count into the CPU kernels: the
                # actors' own, not this process's. The input names ride in the package's metadata.
                # (Freezing the weights changed neither the kernels nor the speed here: left off.)
                inductor_configs={"compile_threads": 1, "cpp.threads": threads,
                                  "aot_inductor.metadata": {"inputs": json.dumps(inputs)}})
        except Exception as error:
            raise RuntimeError(f"embed.compile: compiling the embedder with AOTInductor failed ({error!r}); it "
                               "needs a C++ compiler (g++ or clang++). Set embed.compile=never to run it "
                               "uncompiled") from error
        atomic_write_bytes(path, buffer.getvalue())
        return
    # A plain graph module: loading one re-traces its code with torch.fx's symbolic tracer. The unlifted
    # module's shape-guard submodule cannot be pickled (what it checks, lengths within the position
    # table, truncation to max_tokens ensures), and the export's own tracer cannot re-trace.
    module = program.module()
    graph = module.graph
    for node in [n for n in graph.nodes if n.op == "call_module" and n.target == "_guards_fn"]:
        graph.erase_node(node)
    graph._tracer_cls, graph._tracer_extras = None, None
    torch.save({"forward": torch.fx.GraphModule(module, graph), "inputs": inputs}, buffer)
    atomic_write_bytes(path, buffer.getvalue())
