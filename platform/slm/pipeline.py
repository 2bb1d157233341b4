"""Jobs: a job spec names stages; each stage is a function of (the job config, the run directory).

``slm run jobs/X.yaml`` resolves the config, writes it to ``<run dir>/config.yaml`` and runs the
stages in order. Every stage is idempotent: its outputs carry a manifest, and a stage whose outputs
are complete and current is skipped, so a job that died is simply run again.

Each stage imports its own module when it runs: a job pays only for its stages' dependencies (Ray
Data, torch, Ray Train and Tune, scikit-learn, matplotlib: seconds to import together).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from slm.artifacts import (
    atomic_write_json,
    atomic_write_text,
    is_complete,
    remake,
    run_lock,
    verify,
    write_manifest,
)
from slm.config import ConfigError, dump_yaml
from slm.corpus.config import BUNDLED_DOMAINS
from slm.corpus.layout import GENERIC
from slm.corpus.layout import domains as corpus_domains
from slm.job import JobConfig
from slm.layout import MissingInputError, RunLayout, require
from slm.log import logger
from slm.runtime import JOB_NAME_ENV, PeakMemory, init_ray, shutdown_ray

log = logger(__name__)

Stage = Callable[[JobConfig, Path], dict]


def stage_corpus(cfg: JobConfig, run_dir: Path) -> dict:
    """Fetch and build the bundled corpus into ``corpus.dir`` (skipped when complete and current)."""
    from slm.corpus.build import build

    manifest = build(cfg.corpus)
    imported = manifest.get("imports") or {}
    return {"corpus_dir": cfg.corpus.dir, "generic_documents": manifest.get("generic", {}).get("documents"),
            "domains": sorted({*manifest.get("domains", {}), *(r for r in imported if r != GENERIC)}),
            "imported": sorted(imported)}


def stage_stats(cfg: JobConfig, run_dir: Path) -> dict:
    """Per-source document and token counts of ``corpus.dir``, computed on Ray Data (skipped when complete
    and current: the same settings, corpus files and tokenizer file)."""
    from slm.corpus.layout import verify_corpus
    from slm.data.stats import corpus_stats, format_table, stats_key

    out = RunLayout.of(cfg).stats
    key = stats_key(cfg.corpus.dir, cfg.stats)
    if is_complete(out, key):
        verify_corpus(cfg.corpus.dir)  # the corpus as its manifest records it (corpus_stats checks it otherwise)
        verify(out, remake(out, "stats"))
        rows = json.loads((out / "stats.json").read_text())
        log.info(f"[stats] complete and current in {out}, skipped")
    else:
        init_ray(cfg.ray)
        started = time.perf_counter()
        rows = corpus_stats(cfg.corpus.dir, cfg.stats.tokenizer, cfg.stats.batch_size)
        atomic_write_json(out / "stats.json", rows)
        write_manifest(out, {"stage": "stats", "config_hash": key,
                             "corpus_dir": str(Path(cfg.corpus.dir).expanduser().resolve()),
                             "rows": len(rows), "documents": sum(r["documents"] for r in rows),
                             "tokens": sum(r["tokens"] for r in rows),
                             "seconds": round(time.perf_counter() - started, 1)})
    log.info(format_table(rows))
    return {"rows": len(rows), "tokens": sum(r["tokens"] for r in rows), "stats": str(out / "stats.json")}


def embed_dir(cfg: JobConfig) -> Path:
    from slm.data.embed import default_output

    return Path(cfg.embed.output or default_output(Path(cfg.corpus.dir).expanduser(), cfg.embed)).expanduser()


def stage_embed(cfg: JobConfig, run_dir: Path) -> dict:
    """Window and embed the corpus (generic + domain train splits) on a Ray Data actor pool."""
    from slm.data.embed import embed_corpus

    init_ray(cfg.ray)
    m = embed_corpus(cfg.corpus.dir, cfg.embed, embed_dir(cfg))
    return {"output": str(embed_dir(cfg)), "documents": m["documents"], "windows": m["windows"]}


def stage_cluster(cfg: JobConfig, run_dir: Path) -> dict:
    """k-means of the generic windows, or the pinned assignments of ``cluster.assignments``; every window
    assigned to its coarse cluster and leaf; written to ``cluster.pin`` as pinned assignments if set."""
    from slm.data.cluster import cluster
    from slm.data.embed import resolve_dtype
    from slm.data.pinned import cluster_pinned, machine, write_pinned

    init_ray(cfg.ray)
    out = RunLayout.of(cfg).clusters
    if cfg.cluster.assignments:
        m = cluster_pinned(cfg.corpus.dir, cfg.cluster, cfg.embed, out)
        result = {"output": str(out), "found": m["found"], "embedded": m["embedded"]}
    else:
        m = cluster(require(embed_dir(cfg), "embed"), cfg.cluster, out)
        result = {"output": str(out), "sample_windows": m["sample_windows"]}
    if cfg.cluster.pin:
        made_with = {"run": str(run_dir), "embed": {"fraction": cfg.embed.fraction, "splits": cfg.embed.splits,
                                                     "domains": cfg.embed.domains,
                                                     "dtype": resolve_dtype(cfg.embed.dtype, cfg.embed.device)},
                     "from": cfg.cluster.assignments or "fitted", "machine": machine(), "stage_seconds": m["seconds"]}
        header = write_pinned(out, cfg.cluster.pin, cfg.cluster, cfg.embed, made_with)
        result |= {"pinned_to": cfg.cluster.pin, "pinned_fingerprint": header["fingerprint"]}
    return result


def stage_histogram(cfg: JobConfig, run_dir: Path) -> dict:
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


def subset_methods(cfg: JobConfig) -> list[str]:
    """``resample.methods``, or every registered subset method (``slm.data.resample.SUBSETS``)."""
    from slm.data.resample import SUBSETS

    return list(cfg.resample.methods) or list(SUBSETS)


def stage_resample(cfg: JobConfig, run_dir: Path) -> dict:
    """Generic subsets aimed at each of ``resample.domains`` (``resample.domain``), one per method, with
    their KL to the domain."""
    from slm.data.resample import resample

    init_ray(cfg.ray)
    layout = RunLayout.of(cfg)
    histograms = json.loads(require(layout.histograms_json, "histogram").read_text())
    out = {}
    for domain in cfg.resample.all_domains:
        for method in subset_methods(cfg):
            m = resample(layout.clusters, histograms, domain, cfg.resample.tokens, method,
                         layout.resampled(domain, method), cfg.resample.seed,
                         corpus_dir=cfg.corpus.dir, embed=cfg.embed, dsir_min_words=cfg.resample.dsir_min_words)
            out[f"{domain}/{method}"] = {"tokens_drawn": m["tokens_drawn"],
                                         "kl_resampled_to_domain": m["kl_resampled_to_domain"]}
    return out


def stage_tokenizer(cfg: JobConfig, run_dir: Path) -> dict:
    """Train the byte-level BPE on the generic corpus."""
    from slm.data.bpe import train_bpe

    layout = RunLayout.of(cfg)
    m = train_bpe(cfg.corpus.dir, layout.tokenizer, cfg.tokenizer.vocab_size, cfg.tokenizer.max_chars or None)
    return {"tokenizer": str(layout.tokenizer_json), "vocab_size": m["vocab_size"]}


def stage_pack(cfg: JobConfig, run_dir: Path) -> dict:
    """Tokenize and pack the requested sets into sequences that keep their cluster ids."""
    from slm.corpus.layout import domain_dir
    from slm.data.pack import pack

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
        m = pack(source, tokenizer, cfg.pack.seq_len, layout.packed(name), domain)
        out[name] = {"sequences": m["sequences"], "tokens": m["tokens"]}
        log.info(f"[pack] {name}: {m['sequences']} sequences of {cfg.pack.seq_len + 1} tokens")
    return out


def stage_pretrain(cfg: JobConfig, run_dir: Path) -> dict:
    """Pretrain ``pretrain.method`` at ``pretrain.model``'s size within ``pretrain.train.budget`` on Ray Train."""
    from slm.train.trainer import pretrain

    return pretrain(cfg)  # the manifest: costs, evaluation, where the model is


