"""A sweep's plan: every pretraining run and specialization trial it needs, as frozen dataclasses.

Pure: no Ray, no files. ``make_plan`` turns a sweep spec (``SweepConfig``) and the facts the sweep looked
up (``PlanInputs``: the compared methods, the domains, each size's FLOPs per token, tokens per step) into
a :class:`Plan`; ``slm.tune.sweep`` executes one; ``plan.json`` is ``Plan.to_json()`` and every reader
(the report, the claims, the time estimate) gets the same types back with ``Plan.from_json``.

The grid: one pretraining run per (method, size) — per (method, size, domain) for a method whose
pretraining set is chosen for a domain (SLM-is, DSIR) — and seed, trained to the largest pretraining
budget with snapshots at the others; one trial per (run, pretraining budget, domain, in-domain tokens,
specialization budget). Beside it, the experiments the claims C4-C6 need (docs/budgets.md): the large
model's runs (``large_size``, ``large_steps``), SALT (``salt_kd_share``), distillation's teachers and
students (``distill``, a second wave of trials) and every SLM-mix expert (``all_experts``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

from slm import methods
from slm.config import ConfigError
from slm.records.plan import (
    Estimate,
    Plan,
    PretrainRun,
    SizeCost,
    Trial,
    axis_labels,
    axis_suffix,
    axis_text,
    seed_suffix,
)
from slm.train.config import cooldown_branches, decay_steps
from slm.tune.config import SweepConfig


class SweepSpecError(ConfigError):
    """A sweep spec that cannot run; raised before any trial starts."""


@dataclass(frozen=True)
class PlanInputs:
    """What the plan needs beside the sweep spec, looked up by the sweep (``slm.tune.sweep.plan_sweep``)."""

    domains: tuple[str, ...]
    sizes: dict[str, SizeCost]  # every size of sweep.sizes and sweep.large_size
    pretrain_tokens_per_step: int
    specialize_tokens_per_step: int
    experts: int  # SLM-mix's experts (C6)
    peak_flops: float  # per device, for the estimate
    peak_flops_source: str
    # pretrain.train.optim under schedule wsd: its decay_fraction (the budgets below a run's length are
    # cooldown branches, paid per budget); 0: cosine (they are snapshots of the run, paid once).
    decay_fraction: float = 0.0
    vocab_size: int = 0  # the tokenizer's (Plan.vocab_size)


# ---------------------------------------------------------------------------------- the sweep's rules


def compared_methods(sw: SweepConfig) -> list[str]:
    """The methods a sweep compares: ``sweep.methods``, or when it lists none every method whose
    ``swept_by_default`` says so."""
    return list(sw.methods) or [n for n in methods.names() if methods.get(n).swept_by_default]


def check_spec(sw: SweepConfig) -> None:
    """The sweep's method names against the registry, and the methods its claim experiments need."""
    for name in sw.methods:
        methods.get(name, "sweep.methods")
    compared = compared_methods(sw)
    if (sw.distill or sw.salt_kd_share) and methods.BASELINE not in compared:
        raise SweepSpecError(f"config key 'sweep.methods': distillation's student and SALT's teacher are the "
                             f"{methods.BASELINE} small model: add {methods.BASELINE}")
    if sw.all_experts and methods.SLM_MIX not in compared:
        raise SweepSpecError(f"config key 'sweep.all_experts': needs {methods.SLM_MIX} in sweep.methods")
    trained = set(compared) | ({methods.DISTILLED} if sw.distill else set())
    sizes = {*sw.sizes, *([sw.large_size] if sw.large_size else [])}
    for who in sw.per_method:
        method, _, size = who.partition("@")
        if method not in trained or (size and size not in sizes):
            raise SweepSpecError(f"config key 'sweep.per_method.{who}': this sweep trains no {method} "
                                 + (f"at {size} " if size else "") + f"(its methods {sorted(trained)}, sizes "
                                 f"{sorted(sizes)}): a setting of nothing is a mistake")


def pretrain_name(method: str, size: str, domain: str | None) -> str:
    return f"{method}-{domain}-{size}" if domain else f"{method}-{size}"


# ---------------------------------------------------------------------------------- the plan


