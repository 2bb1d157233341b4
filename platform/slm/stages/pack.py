"""``pack``: the requested sets tokenized and packed into sequences that keep their cluster ids."""

from __future__ import annotations

from pathlib import Path

from slm.corpus.layout import GENERIC
from slm.job import JobConfig
from slm.layout import MissingInputError, RunLayout, require
from slm.log import logger
from slm.runtime import init_ray
from slm.stages import evaluated_domains, stage
from slm.stages.resample import resampled_domains, subset_methods

log = logger(__name__)


@stage("pack", reads_domains=lambda cfg: evaluated_domains(cfg) + resampled_domains(cfg))
def pack(cfg: JobConfig, run_dir: Path) -> dict:
    """Tokenize and pack the requested sets into sequences that keep their cluster ids."""
    from slm.corpus.layout import domain_dir
    from slm.data.pack import pack as pack_set

    init_ray(cfg.ray)
    layout = RunLayout.of(cfg)
    tokenizer = require(layout.tokenizer_json, "tokenizer")
    jobs = []
    if {GENERIC, "domain"} & set(cfg.pack.sets):  # the valid and resampled sets do not read them
        assignments = require(layout.assignments, "cluster")
    if GENERIC in cfg.pack.sets:  # the generic corpus's set
        jobs.append((GENERIC, assignments, GENERIC))
    for domain in cfg.resample.all_domains:
        if "domain" in cfg.pack.sets:
            jobs.append((f"domain/{domain}", assignments, domain))
        if "resampled" in cfg.pack.sets:
            for method in subset_methods(cfg):
                data = require(layout.resampled(domain, method) / "data", "resample")
                jobs.append((f"resampled/{domain}/{method}", data, None))
    if "valid" in cfg.pack.sets:
        # Every domain the job evaluates: the corpus's and those it resamples for (a new domain too).
        for d in dict.fromkeys([*cfg.corpus.domains, *cfg.resample.all_domains]):
            files = sorted(str(f) for f in domain_dir(cfg.corpus.dir, d, "valid").glob("*.parquet"))
            if not files:
                raise MissingInputError(f"{domain_dir(cfg.corpus.dir, d, 'valid')} holds no Parquet shards: "
                                        f"domain {d!r} has no valid split (corpus.domains)")
            jobs.append((f"valid/{d}", files, None))
    out = {}
    for name, source, domain in jobs:
        m = pack_set(source, tokenizer, cfg.pack.seq_len, layout.packed(name), domain)
        out[name] = {"sequences": m["sequences"], "tokens": m["tokens"]}
        log.info(f"[pack] {name}: {m['sequences']} sequences of {cfg.pack.seq_len + 1} tokens")
    return out