def stage_specialize(cfg: JobConfig, run_dir: Path) -> dict:
    """Instantiate a pretrained model for a domain, fine-tune it on ``specialize.domain_tokens``, evaluate."""
    from slm.train.trainer import specialize

    return specialize(cfg)


def stage_sweep(cfg: JobConfig, run_dir: Path) -> dict:
    """The budget sweep of ``sweep`` on Ray Tune: pretraining once per (method, size), trials for the rest."""
    from slm.tune.sweep import run_sweep

    return run_sweep(cfg)


def stage_report(cfg: JobConfig, run_dir: Path) -> dict:
    """The sweep's frontier plots and Markdown summary, under its folder's report/."""
    from slm.analysis.report import report
    from slm.tune.sweep import sweep_dir

    result = report(sweep_dir(cfg))
    log.info(f"[report] {result['rows']} rows; plots {result['plots']} in {result['report']}")
    return result


STAGES: dict[str, Stage] = {
    "corpus": stage_corpus,
    "stats": stage_stats,
    "embed": stage_embed,
    "cluster": stage_cluster,
    "histogram": stage_histogram,
    "resample": stage_resample,
    "tokenizer": stage_tokenizer,
    "pack": stage_pack,
    "pretrain": stage_pretrain,
    "specialize": stage_specialize,
    "sweep": stage_sweep,
    "report": stage_report,
}


