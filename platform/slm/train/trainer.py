"""The driver side: turn a job's ``pretrain`` / ``specialize`` section into a worker spec and run it
on Ray Train's ``TorchTrainer``.

Outputs of a run named N: ``<run dir>/checkpoints/N/`` (pretraining) or
``<run dir>/specialized/<domain>/N/`` (specialization), each holding ``model.safetensors``,
``summary.json``, ``logs/metrics.jsonl``, ``logs/tensorboard/`` and ``manifest.json`` (complete last).
Ray Train's own state (checkpoints, the checkpoint manager's snapshot) lives inside the output, in
``ray_train/N-<spec hash>/`` (``local_train/N-<spec hash>/`` for a run in this process,
``train.num_workers: 0``): running the same stage again with the same config resumes from its latest
checkpoint; a complete manifest with the same hash skips the stage. Deleting the output folder starts
the run afresh — checkpoints kept elsewhere would resume a run whose logs and snapshots are gone.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from pathlib import Path

import numpy as np
import ray
import torch
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.tune.integration.ray_train import TuneReportCallback

from slm import methods
from slm.artifacts import atomic_path, file_sha256, forget_stale, is_complete, read_manifest, write_manifest
from slm.config import ConfigError, config_hash
from slm.data import histogram
from slm.layout import RunLayout, TrainOutput, branch_name, require
from slm.log import logger
from slm.methods.base import Method
from slm.models.config import ModelConfig
from slm.models.gpt import GPTConfig, preset, save_dense
from slm.runtime import RayConfig, cluster_address, init_ray
from slm.train import integrity, numerics
from slm.train.budget import dense_flops_per_token
from slm.train.config import (
    BudgetConfig,
    PretrainConfig,
    SpecializeConfig,
    TeacherConfig,
    TrainConfig,
    TrainJob,
    cooldown_branches,
)
from slm.train.data import materialize, packed_arrays, valid_arrays
from slm.train.hardware import worker_precision
from slm.train.loop import train_here, train_worker
from slm.train.rendezvous import torch_config
from slm.train.spec import WorkerSpec

log = logger(__name__)


class TrainingInputError(ConfigError):
    """A training stage's inputs do not fit its config: the message names the key or file."""


# ----------------------------------------------------------------------------------------- inputs


def coarse_histograms(cfg: TrainJob) -> dict[str, list[float]]:
    """Each domain's histogram over the coarse clusters (``slm.data.histogram.coarse_histograms``)."""
    layout = RunLayout.of(cfg)
    return histogram.coarse_histograms(require(layout.clusters_json, "cluster"),
                                       require(layout.histograms_json, "histogram"))


