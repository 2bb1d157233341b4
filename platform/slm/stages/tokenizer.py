"""``tokenizer``: the byte-level BPE, trained on the generic corpus."""

from __future__ import annotations

from pathlib import Path

from slm.job import JobConfig
from slm.layout import RunLayout
from slm.stages import stage


@stage("tokenizer")
def tokenizer(cfg: JobConfig, run_dir: Path) -> dict:
    """Train the byte-level BPE on the generic corpus."""
    from slm.data.bpe import train_bpe

    layout = RunLayout.of(cfg)
    m = train_bpe(cfg.corpus.dir, layout.tokenizer, cfg.tokenizer.vocab_size, cfg.tokenizer.max_chars or None)
    return {"tokenizer": str(layout.tokenizer_json), "vocab_size": m["vocab_size"]}
