"""`slm sweep SPEC --dry-run --probe`: the wall time a sweep (or a study's part) will take on this machine,
from a short measured probe rather than an assumed MFU.

The probe runs the real training loop (``slm.train.loop.TrainLoop``: the method's model, the spec's batch,
precision, compilation, threads and callbacks) on random tokens, for each (method, size) the plan
pretrains and each size it specializes, in as many processes at once as the sweep runs (two single-thread
runs share two cores: each is slower than alone, and that is what the sweep sees). Each item measures the
steady seconds per step, the evaluation's tokens per second, the set-up (building the model, and for a
trial loading the model it starts from) and writing the model. A Tune probe measures what Tune adds per
trial (scheduling, the trial's process, its results) with trials that do nothing.

The estimate then replays the plan: pretraining runs in plan order on the slots Ray gives them (a SALT
run after its teacher), each costing set-up + steps × step + evaluations (before, every ``eval_every``,
at the end, over each valid domain's ``eval_tokens``) + KD forwards + checkpoints and snapshots; then the
trials wave by wave on ``concurrency`` slots, each costing Tune's overhead + set-up + steps + an
evaluation before and after. The data stages are not estimated (a part's are minutes: docs/results.md).
How close it comes is measured against a real part (benchmarks/results/study/).
"""

from __future__ import annotations

import heapq
import json
import multiprocessing
import os
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from slm import methods
from slm.layout import RunLayout, TrainOutput
from slm.models.config import size_config
from slm.records.plan import Plan
from slm.train.config import BudgetConfig, TrainConfig
from slm.train.trainer import gpt_config
from slm.tune.config import SweepJob

PROBE_STEPS = 12  # steps timed per item, after WARMUP_STEPS (compiled runs compile in those)
WARMUP_STEPS = 3
PROBE_EVAL_TOKENS = 16384  # per valid domain, for the evaluation rate


@dataclass(frozen=True)
class ProbeItem:
    """One thing to time: a pretraining run's model (or a trial's dense model) at the spec's settings."""

    key: str  # "pretrain:<method>:<size>" or "specialize:<size>"
    method: str
    size: str
    section: str  # "pretrain" or "specialize"


@dataclass(frozen=True)
class Rate:
    """What a probe measured for one item, with ``slots`` probes running at once."""

    step_s: float  # median seconds per optimizer step after the warm-up
    eval_tokens_per_s: float  # evaluation (forward only, every valid domain)
    setup_s: float  # model built (compiled), ready to train
    save_s: float  # the model written


def probe_items(plan: Plan) -> list[ProbeItem]:
    items = {f"pretrain:{r.method}:{r.size}": ProbeItem(f"pretrain:{r.method}:{r.size}", r.method, r.size, "pretrain")
             for r in plan.runs}
    items |= {f"specialize:{t.size}": ProbeItem(f"specialize:{t.size}", methods.BASELINE, t.size, "specialize")
              for t in plan.trials}
    return list(items.values())


def _synthetic(folder: Path, rows: int, seq_len: int, vocab: int, k: int, seed: int) -> str:
    """Packed arrays of random tokens (the format ``slm.train.data.materialize`` writes)."""
    from slm.artifacts import write_manifest

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "tokens.npy", rng.integers(0, vocab, (rows, seq_len + 1), dtype=np.int32))
    coarse = rng.integers(0, k, rows, dtype=np.int32)
    np.save(folder / "coarse.npy", coarse)
    np.save(folder / "leaf.npy", coarse)
    write_manifest(folder, {"stage": "arrays", "rows": rows, "width": seq_len + 1, "fingerprint": "synthetic"})
    return str(folder)


