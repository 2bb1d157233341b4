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
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from slm import methods
from slm.config import ConfigError, config_hash
from slm.train.config import cooldown_branches, decay_steps
from slm.tune.config import SweepConfig


class SweepSpecError(ConfigError):
    """A sweep spec that cannot run; raised before any trial starts."""


RunRole = Literal["grid", "large", "salt"]
TrialRole = Literal["grid", "teacher", "distill", "experts"]


@dataclass(frozen=True)
class SizeCost:
    """A model size's FLOPs per token: trained (forward + backward) and served (forward)."""

    train_flops_per_token: float
    inference_flops_per_token: float


@dataclass(frozen=True)
class PretrainRun:
    """One pretraining run, trained to ``steps`` with a snapshot at each of ``snapshots``: under a cosine
    schedule the model at that step of this run, under WSD (``branches``) a cooldown branch's model."""

    name: str
    method: str
    size: str
    domain: str | None  # the domain its pretraining set is chosen for (a per-domain method), else None
    seed: int | None
    steps: int
    snapshots: tuple[int, ...]
    role: RunRole
    teacher: str | None = None  # SALT: the run it distils from for its first kd_steps
    kd_steps: int = 0
    eval_every: int = 0  # 0: the pretrain section's own
    flops: float = 0.0  # what the run costs to train, its cooldown branches included
    # sweep.axes: the value of each pretrain.* axis this run trains at, as (config key, value) pairs
    axes: tuple[tuple[str, Any], ...] = ()
    # Under a WSD schedule, the budgets below ``steps`` trained as cooldown branches from this run (each a
    # fully trained model, its snapshot), and the steps those branches train beyond the trunk (their decays).
    branches: tuple[int, ...] = ()
    branch_steps: int = 0
    # False: trained in this part of a study only because a run or trial it owns needs it (SALT's teacher,
    # distillation's student); its trials and curves belong to the part that owns it (``sweep.part``).
    owned: bool = True


@dataclass(frozen=True)
class Setting:
    """What a trial measures, without its seed: the seeds of one setting are averaged. Its fields are the
    results table's setting columns and the axes the claims and the report select by, under the same
    names — the pretraining budget is ``pretrain_steps`` from the spec (``sweep.pretrain_steps``) to the
    claims."""

    setting: str  # its name
    method: str
    size: str
    pretrain_steps: int
    domain: str
    domain_tokens: int
    specialize_steps: int
    role: TrialRole
    expert: int | None = None  # C6: the SLM-mix expert fine-tuned
    axes: tuple[tuple[str, Any], ...] = ()  # sweep.axes: every axis's value, (config key, value) pairs


@dataclass(frozen=True, kw_only=True)
class Trial(Setting):
    """One specialization: setting ``setting`` at ``seed`` — the snapshot of run ``source`` at
    ``pretrain_steps``, on ``domain_tokens`` of ``domain``'s data for ``specialize_steps``. The sweep hands
    Tune its name and gives the trial function this object (``slm.tune.sweep``); its row of the results
    table is its fields and what it measured (``slm.tune.table.row``)."""

    seed: int | None
    name: str
    source: str
    teacher: str | None = None  # distillation: the trial (wave 1) whose specialized model teaches
    teacher_run: str | None = None  # the pretraining run that teacher started from
    wave: int = 1
    flops: float = 0.0

    def as_setting(self) -> Setting:
        return Setting(**{f.name: getattr(self, f.name) for f in fields(Setting)})


# plan.json's key order for a trial, as plans were written before ``Setting``: a plan read and written
# again (``slm report --tables`` combining parts) keeps its bytes.
TRIAL_JSON = ("source", "method", "size", "pretrain_steps", "domain", "domain_tokens", "specialize_steps", "seed",
              "setting", "name", "role", "expert", "teacher", "teacher_run", "wave", "flops", "axes")


