"""``stats``: per-source document and token counts of ``corpus.dir``, on Ray Data."""

from __future__ import annotations

import json
import time
from pathlib import Path

from slm.artifacts import atomic_write_json, is_complete, remake, verify, write_manifest
from slm.job import JobConfig
from slm.layout import RunLayout
from slm.log import logger
from slm.runtime import init_ray
from slm.stages import stage

log = logger(__name__)


@stage("stats")
def corpus_stats(cfg: JobConfig, run_dir: Path) -> dict:
    """Per-source document and token counts of ``corpus.dir``, computed on Ray Data (skipped when complete
    and current: the same settings, corpus files and tokenizer file)."""
    from slm.corpus.layout import verify_corpus
    from slm.data.stats import corpus_stats as count
    from slm.data.stats import format_table, stats_key

    out = RunLayout.of(cfg).stats
    key = stats_key(cfg.corpus.dir, cfg.stats)
    if is_complete(out, key):
        verify_corpus(cfg.corpus.dir)  # the corpus as its manifest records it (counting checks it otherwise)
        verify(out, remake(out, "stats"))
        rows = json.loads((out / "stats.json").read_text())
        log.info(f"[stats] complete and current in {out}, skipped")
    else:
        init_ray(cfg.ray)
        started = time.perf_counter()
        rows = count(cfg.corpus.dir, cfg.stats.tokenizer, cfg.stats.batch_size)
        atomic_write_json(out / "stats.json", rows)
        write_manifest(out, {"stage": "stats", "config_hash": key,
                             "corpus_dir": str(Path(cfg.corpus.dir).expanduser().resolve()),
                             "rows": len(rows), "documents": sum(r["documents"] for r in rows),
                             "tokens": sum(r["tokens"] for r in rows),
                             "seconds": round(time.perf_counter() - started, 1)})
    log.info(format_table(rows))
    return {"rows": len(rows), "tokens": sum(r["tokens"] for r in rows), "stats": str(out / "stats.json")}