class _Builder:
    """Collects runs and trials once each (a setting two experiments need is planned once)."""

    def __init__(self, sw: SweepConfig, inputs: PlanInputs, small: str):
        self.sw, self.inputs, self.small = sw, inputs, small
        self.runs: list[PretrainRun] = []
        self.trials: list[Trial] = []

    def run(self, run: PretrainRun) -> None:
        if self.inputs.decay_fraction:  # under WSD each smaller budget is a cooldown branch, priced as it trains
            branches = cooldown_branches(run.snapshots, run.steps)
            run = replace(run, branches=branches,
                          branch_steps=sum(decay_steps(self.inputs.decay_fraction, b) for b in branches))
        cost = (self.inputs.sizes[run.size].train_flops_per_token * self.inputs.pretrain_tokens_per_step
                * (run.steps + run.branch_steps))
        if run.teacher:
            cost += (self.inputs.sizes[self.small].inference_flops_per_token * self.inputs.pretrain_tokens_per_step
                     * run.kd_steps)
        for i, known in enumerate(self.runs):
            if known.name == run.name:  # the grid trains it already: it becomes the large run, with its evaluations
                self.runs[i] = replace(known, role=run.role, eval_every=known.eval_every or run.eval_every)
                return
        self.runs.append(replace(run, flops=cost))

    def trial(self, trial: Trial) -> None:
        if any(t.name == trial.name for t in self.trials):
            return
        tokens = self.inputs.specialize_tokens_per_step * trial.specialize_steps
        cost = self.inputs.sizes[trial.size].train_flops_per_token * tokens
        if trial.teacher:
            cost += self.inputs.sizes[self.sw.large_size].inference_flops_per_token * tokens
        self.trials.append(replace(trial, flops=cost))


def make_plan(sw: SweepConfig, inputs: PlanInputs, histogram_entropy: dict[str, float] | None = None) -> Plan:
    """Every pretraining run and trial of ``sw``, with its FLOPs; the spec's rules checked (``check_spec``,
    the sizes against the inference budget and each other). ``sweep.axes`` crosses the whole design with
    every combination of the axes' values (``axis_points``): a pretraining run once per combination of the
    ``pretrain.*`` axes (a ``specialize.*`` axis reuses it), a trial once per combination of all of them, each
    named after its values (``-lr0.003``) and carrying them (``axes``); ``sweep.per_method`` gives a method its
    own settings the same way (``at_point``)."""
    check_spec(sw)
    labels = axis_labels(sorted(set(sw.axes) | {k for settings in sw.per_method.values() for k in settings}))
    runs: dict[str, PretrainRun] = {}
    trials: dict[str, Trial] = {}
    grid_runs, grid_trials, small, large = _design(sw, inputs)  # the same at every point of the axes
    for point in axis_points(sw.axes):
        at_runs, at_trials = at_point(grid_runs, grid_trials, point, sw.per_method, labels)
        for r in at_runs:
            runs.setdefault(r.name, r)
        for t in at_trials:
            trials.setdefault(t.name, t)
    # A teacher trains before its student: SALT's runs after the grid's.
    run_list = tuple(sorted(runs.values(), key=lambda r: r.teacher is not None))
    trial_list = tuple(trials.values())
    if sw.part:
        run_list, trial_list = part_of(run_list, trial_list, sw.part)
    pretrain_flops, specialize_flops = sum(r.flops for r in run_list), sum(t.flops for t in trial_list)
    total = pretrain_flops + specialize_flops
    estimate = Estimate(pretrain_flops, specialize_flops, total,
                        total / (inputs.peak_flops * sw.assumed_mfu), sw.assumed_mfu, inputs.peak_flops,
                        inputs.peak_flops_source)
    return Plan(run_list, trial_list, dict(inputs.sizes), small, large, dict(histogram_entropy or {}), estimate,
                vocab_size=inputs.vocab_size)


# ---------------------------------------------------------------------------------- axes


def axis_points(axes: dict[str, list[Any]]) -> list[tuple[tuple[str, Any], ...]]:
    """Every combination of the axes' values, keys in sorted order: ``[()]`` without axes."""
    keys = sorted(axes)
    return [tuple(zip(keys, values, strict=True)) for values in itertools.product(*(axes[k] for k in keys))]