def check_methods(cfg: JobConfig) -> None:
    """The job's method names against the registry, and the sweep's rules (``slm.tune.plan.check_spec``),
    before anything runs: the config loader checks keys and types; which methods exist is the registry's
    to say."""
    from slm import methods
    from slm.data.resample import subset_method
    from slm.tune.plan import check_spec

    methods.get(cfg.pretrain.method, "pretrain.method")
    for name in cfg.resample.methods:
        subset_method(name, "resample.methods")
    check_spec(cfg.sweep)


def check_stages(cfg: JobConfig) -> None:
    unknown = [s for s in cfg.stages if s not in STAGES]
    if unknown:
        raise ConfigError(f"config key 'stages': unknown stage(s) {unknown}; known stages: {list(STAGES)}")
    if not cfg.stages:
        raise ConfigError("config key 'stages': a job needs at least one stage")
    check_submitted_paths(cfg)
    check_domains(cfg)
    check_loggers(cfg)


# A logger's package (what `import` needs), and how to install it.
LOGGER_PACKAGES = {"tensorboard": ("tensorboard", "pip install tensorboard"),
                   "mlflow": ("mlflow", "pip install -e '.[trackers]' (or pip install mlflow-skinny)"),
                   "wandb": ("wandb", "pip install -e '.[trackers]' (or pip install wandb)")}
# The training sections each stage runs under.
LOGGING_STAGES = {"pretrain": ("pretrain",), "specialize": ("specialize",), "sweep": ("pretrain", "specialize")}


def check_loggers(cfg: JobConfig) -> None:
    """Every logger a training stage of the job will use is installed, checked before anything runs (a
    missing mlflow was a ModuleNotFoundError traceback in the middle of a training stage); loggers set in a
    section no stage of the job trains with are said to log nothing (issue 46)."""
    import importlib.util

    trained = {section for stage in cfg.stages for section in LOGGING_STAGES.get(stage, ())}
    default = ["tensorboard"]
    for section in ("pretrain", "specialize"):
        loggers = getattr(cfg, section).train.loggers
        if section not in trained:
            if loggers != default:
                log.warning(f"[run] warning: {section}.train.loggers lists {', '.join(loggers)}, but no stage of this job "
                            f"trains ({cfg.stages}): nothing will be logged")
            continue
        for name in loggers:
            module, install = LOGGER_PACKAGES[name]
            if importlib.util.find_spec(module) is None:
                raise ConfigError(f"config key '{section}.train.loggers': {name} is not installed; {install}, or "
                                  f"leave it out of the list")


def check_submitted_paths(cfg: JobConfig, cwd: Path | None = None) -> None:
    """Under ``ray job submit --working-dir``, the driver runs in a temporary copy of that folder
    (``…/runtime_resources/working_dir_files/…``): relative ``run.root`` or ``corpus.dir`` would write the
    outputs there, where they vanish with the job. Refuse them, naming the key and the fix."""
    cwd = cwd or Path.cwd()
    if "working_dir_files" not in cwd.parts:
        return
    for key, value in (("run.root", cfg.run.root), ("corpus.dir", cfg.corpus.dir)):
        if not Path(value).expanduser().is_absolute():
            raise ConfigError(f"config key '{key}': {value!r} is relative, and this job runs in Ray's temporary "
                              f"copy of its working directory ({cwd}), which goes when the job ends: give "
                              f"shared storage, e.g. {key}=/mnt/shared/{Path(value).name}")


