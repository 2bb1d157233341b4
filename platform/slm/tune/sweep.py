"""`slm sweep`: a budget sweep on Ray Tune.

1. **Plan** (``plan``): every pretraining run — one per (method, size), one per (size, domain) for SLM-is
   and DSIR, whose pretraining sets depend on the domain — and every specialization trial: (pretraining
   run, pretraining budget, domain, in-domain tokens, specialization budget), each once per seed. Beside
   that grid, the experiments the claims C4–C6 need (``sweep.large_size``, ``distill``, ``salt_kd_share``,
   ``all_experts``; docs/budgets.md). Bad specs fail here, before anything runs: an unknown method or
   size, a zero budget, a size above the inference budget, a domain with no packed data. ``--dry-run``
   prints the plan and its estimated cost.
2. **Pretraining**, paid once per run: trained to the largest pretraining budget with snapshots at the
   others (``pretrain.snapshot_steps``; under ``pretrain.train.optim.schedule: wsd`` each smaller budget is
   a cooldown branch from the run, a fully trained model); a finished run is skipped, an interrupted one
   (or branch) resumes. Runs that
   train in their own process (``pretrain.train.num_workers: 0``) and Ray Train runs alike run as Ray tasks, as
   many at once as the cluster's CPUs (GPUs, or shares of one: ``train.gpus_per_worker``) hold; SALT's run waits
   for its teacher's.
   A sweep's models live in its own folder (``sweeps/<name>/checkpoints``, ``…/specialized``); every
   evaluation the runs logged goes to ``curves.parquet`` (C5 reads it).
3. **Specialization trials** on Tune: a function trainable per trial, as in Ray's docs, that runs
   ``slm.train.trainer.specialize`` and reports the row. With ``specialize.train.num_workers`` ≥ 1 it
   builds and fits a TorchTrainer: Ray Train's intermediate reports reach Tune (``TuneReportCallback``)
   so ASHA can stop weak trials, and the trainable asks Tune for a token CPU only (its workers hold the
   real resources). With ``num_workers: 0`` the loop trains in the trial's own process, which asks Tune
   for the CPUs (or GPU) it uses and reports to Tune itself: no Ray Train start-up per trial. Trials run
   in waves: distillation's trials (wave 2) read the teachers that wave 1 specialized. A finished trial
   leaves its row beside its model (``row.json``, keyed on the trial and the specialization config); an
   interrupted sweep, rerun, reads those rows and gives Tune only the trials without one. (Not
   ``Tuner.restore``: Tune 2.60 restores its grid from a search state that a driver killed at the wrong
   moment leaves unusable; trials created from it lost their config.)
4. **Results table**: one row per trial, Parquet and CSV, with quality and the three costs.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import ray
import ray.tune
import torch
from ray.tune import Callback, CLIReporter, TuneConfig, Tuner
from ray.tune import RunConfig as TuneRunConfig
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.schedulers import ASHAScheduler

from slm import methods
from slm.artifacts import atomic_write_json, read_manifest
from slm.config import ConfigError, config_hash, to_dict, with_value
from slm.corpus.layout import domains as corpus_domains
from slm.data.histogram import coarse_histograms, entropy
from slm.layout import RunLayout, TrainOutput
from slm.log import logger
from slm.models.config import size_config
from slm.models.gpt import GPT, ModelConfigError
from slm.progress import Progress
from slm.records.plan import DataFingerprint, Plan, PretrainRun, SizeCost, Trial
from slm.records.table import row, write_curves, write_table
from slm.runtime import init_ray
from slm.train.budget import dense_flops_per_token
from slm.train.config import BudgetConfig
from slm.train.data import packed_arrays, recorded_digest, valid_arrays
from slm.train.hardware import gpu_memory_bytes, planning_peak, training_memory_bytes
from slm.train.numerics import kernels, pinned_environment
from slm.train.trainer import gpt_config, pretrain, pretrain_data, pretrain_spec, specialize, tracked
from slm.tune.config import SweepJob
from slm.tune.plan import PlanInputs, SweepSpecError, check_spec, compared_methods, format_plan, make_plan
from slm.tune.tracking import write_hparams, write_mlflow

log = logger(__name__)


def sweep_dir(cfg: SweepJob) -> Path:
    return RunLayout.of(cfg).sweep


def _sizes(cfg: SweepJob, names: list[str]) -> dict[str, SizeCost]:
    vocab, seq_len = _vocab_and_seq_len(cfg)
    sizes = {}
    for size in names:
        try:
            gpt = gpt_config(size_config(size), vocab, seq_len)
        except ModelConfigError as err:
            key = "sweep.large_size" if size == cfg.sweep.large_size else "sweep.sizes"
            raise SweepSpecError(f"config key '{key}': {size!r}: {err}") from err
        sizes[size] = SizeCost(dense_flops_per_token(gpt), dense_flops_per_token(gpt, training=False))
    return sizes


def _make_hint(layout: RunLayout, domain: str, *sets: str) -> str:
    """The command that packs ``sets`` for ``domain``, as written: the run directory's own resolved config
    (same run.root and name), its stages and domain overridden."""
    return (f"make it with `slm run {layout.config} 'stages=[histogram, resample, pack]' "
            f"'resample.domains=[{domain}]' 'pack.sets=[{', '.join(sets)}]'`")


def _check_data(cfg: SweepJob, domains: list[str]) -> None:
    """Every domain's packed sets and every compared method's pretraining set, there before anything runs."""
    layout = RunLayout.of(cfg)
    for d in domains:
        missing = [p for p in (layout.packed_domain(d), layout.packed_valid(d)) if not (p / "data").exists()]
        if missing:
            raise SweepSpecError(f"config key 'sweep.domains': {d!r} has no packed "
                                 f"{' or '.join(str(p) for p in missing)}: {_make_hint(layout, d, 'domain', 'resampled', 'valid')}")
        for name in compared_methods(cfg.sweep):
            subset = layout.packed(methods.get(name).pretrain_set(d))
            if not (subset / "data").exists():
                raise SweepSpecError(f"config key 'sweep.methods': {name} for {d!r} pretrains on {subset}, "
                                     f"which is not packed: "
                                     f"{_make_hint(layout, d, subset.relative_to(layout.packed('')).parts[0])}")


def _check_domains(cfg: SweepJob, domains: list[str]) -> None:
    """A dry run's check (no packed data needed): every domain is one of the corpus's, as the run would
    find, the built corpus's domains when it is on disk, else those the job's corpus stage would build."""
    built = corpus_domains(cfg.corpus.dir)
    known = built or list(cfg.corpus.domains)
    unknown = [d for d in domains if d not in known]
    if unknown:
        where = f"the corpus in {cfg.corpus.dir}" if built else "the bundled corpus this job builds (corpus.domains)"
        key = "sweep.domains" if cfg.sweep.domains else "resample.domains"
        raise SweepSpecError(f"config key '{key}': {unknown} not in {where}, whose domains are {known}")


def plan_sweep(cfg: SweepJob, check_data: bool = True) -> Plan:
    """Every pretraining run and trial of ``cfg.sweep`` (``slm.tune.plan.make_plan``), from what this run
    directory holds: its tokenizer's vocabulary for the sizes' FLOPs, its packed data (checked unless
    ``check_data=False``: a dry run on another machine than the cluster's), the peak of this machine."""
    check_spec(cfg.sweep)
    sw = replace(cfg.sweep, axes=typed_axes(cfg), per_method=typed_per_method(cfg))
    domains = sw.domains or cfg.resample.all_domains
    if check_data:
        _check_data(cfg, domains)
    else:
        _check_domains(cfg, domains)
    p_train, s_train = cfg.pretrain.train, cfg.specialize.train
    vocab, seq_len = _vocab_and_seq_len(cfg)
    peak = planning_peak(p_train)
    inputs = PlanInputs(
        domains=tuple(domains),
        sizes=_sizes(cfg, list(dict.fromkeys([*sw.sizes, *([sw.large_size] if sw.large_size else [])]))),
        pretrain_tokens_per_step=p_train.batch_size * seq_len * max(1, p_train.num_workers),
        specialize_tokens_per_step=s_train.batch_size * seq_len * max(1, s_train.num_workers),
        experts=methods.get(methods.SLM_MIX).bind(cfg.pretrain.model).settings.n_experts or cfg.cluster.k,
        peak_flops=peak.flops, peak_flops_source=peak.source,
        decay_fraction=p_train.optim.decay_fraction if p_train.optim.schedule == "wsd" else 0.0, vocab_size=vocab)
    entropy = histogram_entropy(RunLayout.of(cfg), domains) if check_data else {}
    return make_plan(sw, inputs, entropy)


def data_digests(cfg: SweepJob, p: Plan) -> DataFingerprint:
    """The digest of every packed set the plan trains or evaluates on (made into arrays here, once) and
    their fingerprint: the report combines only tables of sweeps with the same fingerprint."""
    domains = sorted({t.domain for t in p.trials})
    sets = {methods.get(r.method).pretrain_set(r.domain or cfg.resample.domain) for r in p.runs}
    sets |= {f"domain/{d}" for d in domains}
    sets = {name: recorded_digest(packed_arrays(RunLayout.of(cfg), name)) for name in sorted(sets)}
    sets |= {f"valid/{d}": recorded_digest(path) for d, path in valid_arrays(RunLayout.of(cfg), list(cfg.corpus.domains)).items()}
    return DataFingerprint.of(sets)


def histogram_entropy(layout: RunLayout, domains: list[str]) -> dict[str, float]:
    """Each domain's coarse cluster histogram's entropy in nats (C2 is read beside it); none before the
    histogram stage has run."""
    if not (layout.clusters_json.exists() and layout.histograms_json.exists()):
        return {}
    hist = coarse_histograms(layout.clusters_json, layout.histograms_json)
    return {d: entropy(np.asarray(hist[d])) for d in domains if d in hist}


def _vocab_and_seq_len(cfg: SweepJob) -> tuple[int, int]:
    """From the run's tokenizer and packed data, or the config when they are not made yet (a dry run)."""
    made = RunLayout.of(cfg).tokenizer_json.exists()
    return (RunLayout.of(cfg).vocab_size() if made else cfg.tokenizer.vocab_size), cfg.pack.seq_len


# ------------------------------------------------------------------------------------------ running


def with_axes(cfg: SweepJob, axes: tuple[tuple[str, Any], ...]) -> SweepJob:
    """The job at these axis values (``sweep.axes``): each key set and typed as the loader would, its section
    checked again (``slm.config.with_value``: an unknown key or a wrong type fails naming the key)."""
    for key, value in axes:
        cfg = with_value(cfg, key, value)
    return cfg


def typed_value(cfg: SweepJob, key: str, value: Any, where: str) -> Any:
    """A value of config key ``key`` checked against the job (``where`` named when it does not make a valid
    job) and given the type the key has: YAML reads ``3e-3`` as text, the config a float."""
    try:
        job = with_axes(cfg, ((key, value),))
    except ConfigError as err:
        raise SweepSpecError(f"{where}: the value {value!r} does not make a valid job: {err}") from err
    return setting_of(job, key)


def setting_of(cfg: SweepJob, key: str) -> Any:
    """The job's value at a dotted config key, as the YAML says it (a method's settings under its name:
    ``pretrain.model.soup.experts``)."""
    setting = to_dict(cfg)
    for part in key.split("."):
        setting = setting[part]
    return setting


def typed_axes(cfg: SweepJob) -> dict[str, list[Any]]:
    """Every axis value checked against the job before anything runs (``sweep.axes.<key>`` named when one
    does not make a valid job) and typed (``typed_value``)."""
    typed: dict[str, list[Any]] = {}
    for key, values in cfg.sweep.axes.items():
        typed[key] = [typed_value(cfg, key, value, f"config key 'sweep.axes.{key}'") for value in values]
        if len({repr(v) for v in typed[key]}) != len(typed[key]):
            raise SweepSpecError(f"config key 'sweep.axes.{key}': a value is given twice in {typed[key]}")
    return typed


def typed_per_method(cfg: SweepJob) -> dict[str, dict[str, Any]]:
    """Each method's own settings (``sweep.per_method``) checked and typed as an axis's values are."""
    return {who: {key: typed_value(cfg, key, value, f"config key 'sweep.per_method.{who}.{key}'")
                  for key, value in settings.items()}
            for who, settings in cfg.sweep.per_method.items()}


def run_config(cfg: SweepJob, run: PretrainRun) -> SweepJob:
    """The job a sweep's pretraining run is: its axis values, method, size, domain, budget, snapshots, seed,
    teacher (``dataclasses.replace`` on the typed sections: no value goes through text but an axis's)."""
    cfg = with_axes(cfg, run.axes + run.own)
    p, size = cfg.pretrain, size_config(run.size)
    train = replace(p.train, budget=BudgetConfig(steps=run.steps),
                    seed=p.train.seed if run.seed is None else run.seed,
                    eval_every=run.eval_every or p.train.eval_every)
    teacher = p.teacher
    if run.teacher:
        teacher = replace(teacher, checkpoint=str(RunLayout.of(cfg).pretrained(run.teacher).model),
                          kd_steps=run.kd_steps)
    pretrain = replace(p, method=run.method, name=run.name, domain=run.domain or p.domain,
                       snapshot_steps=list(run.snapshots), train=train,
                       model=replace(p.model, depth=size.depth, width=size.width, preset=size.preset), teacher=teacher)
    return replace(cfg, pretrain=pretrain)


def _pretrain_task(cfg: SweepJob, *teachers) -> str:
    """One pretraining run in a Ray task (``teachers``: the runs it waits for, already finished)."""
    pretrain(cfg)
    return cfg.pretrain.run_name


def run_resources(train) -> dict:
    """What a pretraining run's Ray task asks for. A run in its own process (``num_workers: 0``) asks for what its
    loop uses: ``cpus_per_worker`` CPUs, and with ``use_gpu`` a ``gpus_per_worker`` share of a GPU (1/N: N runs to
    a device). A Ray Train run's task asks for a token CPU only: its TorchTrainer's workers hold the real
    resources (Ray's pattern for a Tune trial that fits a trainer), so runs go side by side as far as the
    cluster holds their workers, and the rest wait for room."""
    if train.num_workers:
        return {"num_cpus": 0.01, "num_gpus": 0}
    return {"num_cpus": train.cpus_per_worker, "num_gpus": train.gpus_per_worker if train.use_gpu else 0}


def device_needs(cfg: SweepJob, p: Plan) -> dict[str, tuple[int, str]]:
    """Per training section that shares a GPU (``use_gpu`` with ``gpus_per_worker`` < 1): the device memory its
    largest run or trial needs (``slm.train.hardware.training_memory_bytes``) and which one it is."""
    needs = {}
    p_train, s_train = cfg.pretrain.train, cfg.specialize.train
    if p_train.use_gpu and p_train.gpus_per_worker < 1:
        params, shapes = {}, {}
        for run in p.runs:
            method, spec, _ = pretrain_spec(run_config(cfg, run))
            with torch.device("meta"):
                params[run.name] = sum(t.numel() for t in method.build(spec.arch).parameters())
            shapes[run.name] = spec.arch.gpt
        needs["pretrain"] = max((training_memory_bytes(params[r.name], shapes[r.name], p_train.batch_size,
                                                       params.get(r.teacher, 0)), r.name) for r in p.runs)
    if s_train.use_gpu and s_train.gpus_per_worker < 1:
        vocab, seq_len = _vocab_and_seq_len(cfg)
        sized = []
        for size in sorted({t.size for t in p.trials}):
            gpt = gpt_config(size_config(size), vocab, seq_len)
            with torch.device("meta"):
                params = sum(t.numel() for t in GPT(gpt).parameters())
            sized.append((training_memory_bytes(params, gpt, s_train.batch_size, params), f"a {size} trial"))
        needs["specialize"] = max(sized)
    return needs


def check_device_share(cfg: SweepJob, p: Plan, device_bytes: int | None = None) -> None:
    """Before anything trains: the runs (trials) that share one GPU fit its memory together, or the sweep stops
    saying how much they need and have (``device_bytes``: one GPU's memory; None: asked of the cluster's)."""
    for section, (need, largest) in device_needs(cfg, p).items():
        train = getattr(cfg, section).train
        per_device = int(1 / train.gpus_per_worker + 1e-9)
        have = device_bytes if device_bytes is not None else gpu_memory_bytes(train.gpus_per_worker)
        what = "runs" if section == "pretrain" else "trials"
        line = (f"{per_device} {what} on a GPU, needing ~{per_device * need / 2**30:.2f} GiB together (the largest, "
                f"{largest}: ~{need / 2**30:.2f} GiB, estimated) of its {have / 2**30:.2f} GiB")
        if per_device * need > have:
            raise SweepSpecError(f"config key '{section}.train.gpus_per_worker': {train.gpus_per_worker:g} puts {line}; "
                                 f"raise the share (fewer to a device)")
        log.info(f"[sweep] {section}: {line}")


def pretrain_all(cfg: SweepJob, runs: tuple[PretrainRun, ...]) -> None:
    """Every pretraining run of the plan, each a Ray task, as many at once as the cluster's resources hold
    (``run_resources``), a SALT run after its teacher (Ray passes the teacher's result as the task's argument,
    so it waits for it)."""
    train = cfg.pretrain.train
    # Its lines are printed here, each naming the run that finished (the Progress's own would repeat them).
    progress = Progress("sweep", "pretraining runs done", len(runs), out=lambda line: None)
    # The arrays every run memory-maps, made here once rather than by two tasks at the same time.
    for run in runs:
        pretrain_data(run_config(cfg, run))
    valid_arrays(RunLayout.of(cfg), list(cfg.corpus.domains))
    task = ray.remote(_pretrain_task)
    # A task lost with its node is run again elsewhere, resuming from the run's checkpoints (shared storage): as many
    # times as the run may fail (an error raised by the run itself is not retried).
    resources = {**run_resources(train), "max_retries": train.max_failures}
    if train.numerics == "pinned" and not train.num_workers:
        # workers of their own, started pinned: never one that already ran a kernel (Train's workers pin themselves)
        resources["runtime_env"] = {"env_vars": pinned_environment()}
    refs: dict[str, ray.ObjectRef] = {}
    waiting, pending, finished = list(runs), [], 0
    window = cfg.sweep.max_concurrent_runs or len(runs)
    while waiting or pending:
        while waiting and len(pending) < window:  # in plan order: a teacher is submitted before its student
            run = waiting.pop(0)
            teachers = [refs[run.teacher]] if run.teacher in refs else []
            # named after the run: the dashboard's task list and timeline say which run each process is
            refs[run.name] = task.options(name=f"pretrain:{run.name}", **resources).remote(run_config(cfg, run),
                                                                                          *teachers)
            pending.append(refs[run.name])
        done, pending = ray.wait(pending, num_returns=1)
        name = ray.get(done[0])  # raises the run's error here
        finished += 1
        progress.update(finished)  # a line per finished run: where the pretraining stands, k of N, the time left
        log.info(f"{progress.line()}; last: {name}")


def trial_config(cfg: SweepJob, t: Trial) -> SweepJob:
    """The job a trial is: the snapshot it specializes, its domain, data and step budgets, seed, expert
    (C6) and teacher (distillation: wave 1's specialized large model for the same cell and seed)."""
    cfg = with_axes(cfg, t.axes + t.own)
    s = cfg.specialize
    train = replace(s.train, budget=BudgetConfig(steps=t.specialize_steps),
                    seed=s.train.seed if t.seed is None else t.seed)
    teacher = replace(s.teacher, checkpoint=str(teacher_output(cfg, t).model)) if t.teacher else s.teacher
    specialize = replace(s, source=str(RunLayout.of(cfg).pretrained(t.source).snapshot(t.pretrain_steps)),
                         name=t.name, domain=t.domain, domain_tokens=t.domain_tokens, train=train,
                         expert=s.expert if t.expert is None else t.expert, teacher=teacher)
    return replace(cfg, specialize=specialize)


def teacher_output(cfg: SweepJob, t: Trial) -> TrainOutput:
    return RunLayout.of(cfg).specialized(t.domain, t.teacher)


def specialize_trial(config: dict, job: SweepJob, runs: dict[str, PretrainRun], trials: dict[str, Trial],
                     trials_log: str) -> None:
    """The Tune function trainable: one specialization of one snapshot. Tune's search space is the trials'
    names; the plan's trials themselves, its runs and the job come through ``tune.with_parameters`` (Ray's
    object store) as the typed objects the plan made, so that nothing is flattened into Tune's columns and
    rebuilt from them."""
    t = trials[config["trial"]]
    cfg = trial_config(job, t)
    log = Path(trials_log)
    with log.open("a") as f:  # an audit line per trial start: what a restored sweep ran again
        f.write(json.dumps({"trial": t.name, "started": time.time()}) + "\n")
    # The trial's own lines go to its log, not through Ray to the driver: Ray prefixes a forwarded line with
    # the actor's name, which a reused actor keeps from its first trial (issue 46: 290 of 300 lines named
    # another trial). The driver prints one line per trial event, named right (``TrialEvents``).
    own = trial_log(log, t)
    own.parent.mkdir(parents=True, exist_ok=True)
    with own.open("a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        m = specialize(cfg)
    layout = RunLayout.of(cfg)
    snapshot = layout.pretrained(t.source).read_snapshots()[t.pretrain_steps]
    teacher = teacher_snapshot = None
    if t.teacher:  # the teacher specialized the teacher run's last snapshot (sweep.large_steps)
        teacher = read_manifest(teacher_output(cfg, t).dir)
        teacher_snapshot = layout.pretrained(t.teacher_run).read_snapshots()[runs[t.teacher_run].steps]
    trunk = read_manifest(layout.pretrained(t.source).dir)
    result = row(t, m, snapshot, teacher, teacher_snapshot, pretrained_on=trunk.get("ran", {}).get("node"))
    atomic_write_json(row_path(job, t), {"key": trial_key(job, t), "row": result})
    ray.tune.report(result)


class TrialNamedActor:
    """Mixed into Tune's function trainable (its ``__mixins__``, which ``tune.with_parameters`` keeps):
    the trial's actor takes the trial's name as its repr, which the dashboard's Actors page and ``ray
    list actors`` show, instead of the function's name on every trial (Tune's ``ImplicitFunc`` returns
    its ``_name``; Ray records an actor's repr once its constructor has run)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._name = self.trial_name


specialize_trial.__mixins__ = (TrialNamedActor,)


def trial_log(trials_log: Path, t: Trial) -> Path:
    """Where a trial's own lines go: ``trial_logs/<trial>.log`` beside the sweep's ``trials.log``."""
    return trials_log.parent / "trial_logs" / f"{t.name}.log"


class TrialEvents(Callback):
    """The driver's line per finished or failed trial, named by the trial, with k of N and the time left
    (``slm.progress.Progress``): what Tune's status table said in 520 of a sweep log's 1,079 lines."""

    def __init__(self, wave: int, total: int, logs: Path):
        # Its lines are printed here, each naming the trial that ended (the Progress's own would repeat them).
        self.progress = Progress("sweep", f"wave {wave} trials done", total, out=lambda line: None)
        self.logs = logs

    def _line(self, trial, what: str) -> None:
        self.progress.add(1)
        log.info(f"{self.progress.line()}; last: {trial} {what}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        ppl = (trial.last_result or {}).get("perplexity")
        self._line(trial, f"valid ppl {ppl:.2f}" if isinstance(ppl, float) else "finished")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._line(trial, f"FAILED (its lines: {self.logs / f'{trial}.log'})")


def trial_key(cfg: SweepJob, t: Trial) -> str:
    """What a finished trial's row depends on: the trial and the specialization config (the trial's fields as
    ``config_hash`` keys them: one added later with a neutral default leaves the keys of rows before it alone)."""
    return config_hash({"trial": t, "specialize": cfg.specialize})


def row_path(cfg: SweepJob, t: Trial) -> Path:
    return RunLayout.of(cfg).specialized(t.domain, t.name).dir / "row.json"


def finished_row(cfg: SweepJob, t: Trial) -> dict | None:
    """The row a trial left when it finished under the same trial and specialization config, else None."""
    path = row_path(cfg, t)
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    return saved["row"] if saved["key"] == trial_key(cfg, t) else None


def trial_resources(train) -> dict:
    """What a trial asks Tune for: a token CPU when its TorchTrainer's workers hold the real resources
    (Ray's docs' pattern), else what its loop uses in the trial's own process (``num_workers: 0``)."""
    if train.num_workers:
        return {"cpu": 0.01}
    return {"cpu": train.cpus_per_worker, "gpu": train.gpus_per_worker if train.use_gpu else 0}


def concurrency(cfg: SweepJob) -> int:
    if cfg.sweep.max_concurrent_trials:
        return cfg.sweep.max_concurrent_trials
    t = cfg.specialize.train
    resources = ray.cluster_resources()
    if t.use_gpu:
        return max(1, int(resources.get("GPU", 1) // (max(1, t.num_workers) * t.gpus_per_worker)))
    return max(1, int(resources.get("CPU", 1) // (max(1, t.num_workers) * t.cpus_per_worker)))


def trial_name(trial) -> str:
    """A Tune trial is named after the sweep's trial (method, size, domain, budgets, seed): in the console
    table, the trial folders and the dashboard."""
    return trial.config["trial"]


# What the console table shows of each trial beside its name (which says its method, size, budgets and
# seed): once reported, what it measured.
METRIC_COLUMNS = {"perplexity": "valid ppl", "accuracy": "top-1"}


def trial_table() -> CLIReporter:
    """Tune's status table: every 5 minutes (Tune's own is every 5 s), 10 rows; between tables each trial's
    end is one line (``TrialEvents``)."""
    return CLIReporter(parameter_columns=[], metric_columns=METRIC_COLUMNS, sort_by_metric=False,
                       max_report_frequency=300, max_progress_rows=10)


def run_wave(cfg: SweepJob, trials: list[Trial], wave: int, runs: dict[str, PretrainRun], out: Path
             ) -> tuple[list[dict], list[str]]:
    """One wave of trials: the rows of those that finished in an earlier invocation, read from disk, and
    the others run on Tune. Returns (rows, errors)."""
    rows = {t.name: r for t in trials if (r := finished_row(cfg, t)) is not None}
    pending = [t for t in trials if t.name not in rows]
    if rows:
        log.info(f"[sweep] wave {wave}: {len(rows)} of {len(trials)} trials finished earlier (rows read from their "
                 f"folders); {len(pending)} to run")
    if not pending:
        return list(rows.values()), []
    storage = cfg.sweep.storage_path or str((out / "tune").resolve())
    trainable = ray.tune.with_resources(
        ray.tune.with_parameters(specialize_trial, job=cfg, runs=runs, trials={t.name: t for t in pending},
                                 trials_log=str((out / "trials.log").resolve())),
        trial_resources(cfg.specialize.train))
    # One Tune experiment per invocation and set of trials to run: a rerun after an interruption makes a
    # new one for the trials still missing (never Tune's restore), and leaves the earlier one as it was.
    digest = config_hash({"trials": list(pending), "specialize": cfg.specialize})[:8]
    name = f"{cfg.sweep.name}-w{wave}-{digest}-{time.strftime('%Y%m%d-%H%M%S')}"
    scheduler = None
    if cfg.sweep.scheduler == "asha":
        scheduler = ASHAScheduler(time_attr="step", max_t=max(cfg.sweep.specialize_steps), grace_period=1)
    tuner = Tuner(
        trainable,
        param_space={"trial": ray.tune.grid_search([t.name for t in pending])},
        # Trials that train in their own process reuse it for the next trial: no new Python, torch
        # and slm imports per trial (a few seconds each, against trials of a few seconds).
        tune_config=TuneConfig(metric="loss" if scheduler else None, mode="min" if scheduler else None,
                               scheduler=scheduler, max_concurrent_trials=concurrency(cfg),
                               reuse_actors=not cfg.specialize.train.num_workers,
                               trial_name_creator=trial_name, trial_dirname_creator=trial_name),
        # a trial lost with its node (or its workers) runs again from its start: specializations are short
        run_config=TuneRunConfig(name=name, storage_path=storage, progress_reporter=trial_table(),
                                 failure_config=ray.tune.FailureConfig(max_failures=cfg.specialize.train.max_failures),
                                 verbose=1, callbacks=[JsonLoggerCallback(), CSVLoggerCallback(),
                                                       TrialEvents(wave, len(pending), out / "trial_logs")]),
    )
    grid = list(tuner.fit())
    ran = [r.metrics for r in grid if r.metrics and "perplexity" in r.metrics]
    return list(rows.values()) + ran, [str(r.error) for r in grid if r.error]


def run_sweep(cfg: SweepJob) -> dict:
    """Plan, pretrain what is missing, run (or resume) the trials on Tune, write the results table."""

    # Tune runs each trial in its own folder: every path a trial reads must be absolute. A sweep's runs
    # live under its own folder, so that they never overwrite the run directory's other checkpoints.
    here = f"{cfg.sweep.output}/{cfg.sweep.name}"
    cfg = replace(cfg, run=replace(cfg.run, root=str(Path(cfg.run.root).expanduser().resolve())),
                  corpus=replace(cfg.corpus, dir=str(Path(cfg.corpus.dir).expanduser().resolve())),
                  pretrain=replace(cfg.pretrain, output=f"{here}/checkpoints"),
                  specialize=replace(cfg.specialize, output=f"{here}/specialized"))
    p = plan_sweep(cfg)
    log.info(format_plan(p))
    out = sweep_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    p = replace(p, data=data_digests(cfg, p),
                kernels={f"{name}.train.numerics": kernels(section.train.numerics)
                         for name, section in (("pretrain", cfg.pretrain), ("specialize", cfg.specialize))})
    atomic_write_json(out / "plan.json", p.to_json())
    init_ray(cfg.ray)
    check_device_share(cfg, p)
    pretrain_all(cfg, p.runs)
    layout = RunLayout.of(cfg)
    for run in p.runs:
        output = layout.pretrained(run.name)
        missing = [s for s in run.snapshots if not output.snapshot(s).exists()]
        if missing:  # fail here, not in every trial that would start from them
            raise RuntimeError(f"sweep: pretraining run {run.name} finished without snapshots at steps {missing} "
                               f"in {output.snapshots}; delete {output.dir} and rerun")
    write_curves(p.runs, layout, out)
    for domain in sorted({t.domain for t in p.trials}):  # the arrays trials read, made once
        packed_arrays(RunLayout.of(cfg), f"domain/{domain}")
    results, failed = [], []
    for wave, trials in p.waves():
        rows, errors = run_wave(cfg, trials, wave, {r.name: r for r in p.runs}, out)
        results += rows
        failed += errors
        if failed:  # a later wave reads this one's models
            break
    # a method without its own setting trained at the spec's (and a row kept from before says none)
    spec_values = {k: setting_of(cfg, k) for settings in cfg.sweep.per_method.values() for k in settings}
    for r in results:
        for key, value in spec_values.items():
            r.setdefault(key, value)
    table = write_table(results, out)
    if results:
        write_hparams(results, out / "tensorboard")
        tracking = tracked(cfg.specialize.train, cfg).tracking
        if "mlflow" in cfg.specialize.train.loggers:  # the trials' own runs are there: the table beside them
            experiment = f"{tracking.experiment}: {cfg.sweep.name} results"
            write_mlflow(results, tracking.mlflow_uri, experiment)
            log.info(f"[sweep] results table in MLflow: experiment {experiment!r} at {tracking.mlflow_uri} "
                     "(select its runs, Compare)")
    log.info(f"[sweep] {len(results)} of {len(p.trials)} trials finished; results in {table}")
    if failed:  # the table keeps what finished; the stage fails so that scripts and CI see it
        raise RuntimeError(f"sweep: {len(failed)} trials failed (the results table holds the {len(results)} of "
                           f"{len(p.trials)} that finished; rerun the same command to retry only them). "
                           f"First error:\n{failed[0][-2000:]}")
    return {"trials": len(p.trials), "finished": len(results), "failed": len(failed), "results": str(table)}