def _at(name: str | None, seed: int | None, suffix: str) -> str | None:
    """A run's or trial's name (``…-seed<S>``) with the axis suffix put before its seed."""
    if name is None or not suffix:
        return name
    tail = seed_suffix(seed)
    return (name[: -len(tail)] if tail else name) + suffix + tail


def own_settings(per_method: dict[str, dict[str, Any]], method: str, size: str, section: str
                 ) -> tuple[tuple[str, Any], ...]:
    """The settings of ``section`` (``pretrain.`` or ``specialize.``) that ``sweep.per_method`` gives a method
    at a size: ``<method>@<size>``'s over ``<method>``'s, keys sorted."""
    own = {**per_method.get(method, {}), **per_method.get(f"{method}@{size}", {})}
    return tuple(sorted((k, v) for k, v in own.items() if k.startswith(section)))


def at_point(grid_runs: list[PretrainRun], grid_trials: list[Trial], point: tuple[tuple[str, Any], ...],
             per_method: dict[str, dict[str, Any]], labels: dict[str, str]) -> tuple[list[PretrainRun], list[Trial]]:
    """The design at one point of the axes, each run and trial also at its method's own settings
    (``sweep.per_method``, their ``own``): a run trains at the ``pretrain.*`` axes' values and its method's own
    ``pretrain.*`` settings; a trial at every axis's value, its source run's own settings and its own method's
    ``specialize.*`` settings. Each is named after the values it carries (``-lr0.005``; a run with none keeps
    its name), and every reference (a trial's source, teacher and teacher run, a SALT run's teacher) follows
    the name of what it refers to."""
    pre = tuple((k, v) for k, v in point if k.startswith("pretrain."))
    run_own = {r.name: own_settings(per_method, r.method, r.size, "pretrain.") for r in grid_runs}
    run_name = {r.name: _at(r.name, r.seed, axis_suffix(tuple(sorted(pre + run_own[r.name])), labels))
                for r in grid_runs}
    trial_own = {t.name: tuple(sorted(run_own[t.source] + own_settings(per_method, t.method, t.size, "specialize.")))
                 for t in grid_trials}
    trial_suffix = {t.name: axis_suffix(tuple(sorted(point + trial_own[t.name])), labels) for t in grid_trials}
    trial_name = {t.name: _at(t.name, t.seed, trial_suffix[t.name]) for t in grid_trials}
    at_runs = [replace(r, name=run_name[r.name], teacher=r.teacher and run_name[r.teacher], axes=pre,
                       own=run_own[r.name]) for r in grid_runs]
    at_trials = [replace(t, setting=t.setting + trial_suffix[t.name], name=trial_name[t.name],
                         source=run_name[t.source], teacher=t.teacher and trial_name[t.teacher],
                         teacher_run=t.teacher_run and run_name[t.teacher_run], axes=point, own=trial_own[t.name])
                 for t in grid_trials]
    return at_runs, at_trials