def gpt_config(model_cfg, vocab: int, seq_len: int):
    """The GPT a ``pretrain.model`` section describes: its size (depth and width, or a preset) and its
    parametrization."""
    shape = {"vocab_size": vocab, "seq_len": seq_len, "parametrization": model_cfg.parametrization,
             "mup_base_width": model_cfg.mup_base_width, "mup_base_depth": model_cfg.mup_base_depth}
    if model_cfg.depth:
        width = {"d_model": model_cfg.width, "n_head": model_cfg.width // 64, "d_ff": 4 * model_cfg.width} \
            if model_cfg.width else {}
        cfg = GPTConfig.from_depth(model_cfg.depth, **shape, **width)
        cfg.validate()
        return cfg
    return preset(model_cfg.preset, **shape)


# ----------------------------------------------------------------------------------------- Ray Train


def check_fits(train: TrainConfig, key: str, cluster: dict[str, float]) -> None:
    """Fail, naming the keys and the numbers, when a fixed cluster cannot hold the run's workers."""
    if train.use_gpu:
        asked, have, what = train.num_workers * train.gpus_per_worker, cluster.get("GPU", 0), "GPUs"
    else:
        asked, have, what = train.num_workers * train.cpus_per_worker, cluster.get("CPU", 0), "CPUs"
    if asked > have:
        raise TrainingInputError(
            f"config keys '{key}.num_workers' × '{key}.cpus_per_worker': the run asks for {asked:g} {what} "
            f"({train.num_workers} workers) and this Ray has {have:g}; lower them, or set ray.num_cpus / "
            "connect to a larger cluster")


def fit(spec: WorkerSpec, train: TrainConfig, storage: Path, ray_name: str) -> dict:
    """Run ``train_worker(spec)`` on a TorchTrainer; return rank 0's summary."""
    resources = {"CPU": train.cpus_per_worker, "GPU": train.gpus_per_worker} if train.use_gpu \
        else {"CPU": train.cpus_per_worker}
    integrity.set_aside_stale_record(storage.resolve() / ray_name, lambda m: log.info(f"[train] {m}"))
    trainer = TorchTrainer(
        train_worker,
        train_loop_config={"spec": spec},
        torch_config=torch_config("nccl" if train.use_gpu else "gloo"),  # on the loopback when local
        scaling_config=ScalingConfig(num_workers=train.num_workers, use_gpu=train.use_gpu,
                                     resources_per_worker=resources),
        run_config=RunConfig(
            name=ray_name, storage_path=str(storage.resolve()),
            failure_config=FailureConfig(max_failures=train.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=max(1, train.keep_checkpoints)),
            callbacks=_tune_callbacks(),
        ),
    )
    trainer.fit()  # raises TrainingFailedError once max_failures is spent
    return json.loads(TrainOutput(Path(spec.output)).summary.read_text())


def fit_here(spec: WorkerSpec, train: TrainConfig, folder: Path) -> dict:
    """Run the loop in this process, without Ray Train (``train.num_workers: 0``); return its summary."""

    # A process that trains run after run (a sweep's pretraining) would otherwise pile every run's graphs
    # into Dynamo's per-function cache, whose limit makes it fall back to eager without failing; each run
    # compiles afresh instead (from Inductor's on-disk cache: seconds).
    torch._dynamo.reset()
    train_here(spec, folder, train.keep_checkpoints)
    return json.loads(TrainOutput(Path(spec.output)).summary.read_text())


def _tune_callbacks() -> list:
    """Inside a Tune trial (a sweep), forward Ray Train's reports to Tune so schedulers see them."""
    try:
        return [TuneReportCallback()]
    except RuntimeError:  # "must be used in a Tune session": a plain run
        return []


def _run(kind: str, spec: WorkerSpec, output: TrainOutput, ray_cfg: RayConfig, extra: dict) -> dict:
    """Train ``spec`` (skipped when its manifest is complete and current) and write the manifest:
    the summary and ``extra``, what the driver knows of the run (costs it inherits, parameters, …)."""
    digest = config_hash(spec)
    out, train = output.dir, spec.train
    if is_complete(out, digest):
        log.info(f"[train] {spec.name}: complete and current in {out}, skipped")
        return read_manifest(out)
    run_name = f"{spec.name.replace('/', '-')}-{digest[:8]}"
    started = time.perf_counter()
    if train.num_workers:
        init_ray(ray_cfg)
        # The embedded local Ray never grows: workers it cannot place would be waited for forever. A
        # cluster may autoscale, so there Ray Train waits, as it should.
        if cluster_address(ray_cfg) is None:
            check_fits(train, spec.config_key, ray.cluster_resources())
        summary = fit(spec, train, output.ray_train(), run_name)
    else:
        summary = fit_here(spec, train, output.local_train(run_name))
    manifest = {"stage": kind, "config_hash": digest, **summary, **extra,
                "wall_seconds": round(time.perf_counter() - started, 1),
                "model": str(output.model)}
    return write_manifest(out, manifest, written=lambda rel: _written_by(rel, run_name))


def _written_by(rel: str, run_name: str) -> bool:
    """Whether this run wrote the file at ``rel`` (relative to its output folder): everything but the
    checkpoints of an earlier run under another configuration, which the folder's manifest recorded and
    which must still be what it recorded (a run resumed from its own checkpoints verified them first)."""
    storage, _, rest = rel.partition("/")
    if storage not in ("local_train", "ray_train"):
        return True
    return rest.startswith(f"{run_name}/")


def tracked(train: TrainConfig, cfg: TrainJob) -> TrainConfig:
    """MLflow's default store: a file store, ``mlruns/`` in the run directory (absolute: workers run
    elsewhere). A tracking server or database is a ``tracking.mlflow_uri`` away (docs/usage.md)."""
    if "mlflow" not in train.loggers or train.tracking.mlflow_uri:
        return train
    uri = RunLayout.of(cfg).mlruns.expanduser().resolve().as_uri()
    return dataclasses.replace(train, tracking=dataclasses.replace(train.tracking, mlflow_uri=uri))


def _teacher(teacher: TeacherConfig) -> TeacherConfig:
    """The teacher section for the workers, its checkpoint path made absolute (workers run elsewhere)."""
    if not teacher.checkpoint:
        return teacher
    return dataclasses.replace(teacher, checkpoint=str(Path(teacher.checkpoint).expanduser().resolve()))


def check_precision(train: TrainConfig, section: str, cfg: TrainJob) -> None:
    """The precision, checked on the driver when the workers will run on this machine (CPU workers on
    an embedded Ray), so that a bf16 run on a CPU without it fails before Ray starts."""
    if not train.use_gpu and cluster_address(cfg.ray) is None:
        worker_precision(train, "cpu", f"{section}.train.precision")


# ----------------------------------------------------------------------------------------- stages


def pin_here(train: TrainConfig, section: str) -> None:
    """A run whose loop is this process (``num_workers: 0``: a sweep's task or trial, ``slm train``): its
    numerics pinned before this process computes anything for it — building the model, instantiating a domain's
    expert from the source — not only when the loop starts (``slm.train.numerics.pin``; Ray Train's workers pin
    themselves)."""
    if not train.num_workers:
        numerics.pin(train.numerics, f"{section}.train.numerics")


def pretrain_data(cfg: TrainJob) -> Path:
    """The arrays a pretraining run reads: ``pretrain.data``, or the packed set its method pretrains on
    (for ``pretrain.domain``, default ``resample.domain``, when the method chooses its set per domain),
    made from the packed Parquet files on first use."""
    if cfg.pretrain.data:
        return materialize(cfg.pretrain.data)
    domain = cfg.pretrain.domain or cfg.resample.domain
    return packed_arrays(RunLayout.of(cfg), methods.get(cfg.pretrain.method).pretrain_set(domain))


def pretrain_spec(cfg: TrainJob) -> tuple[Method, WorkerSpec, TrainOutput]:
    """A pretraining run as its worker receives it (the bound method, the spec, its output folder); the spec's
    hash is the run's identity: what makes its model — its own method's settings, its data, its training —
    and nothing of other methods' (issue 65: registering or changing a method left every other run current)."""
    p: PretrainConfig = cfg.pretrain
    method = methods.get(p.method).bind(p.model)
    data = pretrain_data(cfg)
    seq_len = int(np.load(data / "tokens.npy", mmap_mode="r").shape[1]) - 1
    n_clusters = RunLayout.of(cfg).cluster_info()["k"] if method.clustered else 1
    method.check(n_clusters, f"pretrain.model.{method.name}.")
    arch = method.architecture(gpt_config(p.model, RunLayout.of(cfg).vocab_size(), seq_len), n_clusters)
    output = RunLayout.of(cfg).pretrained(p.run_name)
    check_precision(p.train, "pretrain", cfg)
    branched = branched_budgets(p)
    spec = WorkerSpec(name=p.run_name, config_key="pretrain.train", output=str(output.dir.resolve()),
                      train=tracked(p.train, cfg),
                      arch=arch, data=str(data), valid=valid_arrays(RunLayout.of(cfg), list(cfg.corpus.domains)),
                      model=p.model.own(p.method), teacher=_teacher(p.teacher), selection=p.selection,
                      snapshot_steps=sorted(set(p.snapshot_steps) - set(branched)),
                      branch_points=sorted({p.train.optim.decay_start(b) for b in branched}),
                      domain_h=coarse_histograms(cfg) if method.clustered else {},
                      tensorboard=str(RunLayout.of(cfg).tensorboard("pretrain", p.run_name).resolve()))
    return method, spec, output


def pretrain(cfg: TrainJob) -> dict:
    p: PretrainConfig = cfg.pretrain
    pin_here(p.train, "pretrain")
    method, spec, output = pretrain_spec(cfg)
    arch, data, branched = spec.arch, Path(spec.data), branched_budgets(p)
    if p.teacher.checkpoint:
        if not Path(p.teacher.checkpoint).exists():
            raise TrainingInputError(f"config key 'pretrain.teacher.checkpoint': {p.teacher.checkpoint} does not exist")
    elif p.selection.enabled:
        raise TrainingInputError("config key 'pretrain.selection.enabled': SALT-DS scores with the teacher; "
                                 "set pretrain.teacher.checkpoint")
    with torch.device("meta"):
        params = sum(t.numel() for t in method.build(arch).parameters())
    extra = {"params": params, "data": str(data), "inference_flops_per_token": _inference_flops(arch)}
    if p.teacher.checkpoint:
        extra["teacher_cost"] = teacher_cost(Path(p.teacher.checkpoint))
    manifest = _run("pretrain", spec, output, cfg.ray, extra)
    for budget in branched:
        _branch(spec, budget, output, cfg, extra)
    if branched:  # the branches' models and the snapshot index, recorded with the rest of the trunk's files
        manifest = write_manifest(output.dir, manifest, written=lambda rel: rel.startswith("snapshots/"))
    return manifest


def branched_budgets(p: PretrainConfig) -> list[int]:
    """The budgets a WSD run trains as cooldown branches: its snapshot steps below its own length, each
    of whose decay starts after the warm-up (a branch's steps before its decay must be the trunk's)."""
    optim = p.train.optim
    if optim.schedule != "wsd" or not p.snapshot_steps:
        return []
    if not p.train.budget.steps:
        raise TrainingInputError("config key 'pretrain.train.budget.steps': a WSD run with snapshot_steps (cooldown "
                                 "branches) needs a step budget: its trunk's length")
    budget_steps = p.train.budget.steps
    beyond = sorted(s for s in p.snapshot_steps if s > budget_steps)
    if beyond:
        raise TrainingInputError(f"config key 'pretrain.snapshot_steps': {beyond} are beyond the run's "
                                 f"{budget_steps} steps (pretrain.train.budget.steps)")
    early = sorted(s for s in {*p.snapshot_steps, budget_steps} if optim.decay_start(s) < optim.warmup_steps)
    if early:
        raise TrainingInputError(
            f"config key 'pretrain.snapshot_steps': under schedule wsd the budgets {early} would start their decay "
            f"(decay_fraction {optim.decay_fraction}) before the warm-up's {optim.warmup_steps} steps end; "
            f"raise them or lower pretrain.train.optim.warmup_steps")
    return list(cooldown_branches(p.snapshot_steps, budget_steps))


def _branch(trunk: WorkerSpec, budget: int, output: TrainOutput, cfg: TrainJob, extra: dict) -> dict:
    """Budget ``budget`` of a WSD trunk, fully trained: a run of ``budget`` steps that starts from the
    trunk's state at its decay start (where a separate run of that length would be, bit for bit) and
    decays to its end; its own folder, checkpoints and resume, skipped when complete and current. Its model
    becomes the trunk's snapshot at ``budget``, with the cost a run of that budget pays (the trunk's steps
    before the branch point included) and, apart, what the branch itself added (``branch_cost``)."""
    point = trunk.train.optim.decay_start(budget)
    start, branch = output.branch_point(point), output.branch(budget)
    if not (start.is_dir() and integrity.problem(start) is None):
        raise TrainingInputError(f"pretrain {trunk.name}: budget {budget} branches from the trunk's state at step "
                                 f"{point}, which {start} does not hold whole; the trunk must train again "
                                 f"(delete {output.dir} and rerun)")
    name = branch_name(trunk.name, budget)
    spec = dataclasses.replace(
        trunk, name=name, output=str(branch.dir.resolve()), snapshot_steps=[], branch_points=[],
        train=dataclasses.replace(trunk.train, budget=BudgetConfig(steps=budget)), start_from=str(start.resolve()),
        tensorboard=str(RunLayout.of(cfg).tensorboard("pretrain", name).resolve()))
    m = _run("pretrain-branch", spec, branch, cfg.ray, {**extra, "trunk": trunk.name, "branch_point": point})
    at_point = torch.load(start / "worker-0.pt", weights_only=True)["progress"]
    with atomic_path(output.snapshot(budget)) as tmp:
        shutil.copyfile(branch.model, tmp)
    output.record_snapshot(budget, {
        "model": str(output.snapshot(budget)), "step": budget, "tokens": m["tokens"], "cost": m["cost"],
        "branch": str(branch.dir), "branch_point": point,
        "branch_cost": {k: m["cost"][k] - at_point[k] for k in ("flops", "device_seconds")}})
    return m


def _inference_flops(arch: methods.Architecture) -> int:
    return dense_flops_per_token(arch.gpt, training=False)


def teacher_cost(model_path: Path) -> dict:
    """What a teacher cost to make: its folder's manifest (pretraining + specialization), if any."""
    m = read_manifest(model_path.parent) or {}
    total = {"flops": 0.0, "device_seconds": 0.0}
    for key in ("pretrain_cost", "cost"):
        for k in total:
            total[k] += (m.get(key) or {}).get(k, 0.0)
    return total


def resolve_source(cfg: TrainJob, s: SpecializeConfig) -> Path:
    source = s.source or cfg.pretrain.run_name
    path = Path(source) if source.endswith(".safetensors") else RunLayout.of(cfg).pretrained(source).model
    if not path.exists():
        raise TrainingInputError(f"config key 'specialize.source': {path} does not exist "
                                 f"(run the pretrain stage for {source!r} first, or give a model.safetensors)")
    return path


def domain_subset(arrays: Path, tokens: int, seed: int, where: str) -> np.ndarray:
    """The in-domain data budget: the first ⌈tokens / seq_len⌉ sequences of a seeded permutation."""
    data = np.load(arrays / "tokens.npy", mmap_mode="r")
    seq_len = data.shape[1] - 1
    need = math.ceil(tokens / seq_len)
    if need > len(data):
        raise TrainingInputError(f"config key 'specialize.domain_tokens': {tokens} tokens asked but {where} holds "
                                 f"{len(data)} sequences ({len(data) * seq_len} tokens)")
    return np.sort(np.random.default_rng(seed).permutation(len(data))[:need])


def specialize(cfg: TrainJob) -> dict:
    s: SpecializeConfig = cfg.specialize
    pin_here(s.train, "specialize")
    domain = s.domain or cfg.resample.domain
    source = resolve_source(cfg, s)
    name = s.name or source.parent.name
    layout = RunLayout.of(cfg)
    output = layout.specialized(domain, name)
    hist = coarse_histograms(cfg)
    if domain not in hist:
        raise TrainingInputError(f"config key 'specialize.domain': no histogram for {domain!r} "
                                 f"(domains with one: {sorted(hist)})")
    model, arch = methods.load_model(source)
    try:
        dense, chosen = methods.get(arch.method).instantiate(model, arch, hist[domain],
                                                                None if s.expert < 0 else s.expert)
    except ValueError as err:
        if s.expert < 0:
            raise
        raise TrainingInputError(f"config key 'specialize.expert' ({s.expert}): {err}") from err
    output.dir.mkdir(parents=True, exist_ok=True)
    init = output.init
    save_dense(dense, init, {"method": arch.method, "source": str(source), **chosen})
    arrays = packed_arrays(RunLayout.of(cfg), f"domain/{domain}")
    rows = domain_subset(arrays, s.domain_tokens, s.train.seed, str(layout.packed_domain(domain)))
    rows_path = output.rows
    np.save(rows_path, rows)
    forget_stale(output.dir)  # a trial made here before from another source recorded its own init and rows
    if s.teacher.checkpoint and not Path(s.teacher.checkpoint).exists():
        raise TrainingInputError(f"config key 'specialize.teacher.checkpoint': {s.teacher.checkpoint} does not exist")
    check_precision(s.train, "specialize", cfg)
    spec = WorkerSpec(name=f"{domain}/{name}", config_key="specialize.train", output=str(output.dir.resolve()),
                      train=tracked(s.train, cfg), arch=methods.dense_record(arch.gpt), data=str(arrays),
                      model=ModelConfig().own(None),  # a dense model fine-tuned: no method's settings
                      valid=valid_arrays(RunLayout.of(cfg), [domain]), teacher=_teacher(s.teacher), lora=s.lora,
                      init=str(init.resolve()), init_sha=file_sha256(init), rows=str(rows_path.resolve()),
                      tensorboard=str(layout.tensorboard("specialize", f"{domain}/{name}").resolve()))
    pre = read_manifest(source.parent) or {}
    extra = {"method": arch.method, "domain": domain, "source": str(source), "source_method": arch.method,
             "instantiated": chosen, "domain_tokens": s.domain_tokens, "domain_sequences": int(len(rows)),
             "pretrain_cost": pre.get("cost", {"flops": 0.0, "device_seconds": 0.0}),
             "inference_flops_per_token": dense.flops_per_token(training=False),
             "params": dense.num_params()}
    if s.teacher.checkpoint:
        extra["teacher_cost"] = teacher_cost(Path(s.teacher.checkpoint))
    return _run("specialize", spec, output, cfg.ray, extra)
