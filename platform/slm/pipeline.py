"""Jobs: a job spec names stages (``slm.stages``, one module each); this runs them.

``slm run jobs/X.yaml`` checks the job before anything runs (its stages, methods, domains, loggers), resolves
the config, writes it to ``<run dir>/config.yaml`` and runs the stages in order, holding the run directory's
lock. Every stage is idempotent: its outputs carry a manifest, and a stage whose outputs are complete and
current is skipped, so a job that died is simply run again. Nothing here knows a stage by name: what the
checks need of one, the stage says (``slm.stages.Stage``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from slm.artifacts import (
    atomic_write_json,
    atomic_write_text,
    run_lock,
)
from slm.config import ConfigError, dump_yaml
from slm.corpus.layout import domains as corpus_domains
from slm.job import JobConfig
from slm.layout import RunLayout
from slm.log import logger
from slm.runtime import JOB_NAME_ENV, PeakMemory, shutdown_ray
from slm.stages import STAGES

log = logger(__name__)

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
    """The job's stages exist, and what they will read and log to is there, before anything runs."""
    unknown = [s for s in cfg.stages if s not in STAGES]
    if unknown:
        raise ConfigError(f"config key 'stages': unknown stage(s) {unknown}; known stages: {sorted(STAGES)}")
    if not cfg.stages:
        raise ConfigError("config key 'stages': a job needs at least one stage")
    check_submitted_paths(cfg)
    check_domains(cfg)
    check_loggers(cfg)


# A logger's package (what `import` needs), and how to install it.
LOGGER_PACKAGES = {"tensorboard": ("tensorboard", "pip install tensorboard"),
                   "mlflow": ("mlflow", "pip install -e '.[trackers]' (or pip install mlflow-skinny)"),
                   "wandb": ("wandb", "pip install -e '.[trackers]' (or pip install wandb)")}


def check_loggers(cfg: JobConfig) -> None:
    """Every logger a training stage of the job will use is installed, checked before anything runs (a
    missing mlflow was a ModuleNotFoundError traceback in the middle of a training stage); loggers set in a
    section no stage of the job trains with are said to log nothing (issue 46)."""
    import importlib.util

    trained = {section for stage in cfg.stages for section in STAGES.get(stage).trains}
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
    built = {d for stage in cfg.stages for d in STAGES.get(stage).builds_domains}
    if built:
        known = built | present
        where = f"the bundled corpus or the domains imported into {corpus}"
    elif present:
        known, where = present, f"the corpus at {corpus}"
    else:
        return  # no corpus yet: the first stage that reads one says so
    named = [read for stage in cfg.stages for read in STAGES.get(stage).reads_domains(cfg)]  # (key, domain)
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
    labels = [STAGES.get(stage).label(cfg) if STAGES.get(stage).label else stage for stage in cfg.stages]
    return f"slm {cfg.run.name}: {', '.join(labels)}"


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
                results[name] = STAGES.get(name)(cfg, run_dir)
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