def _design(sw: SweepConfig, inputs: PlanInputs) -> tuple[list[PretrainRun], list[Trial], str, str | None]:
    """The design at one point of the axes: its runs and trials, the small and the large size."""
    sizes, domains = inputs.sizes, list(inputs.domains)
    for size in sw.sizes:
        inference = sizes[size].inference_flops_per_token
        if sw.inference_budget and inference > sw.inference_budget:
            raise SweepSpecError(f"config key 'sweep.sizes': {size!r} costs {inference:.3g} inference FLOPs per token, "
                              f"over sweep.inference_budget={sw.inference_budget:.3g}")
    small = min(sw.sizes, key=lambda s: sizes[s].inference_flops_per_token)
    large = sw.large_size or None
    if large and sizes[large].inference_flops_per_token <= sizes[small].inference_flops_per_token:
        raise SweepSpecError(f"config key 'sweep.large_size': {large!r} is not larger than the smallest size {small!r}")
    budgets = tuple(sorted(set(sw.pretrain_steps)))  # the pretraining budgets in steps; a run trains to the last
    all_tokens, all_k = sorted(set(sw.domain_tokens)), sorted(set(sw.specialize_steps))
    seeds = sw.seeds or [None]
    plan = _Builder(sw, inputs, small)

    def on(d: str) -> str:
        """What names a trial's domain in its setting (a run pretrained for one domain names it already)."""
        return f"-{d}" if len(domains) > 1 else ""

    def cell(d: str, steps: int, tokens: int, k: int) -> str:
        return f"{on(d).lstrip('-')}{'-' if on(d) else ''}p{steps}-t{tokens}-s{k}"

    for method in compared_methods(sw):
        for size in sw.sizes:
            for domain in (domains if methods.get(method).per_domain else [None]):
                base = pretrain_name(method, size, domain)
                for seed in seeds:
                    source = base + seed_suffix(seed)
                    plan.run(PretrainRun(source, method, size, domain, seed, budgets[-1], budgets, "grid"))
                    for steps in budgets:
                        for d in ([domain] if domain else domains):
                            for tokens in all_tokens:
                                for k in all_k:
                                    setting = f"{base}{'' if domain else on(d)}-p{steps}-t{tokens}-s{k}"
                                    plan.trial(Trial(setting, method, size, steps, d, tokens, k, "grid",
                                                     seed=seed, name=setting + seed_suffix(seed), source=source))
    student = pretrain_name(methods.BASELINE, small, None)
    # The large model is trained only for what reads it: distillation's teachers (and C1's large model) or
    # SALT's baseline (C5). Issue 46: without either it was trained for every seed and read by nothing.
    if large and (sw.distill or sw.salt_kd_share):
        teacher_base = pretrain_name(methods.BASELINE, large, None)
        large_steps = sw.large_steps or budgets[-1]
        curve_every = sw.curve_every or max(1, large_steps // 20)
        for seed in seeds:
            plan.run(PretrainRun(teacher_base + seed_suffix(seed), methods.BASELINE, large, None, seed, large_steps,
                                 (large_steps,), "large", eval_every=curve_every))
        if sw.salt_kd_share:
            kd_steps = max(1, round(sw.salt_kd_share * large_steps))
            for seed in seeds:
                plan.run(PretrainRun(f"salt-{large}" + seed_suffix(seed), methods.BASELINE, large, None, seed,
                                     large_steps, (large_steps,), "salt", teacher=student + seed_suffix(seed),
                                     kd_steps=kd_steps, eval_every=curve_every))
        if sw.distill:
            for seed in seeds:
                for d in domains:
                    for tokens in all_tokens:
                        for k in all_k:
                            teacher = f"{teacher_base}-{cell(d, large_steps, tokens, k)}"
                            plan.trial(Trial(teacher, methods.BASELINE, large, large_steps, d, tokens, k, "teacher",
                                             seed=seed, name=teacher + seed_suffix(seed),
                                             source=teacher_base + seed_suffix(seed)))
                            start = sw.distill_steps or budgets[-1]
                            setting = f"{methods.DISTILLED}-{small}-from-{large}-{cell(d, start, tokens, k)}"
                            plan.trial(Trial(setting, methods.DISTILLED, small, start, d, tokens, k, "distill",
                                             seed=seed, name=setting + seed_suffix(seed),
                                             source=student + seed_suffix(seed), teacher=teacher + seed_suffix(seed),
                                             teacher_run=teacher_base + seed_suffix(seed), wave=2))
    if sw.all_experts:
        base = pretrain_name(methods.SLM_MIX, small, None)
        for seed in seeds:
            for d in domains:
                for e in range(inputs.experts):
                    setting = f"{base}-{cell(d, budgets[-1], all_tokens[0], all_k[0])}-e{e}"
                    plan.trial(Trial(setting, methods.SLM_MIX, small, budgets[-1], d, all_tokens[0], all_k[0], "experts",
                                     e, seed=seed, name=setting + seed_suffix(seed), source=base + seed_suffix(seed)))
    return plan.runs, plan.trials, small, large


def base_name(run: PretrainRun) -> str:
    """A run's name without its seed: what ``sweep.part`` lists, the same for every seed."""
    suffix = seed_suffix(run.seed)
    return run.name[: -len(suffix)] if suffix else run.name


def part_of(runs: tuple[PretrainRun, ...], trials: tuple[Trial, ...], part: list[str]
            ) -> tuple[tuple[PretrainRun, ...], tuple[Trial, ...]]:
    """The share of a design that ``part`` (pretraining runs by ``base_name``) owns: those runs, every trial
    that starts from one of them or whose teacher did (distillation belongs with its teacher), and the runs
    those need besides (SALT's teacher, distillation's student), trained here too but not owned. The parts
    of a partition of the runs hold every trial once, so their tables combine (``slm report --tables``)."""
    known = sorted({base_name(r) for r in runs})
    unknown = sorted(set(part) - set(known))
    if unknown:
        raise SweepSpecError(f"config key 'sweep.part': {unknown} are not pretraining runs of this design; "
                             f"its runs: {known}")
    owned = {r.name for r in runs if base_name(r) in part}
    kept = tuple(t for t in trials if (t.teacher_run or t.source) in owned)
    needed = owned | {t.source for t in kept} | {r.teacher for r in runs if r.name in owned and r.teacher}
    return tuple(replace(r, owned=r.name in owned) for r in runs if r.name in needed), kept


def readers(p: Plan, run: PretrainRun) -> str:
    """Why a run is in the plan: what reads it (trials that start from it or are taught from it, a SALT
    run it teaches, C5's curves), in words."""
    by_role: dict[str, int] = {}
    for t in p.trials:
        if t.source == run.name:
            by_role[t.role] = by_role.get(t.role, 0) + 1
        elif t.teacher_run == run.name:
            by_role["teaches"] = by_role.get("teaches", 0) + 1
    words = {"grid": "{} trials", "experts": "{} every-expert trials (C6)", "teacher": "{} teacher trials (C1, C4)",
             "distill": "{} distilled students (C4)", "teaches": "its specializations teach {} students"}
    said = [words[role].format(n) for role, n in by_role.items()]
    said += [f"teaches {r.name} (SALT)" for r in p.runs if r.teacher == run.name]
    if run.role in ("large", "salt") and any(r.role == "salt" for r in p.runs):
        said.append("C5's curves")
    return "; ".join(said) or "nothing reads it"


def format_plan(p: Plan) -> str:
    wsd = any(r.branches for r in p.runs)
    lines = []
    if p.axes:
        values = {k: sorted({dict(t.axes)[k] for t in p.trials}, key=lambda v: (isinstance(v, str), v)) for k in p.axes}
        lines.append("axes (the design crossed with every combination; a pretrain.* axis multiplies the runs, a "
                     "specialize.* one the trials): "
                     + "; ".join(f"{k} × {len(v)} ({', '.join(axis_text(x) for x in v)})" for k, v in values.items()))
    own = {f"{t.method}@{t.size}": t.own for t in p.trials if t.own}
    if own:
        lines.append("each method's own settings (sweep.per_method; a trial carries its run's): " + "; ".join(
            f"{who} " + ", ".join(f"{k} {axis_text(v)}" for k, v in values) for who, values in sorted(own.items())))
    lines += [f"{len(p.runs)} pretraining runs (each to its largest budget, "
             + ("a WSD trunk with a cooldown branch to each smaller one" if wsd else "snapshots at the others")
             + "; what reads it):"]
    lines += [f"  {r.name:<32} {r.steps:>7} steps  "
              + (f"branches {list(r.branches)} (+{r.branch_steps} steps)" if r.branches
                 else f"snapshots {list(r.snapshots)}") + f"  {r.flops:.3g} FLOPs"
              + (f"  teacher {r.teacher} for {r.kd_steps} steps" if r.teacher else "") + f"  — {readers(p, r)}"
              for r in p.runs]
    lines.append(f"{len(p.trials)} specialization trials:")
    lines += [f"  {t.name:<48} domain {t.domain:<12} {t.flops:.3g} FLOPs"
              + (f"  wave {t.wave}, teacher {t.teacher}" if t.teacher else "") for t in p.trials]
    e = p.estimate
    lines.append(f"estimated cost: {e.pretrain_flops:.3g} FLOPs pretraining + {e.specialize_flops:.3g} "
                 f"specialization = {e.total_flops:.3g} FLOPs ≈ {e.device_seconds / 3600:.3g} device-hours "
                 f"at {100 * e.assumed_mfu:.0f}% of {e.peak_flops_per_device:.3g} FLOP/s ({e.peak_flops_source})")
    return "\n".join(lines)
