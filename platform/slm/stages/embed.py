"""``embed``: window and embed the corpus (generic and the domains' train splits) on a Ray Data actor pool."""

from __future__ import annotations

from pathlib import Path

from slm.job import JobConfig
from slm.runtime import init_ray
from slm.stages import stage


def embed_dir(cfg: JobConfig) -> Path:
    """Where the embeddings are: ``embed.output``, or beside the corpus (shared by the runs that read it)."""
    from slm.data.embed import default_output

    return Path(cfg.embed.output or default_output(Path(cfg.corpus.dir).expanduser(), cfg.embed)).expanduser()


def embedded_domains(cfg: JobConfig) -> list[tuple[str, str]]:
    return [("embed.domains", d) for d in cfg.embed.domains]


@stage("embed", reads_domains=embedded_domains)
def embed(cfg: JobConfig, run_dir: Path) -> dict:
    """Window and embed the corpus (generic + domain train splits) on a Ray Data actor pool."""
    from slm.data.embed import embed_corpus

    init_ray(cfg.ray)
    m = embed_corpus(cfg.corpus.dir, cfg.embed, embed_dir(cfg))
    return {"output": str(embed_dir(cfg)), "documents": m["documents"], "windows": m["windows"]}
