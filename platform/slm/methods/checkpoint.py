"""One file format for every method's weights: safetensors with the architecture record in the header,
so a checkpoint says what it is and loading never unpickles. A dense method's model is stored as a
plain dense GPT (``slm.models.gpt.save_dense``), the others with their record."""

from __future__ import annotations

import json
from pathlib import Path

import torch.nn as nn
from safetensors.torch import load_model as load_tensors
from safetensors.torch import save_model as save_tensors

from slm.artifacts import atomic_path, check_recorded
from slm.methods.base import Architecture
from slm.methods.registry import get
from slm.models.gpt import load_dense_unchecked, read_safetensors_metadata, save_dense


def save_model(model: nn.Module, arch: Architecture, path: str | Path, metadata: dict | None = None) -> None:
    if get(arch.method).dense:
        save_dense(model, path, {"method": arch.method, **(metadata or {})})
        return
    meta = {"slm.model": "method", "slm.arch": json.dumps(arch.to_json())}
    meta.update({f"slm.{k}": json.dumps(v) for k, v in (metadata or {}).items()})
    with atomic_path(Path(path)) as tmp:
        save_tensors(model, str(tmp), metadata=meta)


def load_model(path: str | Path) -> tuple[nn.Module, Architecture]:
    """Any slm checkpoint → (module, architecture record); checked first against the manifest that
    records it (``slm.artifacts.check_recorded``)."""
    check_recorded(path)
    meta = read_safetensors_metadata(path)
    if meta.get("slm.model") == "gpt":
        model = load_dense_unchecked(path)
        method = json.loads(meta.get("slm.method", '"generic"'))
        return model, Architecture(method, model.config)
    if meta.get("slm.model") != "method":
        raise ValueError(f"{path} is not an slm checkpoint (metadata keys: {sorted(meta)})")
    record = json.loads(meta["slm.arch"])
    method = get(record["method"], key=f"{path}: slm.arch.method")
    arch = method.Record.from_json(record)
    model = method.build(arch)
    load_tensors(model, str(path))
    return model, arch
