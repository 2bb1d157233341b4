"""``corpus``: fetch and build the bundled corpus into ``corpus.dir``."""

from __future__ import annotations

from pathlib import Path

from slm.corpus.config import BUNDLED_DOMAINS
from slm.corpus.layout import GENERIC
from slm.job import JobConfig
from slm.stages import stage


@stage("corpus", builds_domains=tuple(BUNDLED_DOMAINS))
def build_corpus(cfg: JobConfig, run_dir: Path) -> dict:
    """Fetch and build the bundled corpus into ``corpus.dir`` (skipped when complete and current)."""
    from slm.corpus.build import build

    manifest = build(cfg.corpus)
    imported = manifest.get("imports") or {}
    return {"corpus_dir": cfg.corpus.dir, "generic_documents": manifest.get("generic", {}).get("documents"),
            "domains": sorted({*manifest.get("domains", {}), *(r for r in imported if r != GENERIC)}),
            "imported": sorted(imported)}
