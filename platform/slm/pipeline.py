"""Jobs: a job spec names stages; each stage is a function of (the job config, the run directory).

``slm run jobs/X.yaml`` resolves the config, writes it to ``<run dir>/config.yaml`` and runs the
stages in order. Every stage is idempotent: its outputs carry a manifest, and a stage whose outputs
are complete and current is skipped, so a job that died is simply run again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from slm.artifacts import atomic_write_json, atomic_write_text, write_manifest
from slm.config import ConfigError, JobConfig, config_hash, dump_yaml

Stage = Callable[[JobConfig, Path], dict]


def stage_corpus(cfg: JobConfig, run_dir: Path) -> dict:
    """Fetch and build the bundled corpus into ``corpus.dir`` (skipped when complete and current)."""
    from slm.corpus.build import build

    manifest = build(cfg.corpus)
    return {"corpus_dir": cfg.corpus.dir, "generic_documents": manifest.get("generic", {}).get("documents"),
            "domains": sorted(manifest.get("domains", {}))}


def stage_stats(cfg: JobConfig, run_dir: Path) -> dict:
    """Per-source document and token counts of ``corpus.dir``, computed on Ray Data."""
    from slm.data.stats import corpus_stats, format_table
    from slm.runtime import init_ray

    init_ray(cfg.ray)
    started = time.perf_counter()
    rows = corpus_stats(cfg.corpus.dir, cfg.stats.tokenizer, cfg.stats.batch_size)
    print(format_table(rows), flush=True)
    out = run_dir / cfg.stats.output
    atomic_write_json(out / "stats.json", rows)
    write_manifest(out, {"stage": "stats", "config_hash": config_hash(cfg.stats),
                         "corpus_dir": str(Path(cfg.corpus.dir).expanduser().resolve()),
                         "rows": len(rows), "documents": sum(r["documents"] for r in rows),
                         "tokens": sum(r["tokens"] for r in rows),
                         "seconds": round(time.perf_counter() - started, 1)})
    return {"rows": len(rows), "tokens": sum(r["tokens"] for r in rows), "stats": str(out / "stats.json")}


STAGES: dict[str, Stage] = {
    "corpus": stage_corpus,
    "stats": stage_stats,
}


def check_stages(cfg: JobConfig) -> None:
    unknown = [s for s in cfg.stages if s not in STAGES]
    if unknown:
        raise ConfigError(f"config key 'stages': unknown stage(s) {unknown}; known stages: {list(STAGES)}")
    if not cfg.stages:
        raise ConfigError("config key 'stages': a job needs at least one stage")


def run_job(cfg: JobConfig) -> dict[str, dict]:
    """Run every stage of ``cfg`` in order; return each stage's summary."""
    from slm.runtime import shutdown_ray

    check_stages(cfg)
    run_dir = cfg.run.dir
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "config.yaml", dump_yaml(cfg))
    print(f"[run] {cfg.run.name}: stages {cfg.stages}; outputs in {run_dir}", flush=True)
    results = {}
    try:
        for name in cfg.stages:
            started = time.perf_counter()
            print(f"[run] stage {name} ...", flush=True)
            results[name] = STAGES[name](cfg, run_dir)
            print(f"[run] stage {name} done in {time.perf_counter() - started:.1f}s", flush=True)
    finally:
        shutdown_ray()
    atomic_write_json(run_dir / "results.json", results)
    return results