def check_domains(cfg: JobConfig) -> None:
    """Every domain a job names exists in its corpus, checked before any stage runs (not when the stage
    that reads it fails). A job that builds the bundled corpus first is checked against what it builds
    and what the user imported into it already (the build keeps imports)."""
    corpus = Path(cfg.corpus.dir).expanduser()
    present = set(corpus_domains(corpus)) if (corpus / "domains").is_dir() else set()
    if "corpus" in cfg.stages:
        known = set(BUNDLED_DOMAINS) | present
        where = f"the bundled corpus or the domains imported into {corpus}"
    elif present:
        known, where = present, f"the corpus at {corpus}"
    else:
        return  # no corpus yet: the first stage that reads one says so
    stages = set(cfg.stages)
    named = []  # (key, domain) of the sections this job's stages read
    if stages & {"pack", "pretrain", "sweep"}:  # the valid sets packed, and every evaluation
        named += [("corpus.domains", d) for d in cfg.corpus.domains]
    if stages & {"embed"} or ("cluster" in stages and cfg.cluster.assignments):
        named += [("embed.domains", d) for d in cfg.embed.domains]
    if stages & {"histogram"}:
        named += [("histogram.domains", d) for d in cfg.histogram.domains]
    if stages & {"resample", "pack"}:
        named += [("resample.domain", cfg.resample.domain)] + [("resample.domains", d) for d in cfg.resample.domains]
    if "specialize" in stages and cfg.specialize.domain:
        named += [("specialize.domain", cfg.specialize.domain)]
    if "sweep" in stages:
        named += [("sweep.domains", d) for d in cfg.sweep.domains]
    for key, domain in named:
        if domain not in known:
            raise ConfigError(f"config key '{key}': no domain {domain!r} in {where} (its domains: {sorted(known)}; "
                              "add one with `slm corpus import --domain`)")


def stage_summary(result: dict) -> str:
    """The few facts of a stage's result worth a log line: where its output is and its headline numbers
    (a training stage's model and valid perplexity), not its whole manifest."""
    shown = []
    for key in ("output", "model", "tokenizer", "results", "stats", "documents", "windows", "rows", "tokens",
                "vocab_size", "trials", "finished", "failed"):
        if isinstance(result.get(key), str | int | float):
            shown.append(f"{key} {result[key]}")
    # Per domain, never their mean: methods evaluate different domains (a clustered method only those
    # with a histogram), and a mean over other domains would rank them on different tests.
    evaluated = result.get("eval") if isinstance(result.get("eval"), dict) else {}
    per_domain = [f"{d} {r['perplexity']:.2f}" for d, r in sorted(evaluated.items()) if d != "macro"]
    if per_domain:
        shown.append(f"valid ppl {', '.join(per_domain)}")
    return f": {'; '.join(shown)}" if shown else ""


def run_job(cfg: JobConfig) -> dict[str, dict]:
    """Run every stage of ``cfg`` in order, holding the run directory's lock; return each stage's summary."""
    check_stages(cfg)
    check_methods(cfg)
    with run_lock(cfg.run.dir, command=" ".join(sys.argv) or f"stages {cfg.stages}"):
        return _run_stages(cfg)


def job_name(cfg: JobConfig) -> str:
    """The Ray job's name in the dashboard: the run and its stages, a training stage with its method and
    size (``slm quickstart: pretrain soup-d2``), a sweep with its name."""
    labels = {"pretrain": f"pretrain {cfg.pretrain.method}-{cfg.pretrain.model.size_name}",
              "specialize": f"specialize {cfg.specialize.name or cfg.specialize.source} on "
                            f"{cfg.specialize.domain or cfg.resample.domain}",
              "sweep": f"sweep {cfg.sweep.name}"}
    return f"slm {cfg.run.name}: {', '.join(labels.get(stage, stage) for stage in cfg.stages)}"


def _run_stages(cfg: JobConfig) -> dict[str, dict]:
    run_dir = cfg.run.dir
    layout = RunLayout.of(cfg)
    resolved = dump_yaml(cfg)
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{'-'.join(cfg.stages)}"
    atomic_write_text(layout.invocation(stamp), resolved)
    atomic_write_text(layout.config, resolved)
    os.environ.setdefault(JOB_NAME_ENV, job_name(cfg))
    log.info(f"[run] {cfg.run.name}: stages {cfg.stages}; outputs in {run_dir}")
    results, resources = {}, {}
    try:
        for name in cfg.stages:
            started = time.perf_counter()
            log.info(f"[run] stage {name} ...")
            with PeakMemory() as memory:
                results[name] = STAGES[name](cfg, run_dir)
            resources[name] = {"seconds": round(time.perf_counter() - started, 1), "peak_memory_gib": memory.peak_gib}
            log.info(f"[run] stage {name} done in {resources[name]['seconds']}s, peak memory "
                     f"{memory.peak_gib} GiB{stage_summary(results[name])}")
    finally:
        shutdown_ray()
        # What each stage gave and took; a run of some stages replaces just their entries, so the run
        # directory keeps every stage's latest (a stage that failed keeps its previous result).
        for path, new in ((layout.stage_resources, resources), (layout.results, results)):
            if new:
                atomic_write_json(path, {**(json.loads(path.read_text()) if path.exists() else {}), **new})
    return results
