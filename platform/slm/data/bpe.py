"""`tokenizer`: a byte-level BPE trained with `tokenizers` on the generic corpus.

Byte-level (GPT-2 style): every string encodes, nothing maps to an unknown token. One special token,
``<|endoftext|>`` (id 0), separates documents when sequences are packed. Training streams the generic
shards' text through ``train_from_iterator`` (the Rust trainer uses every core).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from slm.artifacts import atomic_path, input_digests, is_complete, read_manifest, write_manifest
from slm.config import config_hash
from slm.corpus.layout import corpus_files
from slm.log import logger

log = logger(__name__)

EOT = "<|endoftext|>"


def _texts(files: list[str], max_chars: int | None) -> Iterator[str]:
    seen = 0
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(columns=["text"], batch_size=1024):
            for text in batch.column(0).to_pylist():
                yield text
                seen += len(text)
                if max_chars and seen >= max_chars:
                    return


def train_bpe(corpus_dir: str | Path, out: Path, vocab_size: int = 8192, max_chars: int | None = None) -> dict:
    if not 256 + 1 <= vocab_size <= 65535:
        raise ValueError(f"tokenizer.vocab_size must be in [257, 65535] (uint16 packing), got {vocab_size}")
    files = corpus_files(corpus_dir).get("all")
    if not files:
        raise FileNotFoundError(f"{corpus_dir} has no generic shards to train a tokenizer on")
    # Skipped when complete and current, as the data stages before it: the same generic shards (by content,
    # not path) and the same settings train the same tokenizer.
    key = config_hash({"generic": input_digests(files), "vocab_size": vocab_size, "max_chars": max_chars})
    if is_complete(out, key) and (out / "tokenizer.json").exists():
        log.info(f"[tokenizer] {out} is complete and current")
        return read_manifest(out)
    started = time.perf_counter()
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(_texts(files, max_chars), trainer=trainer)
    if tokenizer.token_to_id(EOT) != 0:
        raise RuntimeError(f"{EOT} did not get id 0")
    with atomic_path(out / "tokenizer.json") as tmp:
        tokenizer.save(str(tmp))
    return write_manifest(out, {"stage": "tokenizer", "config_hash": key, "vocab_size": tokenizer.get_vocab_size(),
                                "corpus_dir": str(corpus_dir), "max_chars": max_chars,
                                "seconds": round(time.perf_counter() - started, 1)})