@dataclass(frozen=True)
class Estimate:
    """The plan's FLOPs, and device-seconds at an assumed fraction of a peak (``slm sweep --dry-run``)."""

    pretrain_flops: float
    specialize_flops: float
    total_flops: float
    device_seconds: float
    assumed_mfu: float
    peak_flops_per_device: float
    peak_flops_source: str


@dataclass(frozen=True)
class DataFingerprint:
    """The digest of every packed set a sweep trained or evaluated on, and one over all of them: the
    report combines sweeps only where the sets they share have the same digests."""

    sets: dict[str, str]
    fingerprint: str

    @classmethod
    def of(cls, sets: dict[str, str]) -> DataFingerprint:
        ordered = dict(sorted(sets.items()))
        return cls(ordered, config_hash(list(ordered.items())))


@dataclass(frozen=True)
class Plan:
    runs: tuple[PretrainRun, ...]
    trials: tuple[Trial, ...]
    sizes: dict[str, SizeCost]
    small: str  # the smallest size: distillation's student, SALT's teacher
    large: str | None
    histogram_entropy: dict[str, float] = field(default_factory=dict)  # C2 is read beside it
    estimate: Estimate | None = None
    data: DataFingerprint | None = None  # set when a sweep runs it
    # a study combined from several sweeps (`slm report --tables`): their folders, relative to the one they share
    parts: tuple[str, ...] = ()
    # the tokenizer's vocabulary: a model no better than a uniform guess over it (perplexity ≥ it) has
    # diverged (slm.analysis.claims). 0 in plans written before issue 45, which do not record it.
    vocab_size: int = 0
    # the kernels each training section ran on (slm.train.numerics.kernels: "pinned <probe>" or "native <probe>"),
    # by config key: parts whose kernels differ trained on different numbers and are not combined. Empty in
    # plans written before issue 63, which do not record them.
    kernels: dict[str, str] = field(default_factory=dict)

    def run(self, name: str) -> PretrainRun:
        return next(r for r in self.runs if r.name == name)

    @property
    def axes(self) -> tuple[str, ...]:
        """The config keys the sweep crossed its design with (``sweep.axes``), sorted; () without axes."""
        return tuple(sorted({k for t in self.trials for k, _ in t.axes}))

    def waves(self) -> list[tuple[int, list[Trial]]]:
        """The trials by wave, in order: a later wave reads the models an earlier one specialized."""
        return [(w, [t for t in self.trials if t.wave == w]) for w in sorted({t.wave for t in self.trials})]

    def to_json(self) -> dict:
        d = asdict(self)
        d["trials"] = [{k: t[k] for k in TRIAL_JSON} for t in d["trials"]]
        for item in [*d["runs"], *d["trials"]]:  # a plan without axes is written as before them
            if not item["axes"]:
                del item["axes"]
        if not d["vocab_size"]:  # a plan from before issue 45 is written back as it was read
            del d["vocab_size"]
        if not d["kernels"]:  # nor one from before issue 63
            del d["kernels"]
        return d

    @classmethod
    def from_json(cls, d: dict) -> Plan:
        """A plan as ``to_json`` wrote it (``plan.json``)."""
        return cls(runs=tuple(PretrainRun(**{**r, "snapshots": tuple(r["snapshots"]),
                                             "branches": tuple(r.get("branches", ())), "axes": axes_of(r)})
                              for r in d["runs"]),
                   trials=tuple(Trial(**{**t, "axes": axes_of(t)}) for t in d["trials"]),
                   sizes={k: SizeCost(**v) for k, v in d["sizes"].items()}, small=d["small"], large=d["large"],
                   histogram_entropy=dict(d.get("histogram_entropy") or {}),
                   estimate=Estimate(**d["estimate"]) if d.get("estimate") else None,
                   data=DataFingerprint(**d["data"]) if d.get("data") else None, parts=tuple(d.get("parts", ())),
                   vocab_size=int(d.get("vocab_size", 0)), kernels=dict(d.get("kernels") or {}))


