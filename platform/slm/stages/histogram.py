"""``histogram``: each domain's smoothed cluster histogram, its entropy and its KL to generic."""

from __future__ import annotations

from pathlib import Path

from slm.corpus.layout import domains as corpus_domains
from slm.job import JobConfig
from slm.layout import RunLayout, require
from slm.log import logger
from slm.stages import stage

log = logger(__name__)


@stage("histogram", reads_domains=lambda cfg: [("histogram.domains", d) for d in cfg.histogram.domains])
def histogram(cfg: JobConfig, run_dir: Path) -> dict:
    """Each domain's smoothed cluster histogram, its entropy and its KL to generic."""
    from slm.data.histogram import write_histograms

    layout = RunLayout.of(cfg)
    result = write_histograms(require(layout.clusters_json, "cluster").parent, cfg.histogram.alpha,
                              layout.histograms, cfg.histogram.domains or None)
    left_out = sorted(set(corpus_domains(cfg.corpus.dir)) - set(result["domains"]))
    if left_out:  # not an error (a job may embed some domains only), but never silent
        log.info(f"[histogram] corpus domains with no embedded windows, so no histogram: {left_out} "
                 f"(embed.domains={cfg.embed.domains or 'every domain'})")
    return {d: {"entropy": h["entropy"], "kl_to_generic": h["kl_to_generic"]} for d, h in result["domains"].items()}
