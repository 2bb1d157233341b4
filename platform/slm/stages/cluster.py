"""``cluster``: k-means of the generic windows (or pinned assignments), every window assigned."""

from __future__ import annotations

from pathlib import Path

from slm.job import JobConfig
from slm.layout import RunLayout, require
from slm.runtime import init_ray
from slm.stages import stage
from slm.stages.embed import embed_dir, embedded_domains


def domains_embedded_here(cfg: JobConfig) -> list[tuple[str, str]]:
    """With pinned assignments the stage embeds the windows the pin lacks, so it reads ``embed.domains``."""
    return embedded_domains(cfg) if cfg.cluster.assignments else []


@stage("cluster", reads_domains=domains_embedded_here)
def cluster(cfg: JobConfig, run_dir: Path) -> dict:
    """k-means of the generic windows, or the pinned assignments of ``cluster.assignments``; every window
    assigned to its coarse cluster and leaf; written to ``cluster.pin`` as pinned assignments if set."""
    from slm.data.cluster import cluster as fit_and_assign
    from slm.data.embed import resolve_dtype
    from slm.data.pinned import cluster_pinned, machine, write_pinned

    init_ray(cfg.ray)
    out = RunLayout.of(cfg).clusters
    if cfg.cluster.assignments:
        m = cluster_pinned(cfg.corpus.dir, cfg.cluster, cfg.embed, out)
        result = {"output": str(out), "found": m["found"], "embedded": m["embedded"]}
    else:
        m = fit_and_assign(require(embed_dir(cfg), "embed"), cfg.cluster, out)
        result = {"output": str(out), "sample_windows": m["sample_windows"]}
    if cfg.cluster.pin:
        made_with = {"run": str(run_dir), "embed": {"fraction": cfg.embed.fraction, "splits": cfg.embed.splits,
                                                     "domains": cfg.embed.domains,
                                                     "dtype": resolve_dtype(cfg.embed.dtype, cfg.embed.device)},
                     "from": cfg.cluster.assignments or "fitted", "machine": machine(), "stage_seconds": m["seconds"]}
        header = write_pinned(out, cfg.cluster.pin, cfg.cluster, cfg.embed, made_with)
        result |= {"pinned_to": cfg.cluster.pin, "pinned_fingerprint": header["fingerprint"]}
    return result