def axes_of(item: dict) -> tuple[tuple[str, Any], ...]:
    """A run's or trial's axis values as plan.json lists them (pairs), back as the plan's tuples."""
    return tuple((key, value) for key, value in item.get("axes", ()))


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


def pretrain_name(method: str, size: str, domain: str | None) -> str:
    return f"{method}-{domain}-{size}" if domain else f"{method}-{size}"


def seed_suffix(seed: int | None) -> str:
    """What a seed adds to a run's and a trial's name; nothing without a seed axis."""
    return "" if seed is None else f"-seed{seed}"


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
    named after its values (``-lr0.003``) and carrying them (``axes``)."""
    check_spec(sw)
    labels = axis_labels(list(sw.axes))
    runs: dict[str, PretrainRun] = {}
    trials: dict[str, Trial] = {}
    grid_runs, grid_trials, small, large = _design(sw, inputs)  # the same at every point of the axes
    for point in axis_points(sw.axes):
        pre = tuple((k, v) for k, v in point if k.startswith("pretrain."))
        for r in grid_runs:
            r = at_axes_run(r, pre, labels)
            runs.setdefault(r.name, r)
        for t in grid_trials:
            t = at_axes_trial(t, pre, point, labels)
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


def axis_labels(keys: list[str]) -> dict[str, str]:
    """What names an axis in run and trial names: its key's last part (``lr``); where two axes end alike, its
    section's name before it (``pretrain-lr`` beside ``specialize-lr``), else the whole key with dashes."""
    parts = {k: k.split(".") for k in keys}
    for label in (lambda p: p[-1], lambda p: f"{p[0]}-{p[-1]}", lambda p: "-".join(p)):
        named = {k: label(p) for k, p in parts.items()}
        if len(set(named.values())) == len(named):
            return named
    raise AssertionError(f"two axes with one key: {keys}")


def axis_text(value: Any) -> str:
    """An axis value in a name: 0.003, 1e-05, true, mup."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return format(value, "g")
    return str(value)


def axis_suffix(values: tuple[tuple[str, Any], ...], labels: dict[str, str]) -> str:
    return "".join(f"-{labels[k]}{axis_text(v)}" for k, v in values)


def _at(name: str | None, seed: int | None, suffix: str) -> str | None:
    """A run's or trial's name (``…-seed<S>``) with the axis suffix put before its seed."""
    if name is None or not suffix:
        return name
    tail = seed_suffix(seed)
    return (name[: -len(tail)] if tail else name) + suffix + tail


def at_axes_run(run: PretrainRun, pre: tuple[tuple[str, Any], ...], labels: dict[str, str]) -> PretrainRun:
    suffix = axis_suffix(pre, labels)
    return replace(run, name=_at(run.name, run.seed, suffix), teacher=_at(run.teacher, run.seed, suffix), axes=pre)


def at_axes_trial(t: Trial, pre: tuple[tuple[str, Any], ...], point: tuple[tuple[str, Any], ...],
                  labels: dict[str, str]) -> Trial:
    run_suffix, suffix = axis_suffix(pre, labels), axis_suffix(point, labels)
    return replace(t, setting=t.setting + suffix, name=_at(t.name, t.seed, suffix),
                   source=_at(t.source, t.seed, run_suffix), teacher=_at(t.teacher, t.seed, suffix),
                   teacher_run=_at(t.teacher_run, t.seed, run_suffix), axes=point)


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
    longest, budgets = max(sw.pretrain_steps), tuple(sorted(set(sw.pretrain_steps)))
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
                    plan.run(PretrainRun(source, method, size, domain, seed, longest, budgets, "grid"))
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
        large_steps = sw.large_steps or longest
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
                            start = sw.distill_steps or longest
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
                    setting = f"{base}-{cell(d, longest, all_tokens[0], all_k[0])}-e{e}"
                    plan.trial(Trial(setting, methods.SLM_MIX, small, longest, d, all_tokens[0], all_k[0], "experts",
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
