"""``resample``: generic subsets aimed at each domain, one per subset method (CRISP, DSIR, uniform)."""

from __future__ import annotations

import json
from pathlib import Path

from slm.job import JobConfig
from slm.layout import RunLayout, require
from slm.runtime import init_ray
from slm.stages import stage


def subset_methods(cfg: JobConfig) -> list[str]:
    """``resample.methods``, or every registered subset method (``slm.data.resample.SUBSETS``)."""
    from slm.data.resample import SUBSETS

    return list(cfg.resample.methods) or list(SUBSETS)


def resampled_domains(cfg: JobConfig) -> list[tuple[str, str]]:
    return [("resample.domain", cfg.resample.domain)] + [("resample.domains", d) for d in cfg.resample.domains]


@stage("resample", reads_domains=resampled_domains)
def resample(cfg: JobConfig, run_dir: Path) -> dict:
    """Generic subsets aimed at each of ``resample.domains`` (``resample.domain``), one per method, with
    their KL to the domain."""
    from slm.data.resample import resample as draw

    init_ray(cfg.ray)
    layout = RunLayout.of(cfg)
    histograms = json.loads(require(layout.histograms_json, "histogram").read_text())
    out = {}
    for domain in cfg.resample.all_domains:
        for method in subset_methods(cfg):
            m = draw(layout.clusters, histograms, domain, cfg.resample.tokens, method,
                     layout.resampled(domain, method), cfg.resample.seed,
                     corpus_dir=cfg.corpus.dir, embed=cfg.embed, dsir_min_words=cfg.resample.dsir_min_words)
            out[f"{domain}/{method}"] = {"tokens_drawn": m["tokens_drawn"],
                                         "kl_resampled_to_domain": m["kl_resampled_to_domain"]}
    return out