def _measure(cfg: SweepJob, vocab: int, item: ProbeItem, work: Path) -> Rate:
    """Time one item with the real loop, in this process."""
    import torch

    from slm.train.loop import TrainLoop
    from slm.train.session import LocalSession
    from slm.train.spec import WorkerSpec

    section = cfg.pretrain if item.section == "pretrain" else cfg.specialize
    seq_len, k = cfg.pack.seq_len, cfg.cluster.k
    size = size_config(item.size)
    model = replace(cfg.pretrain.model, depth=size.depth, width=size.width, preset=size.preset)
    arch = methods.get(item.method).bind(model).architecture(gpt_config(model, vocab, seq_len), k)
    steps = WARMUP_STEPS + PROBE_STEPS
    train: TrainConfig = replace(section.train, budget=BudgetConfig(steps=steps), eval_every=0, checkpoint_every=0,
                                 log_every=1, loggers=[], eval_tokens=PROBE_EVAL_TOKENS)
    data = _synthetic(work / "data", max(64, train.batch_size * 4), seq_len, vocab, k, 0)
    valid = {d: _synthetic(work / f"valid-{d}", PROBE_EVAL_TOKENS // seq_len, seq_len, vocab, k, 1 + i)
             for i, d in enumerate(cfg.corpus.domains)}
    histogram = {d: [1.0 / k] * k for d in cfg.corpus.domains}
    spec = WorkerSpec(name=f"probe {item.key}", config_key=f"{item.section}.train", output=str(work / "out"),
                      train=train, arch=arch, data=data, valid=valid, model=model,
                      domain_h=histogram if methods.get(item.method).clustered else {})
    torch.set_num_threads(train.torch_threads)
    started = time.perf_counter()
    loop = TrainLoop(spec, LocalSession(work / "checkpoints", 1))
    setup = time.perf_counter() - started
    loop.run_evaluation()  # the first pass pays one-off costs (allocations, lazy kernels): timed is the second
    started = time.perf_counter()
    loop.run_evaluation()
    eval_s = time.perf_counter() - started
    loop.valid = {}  # the fit below times the steps alone
    started = time.perf_counter()
    loop.fit()
    fit_s = time.perf_counter() - started
    walls = [json.loads(line)["wall_time"] for line in TrainOutput(work / "out").metrics.read_text().splitlines()
             if '"wall_time"' in line]
    step_s = float(np.median(np.diff(walls[WARMUP_STEPS:]))) if len(walls) > WARMUP_STEPS + 1 else fit_s / steps
    save_s = max(0.0, fit_s - (walls[-1] - walls[0]) - step_s * 1) if len(walls) > 1 else 0.0
    return Rate(step_s, len(valid) * (PROBE_EVAL_TOKENS // seq_len) * seq_len / eval_s, setup, save_s)


def _probe_process(cfg: SweepJob, vocab: int, items: list[ProbeItem], root: str) -> dict[str, dict]:
    import sys

    out = {}
    # The loop's progress lines, a step each here, would bury the plan: the estimate is what is printed.
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (this spawned process's stdout for its lifetime)
    for item in items:
        with tempfile.TemporaryDirectory(dir=root) as work:
            out[item.key] = asdict(_measure(cfg, vocab, item, Path(work)))
    return out


def probe(cfg: SweepJob, plan: Plan, slots: int) -> dict[str, Rate]:
    """Every item of the plan timed in ``slots`` processes at once; the mean of the processes' rates."""
    from slm.tune.sweep import _vocab_and_seq_len

    vocab = _vocab_and_seq_len(cfg)[0]
    items = probe_items(plan)
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="slm-probe-") as root, context.Pool(slots) as pool:
        results = pool.starmap(_probe_process, [(cfg, vocab, items, root)] * slots)
    return {i.key: Rate(*(float(np.mean([r[i.key][f] for r in results])) for f in Rate.__dataclass_fields__))
            for i in items}


def _noop_trial(config: dict) -> None:
    from ray import tune

    tune.report({"done": 1})


def tune_overhead(slots: int, cpus: float) -> dict:
    """Seconds Tune adds per trial slot-turn and per wave, from no-op trials: two runs of ``slots`` × 2
    and × 4 trials; the difference is two more turns of every slot."""
    import logging

    from ray import tune
    from ray.tune import RunConfig, TuneConfig, Tuner

    # Trials that report nothing of note: Tune's analysis warns that it found no metrics files for them.
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    walls = {}
    with tempfile.TemporaryDirectory(prefix="slm-probe-tune-") as storage:
        for turns in (2, 4):
            started = time.perf_counter()
            Tuner(tune.with_resources(_noop_trial, {"cpu": cpus}),
                  param_space={"i": tune.grid_search(list(range(slots * turns)))},
                  tune_config=TuneConfig(max_concurrent_trials=slots),
                  run_config=RunConfig(storage_path=storage, name=f"probe{turns}", verbose=0)).fit()
            walls[turns] = time.perf_counter() - started
    per_turn = max(0.0, (walls[4] - walls[2]) / 2)
    return {"per_trial_s": per_turn, "per_wave_s": max(0.0, walls[2] - 2 * per_turn)}


def valid_tokens(cfg: SweepJob) -> dict[str, int | None]:
    """The valid tokens of each domain a run evaluates (``corpus.domains``), as packed; before the pack
    stage has run, every domain with None. A run evaluates the domains that are packed."""
    out = {}
    for d in cfg.corpus.domains:
        manifest = RunLayout.of(cfg).packed_valid(d) / "manifest.json"
        out[d] = json.loads(manifest.read_text())["tokens"] if manifest.exists() else None
    packed = {d: t for d, t in out.items() if t is not None}
    return packed or out


def _eval_tokens(train: TrainConfig, valid: dict[str, int | None]) -> int:
    """Tokens one evaluation reads: at most ``eval_tokens`` of each domain (0: all of it; a domain not
    packed yet counts ``eval_tokens``)."""
    total = 0
    for tokens in valid.values():
        whole = tokens if tokens is not None else train.eval_tokens
        total += min(whole, train.eval_tokens) if train.eval_tokens else whole
    return total


def _schedule(durations: list[tuple[str, float, str | None]], slots: int) -> float:
    """List scheduling in the given order on ``slots`` slots (a job with a dependency starts after it
    ends); the makespan."""
    free = [0.0] * slots
    heapq.heapify(free)
    ended: dict[str, float] = {}
    for name, duration, after in durations:
        start = max(heapq.heappop(free), ended.get(after, 0.0) if after else 0.0)
        ended[name] = start + duration
        heapq.heappush(free, ended[name])
    return max(ended.values(), default=0.0)


def estimate(cfg: SweepJob, plan: Plan, rates: dict[str, Rate], tune: dict, slots: int,
             trial_slots: int | None = None) -> dict:
    """The plan replayed with the measured rates: seconds of pretraining, of trials, and in all; trials on
    ``trial_slots`` (default ``slots``)."""
    p, s = cfg.pretrain.train, cfg.specialize.train
    valid = valid_tokens(cfg)
    runs = []
    small = f"pretrain:{methods.BASELINE}:{plan.small}"
    for r in plan.runs:
        rate = rates[f"pretrain:{r.method}:{r.size}"]
        every = r.eval_every or p.eval_every  # as slm.tune.sweep.run_config sets it
        periodic = r.steps // every if every else 0
        evals = 1 + periodic + (0 if every and r.steps % every == 0 else 1)  # before, every `every`, at the end
        saves = len(r.snapshots) + (r.steps // p.checkpoint_every if p.checkpoint_every else 0) + 1
        # WSD: each cooldown branch is a run of its own (set-up, its decay's steps, an evaluation at its end
        # and those its decay crosses), and its branch point a save of the trunk's state
        evals += len(r.branches) + (r.branch_steps // every if every else 0)
        saves += 2 * len(r.branches) + (r.branch_steps // p.checkpoint_every if p.checkpoint_every else 0)
        # SALT: the small teacher's forward on each KD step, at its evaluation rate.
        kd = r.kd_steps * p.batch_size * cfg.pack.seq_len / rates[small].eval_tokens_per_s if r.teacher else 0.0
        seconds = ((1 + len(r.branches)) * rate.setup_s + (r.steps + r.branch_steps) * rate.step_s
                   + evals * _eval_tokens(p, valid) / rate.eval_tokens_per_s
                   + saves * rate.save_s + kd)
        runs.append((r.name, seconds, r.teacher))
    pretrain_s = _schedule(runs, slots)
    trials_s, per_trial = 0.0, {}
    for _, trials in plan.waves():
        durations = []
        for t in trials:
            rate = rates[f"specialize:{t.size}"]
            own = {t.domain: valid.get(t.domain)}  # a trial evaluates its own domain
            seconds = (tune["per_trial_s"] + rate.setup_s + t.specialize_steps * rate.step_s
                       + 2 * _eval_tokens(s, own) / rate.eval_tokens_per_s + rate.save_s)
            if t.teacher:  # the teacher's forward on every step
                seconds += (t.specialize_steps * s.batch_size * cfg.pack.seq_len
                            / rates[f"specialize:{plan.large}"].eval_tokens_per_s)
            per_trial[t.name] = seconds
            durations.append((t.name, seconds, None))
        trials_s += tune["per_wave_s"] + _schedule(durations, trial_slots or slots)
    return {"pretrain_s": pretrain_s, "trials_s": trials_s, "total_s": pretrain_s + trials_s,
            "mean_trial_s": float(np.mean(list(per_trial.values()))) if per_trial else 0.0,
            "valid_tokens": valid, "slots": slots}


def probe_and_estimate(cfg: SweepJob, plan: Plan, nodes: int = 1, gpus: tuple[int, ...] = (),
                       gpu_rates: dict | None = None) -> dict:
    """The probe (``slots`` = the cores ÷ a run's CPUs, as the sweep schedules), Tune's overhead, the
    estimate; with what was measured, so that a later check can see where it was off. ``nodes`` > 1: the same
    plan also replayed on that many machines like this one (``slots`` each: the sweep places runs and trials on
    any node, issue 66), beside the one-machine estimate; what moving models and data between nodes costs is not
    in it. ``gpus`` with ``gpu_rates`` (a GPU's measured step times, ``benchmarks/gpu.py``'s JSON): the plan
    replayed on each count of such GPUs (``on_gpus``)."""
    from slm.runtime import init_ray

    cpus = os.cpu_count() or 1
    slots = max(1, int(cpus // max(cfg.pretrain.train.cpus_per_worker, 1)))
    started = time.perf_counter()
    rates = probe(cfg, plan, slots)
    init_ray(cfg.ray)
    tune = tune_overhead(slots, cfg.specialize.train.cpus_per_worker)
    result = estimate(cfg, plan, rates, tune, slots)
    if nodes > 1:
        cluster = estimate(cfg, plan, rates, tune, slots * nodes)
        result["cluster"] = {"nodes": nodes, **{k: cluster[k] for k in ("pretrain_s", "trials_s", "total_s")}}
    if gpus:
        result["gpus"] = on_gpus(cfg, plan, rates, tune, gpu_rates or {}, gpus)
    return {**result, "rates": {k: asdict(v) for k, v in rates.items()}, "tune": tune,
            "probe_s": time.perf_counter() - started}


EVAL_SPEEDUP = 3.0  # an evaluation's forward per token ÷ a training step's (forward + backward) per token: assumed


def gpu_step_rates(cfg: SweepJob, host: dict[str, Rate], measured: dict, share: int) -> dict[str, Rate]:
    """Each probe item's rate on a GPU from its measured step times (``benchmarks/gpu.py``'s ``study_sizes``:
    generic models at the study's sizes, a step's seconds by precision). Every method at a size is taken at the
    generic model's step there, an evaluation's token at 1/``EVAL_SPEEDUP`` of a step's, and the set-up and saves
    at this machine's (the host's work); ``share`` runs to a device that split its time (1: each as if alone)."""
    sizes = measured.get("study_sizes") or {}
    shape = (sizes.get("batch"), sizes.get("seq_len"), sizes.get("vocab"))
    want = (cfg.pretrain.train.batch_size, cfg.pack.seq_len, cfg.tokenizer.vocab_size)
    if shape != want:
        raise SystemExit(f"slm sweep --gpu-rates: its step times were measured at batch × sequence × vocabulary "
                         f"{shape}, this spec pretrains at {want}: measure its shapes (benchmarks/gpu.py)")
    out = {}
    for key, rate in host.items():
        section, size = key.split(":")[0], key.split(":")[-1]
        train = cfg.pretrain.train if section == "pretrain" else cfg.specialize.train
        precision = "bf16" if train.precision in ("auto", "bf16") else train.precision
        if size not in sizes or precision not in sizes[size]:
            raise SystemExit(f"slm sweep --gpu-rates: no {precision} step time of size {size!r} in it (it has "
                             f"{sorted(k for k in sizes if isinstance(sizes[k], dict))})")
        step = sizes[size][precision]["step_s"] * share
        tokens = sizes["batch"] * sizes["seq_len"]
        out[key] = Rate(step_s=step, eval_tokens_per_s=EVAL_SPEEDUP * tokens / step, setup_s=rate.setup_s,
                        save_s=rate.save_s)
    return out


def on_gpus(cfg: SweepJob, plan: Plan, host: dict[str, Rate], tune: dict, measured: dict,
            counts: tuple[int, ...]) -> dict:
    """The plan replayed on each count of the measured GPU: ``1 / train.gpus_per_worker`` runs (trials) to a
    device, bounded by two assumptions about sharing — runs as fast as alone (launch-bound models leave the
    device idle between kernels) and runs that split the device's time — the truth between them, unmeasured."""
    runs_per, trials_per = (max(1, int(1 / t.gpus_per_worker + 1e-9)) for t in (cfg.pretrain.train, cfg.specialize.train))
    out = {"device": measured.get("device", "?"), "runs_per_gpu": runs_per, "trials_per_gpu": trials_per,
           "assumed": f"each method at the generic model's step time of its size; an evaluation's token at 1/"
                      f"{EVAL_SPEEDUP:g} of a step's; set-up, saves and Tune's overhead as on this machine",
           "by_count": {}}
    for share, bound in ((1, "alone"), (max(runs_per, trials_per), "split")):
        rates = gpu_step_rates(cfg, host, measured, share)
        for n in counts:
            e = estimate(cfg, plan, rates, tune, n * runs_per, n * trials_per)
            out["by_count"].setdefault(str(n), {})[bound] = {k: e[k] for k in ("pretrain_s", "trials_s", "total_s")}
    return out


def format_estimate(e: dict) -> str:
    unknown = [d for d, t in e["valid_tokens"].items() if t is None]
    lines = [f"measured on this machine ({e['slots']} at once; probe {e['probe_s']:.0f}s):"]
    lines += [f"  {k:<36} {r['step_s'] * 1000:8.1f} ms/step  eval {r['eval_tokens_per_s']:9.0f} tokens/s  "
              f"set-up {r['setup_s']:5.1f}s  save {r['save_s']:4.2f}s" for k, r in e["rates"].items()]
    lines.append(f"  Tune: {e['tune']['per_trial_s']:.2f}s a trial, {e['tune']['per_wave_s']:.1f}s a wave")
    lines.append(f"estimated wall time: pretraining {e['pretrain_s'] / 60:.1f} min + trials {e['trials_s'] / 60:.1f} min "
                 f"(≈{e['mean_trial_s']:.1f}s each) = {e['total_s'] / 60:.1f} min, data stages not included"
                 + (f"; valid splits of {unknown} not packed yet: evaluations assume eval_tokens" if unknown else ""))
    if "cluster" in e:
        c = e["cluster"]
        lines.append(f"on {c['nodes']} machines like this one ({c['nodes'] * e['slots']} at once): pretraining "
                     f"{c['pretrain_s'] / 60:.1f} min + trials {c['trials_s'] / 60:.1f} min = {c['total_s'] / 60:.1f} min "
                     f"({e['total_s'] / c['total_s']:.2f}× faster than one; moving models and data between nodes not "
                     "included)")
    if "gpus" in e:
        g = e["gpus"]
        lines.append(f"on {g['device']} GPUs ({g['runs_per_gpu']} runs, {g['trials_per_gpu']} trials to a GPU; "
                     f"assumed: {g['assumed']}):")
        for n, bounds in g["by_count"].items():
            a, b = bounds["alone"], bounds["split"]
            lines.append(f"  {n} GPU{'s' if n != '1' else ''}: {a['total_s'] / 60:.1f} min (pretraining "
                         f"{a['pretrain_s'] / 60:.1f} + trials {a['trials_s'] / 60:.1f}) if runs sharing a GPU "
                         f"go as fast as alone, {b['total_s'] / 60:.1f} min if they split its time")
    return "\n".join(lines)
