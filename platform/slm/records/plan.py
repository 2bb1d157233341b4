"""A sweep's plan as records: every pretraining run and specialization trial, as frozen dataclasses, and plan.json.

What the running side (``slm.tune``: the plan made and executed) and the reading side (``slm.analysis``: the report,
the claims, the advice) share, so that reading a sweep needs none of the running side's internals. ``plan.json`` is
``Plan.to_json()``, and every reader gets the same types back with ``Plan.from_json``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from slm.config import HASHED_WHEN_SET, config_hash

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
    # sweep.per_method: its method's own pretrain.* settings, as (config key, value) pairs; in a key only when set
    own: tuple[tuple[str, Any], ...] = field(default=(), metadata=HASHED_WHEN_SET)
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
    # sweep.per_method: its source run's own pretrain.* settings and its method's own specialize.* ones; in a
    # trial's key only when set (the rows of trials planned before it stay current)
    own: tuple[tuple[str, Any], ...] = field(default=(), metadata=HASHED_WHEN_SET)


@dataclass(frozen=True, kw_only=True)
class Trial(Setting):
    """One specialization: setting ``setting`` at ``seed`` — the snapshot of run ``source`` at
    ``pretrain_steps``, on ``domain_tokens`` of ``domain``'s data for ``specialize_steps``. The sweep hands
    Tune its name and gives the trial function this object (``slm.tune.sweep``); its row of the results
    table is its fields and what it measured (``slm.records.table.row``)."""

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
              "setting", "name", "role", "expert", "teacher", "teacher_run", "wave", "flops", "axes", "own")


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
        for item in [*d["runs"], *d["trials"]]:  # a plan without axes or own settings is written as before them
            for key in ("axes", "own"):
                if not item[key]:
                    del item[key]
        if not d["vocab_size"]:  # a plan from before issue 45 is written back as it was read
            del d["vocab_size"]
        if not d["kernels"]:  # nor one from before issue 63
            del d["kernels"]
        return d

    @classmethod
    def from_json(cls, d: dict) -> Plan:
        """A plan as ``to_json`` wrote it (``plan.json``)."""
        return cls(runs=tuple(PretrainRun(**{**r, "snapshots": tuple(r["snapshots"]),
                                             "branches": tuple(r.get("branches", ())), "axes": axes_of(r),
                                             "own": axes_of(r, "own")})
                              for r in d["runs"]),
                   trials=tuple(Trial(**{**t, "axes": axes_of(t), "own": axes_of(t, "own")}) for t in d["trials"]),
                   sizes={k: SizeCost(**v) for k, v in d["sizes"].items()}, small=d["small"], large=d["large"],
                   histogram_entropy=dict(d.get("histogram_entropy") or {}),
                   estimate=Estimate(**d["estimate"]) if d.get("estimate") else None,
                   data=DataFingerprint(**d["data"]) if d.get("data") else None, parts=tuple(d.get("parts", ())),
                   vocab_size=int(d.get("vocab_size", 0)), kernels=dict(d.get("kernels") or {}))


def axes_of(item: dict, key: str = "axes") -> tuple[tuple[str, Any], ...]:
    """A run's or trial's axis values (or own settings) as plan.json lists them (pairs), back as the plan's tuples."""
    return tuple((k, value) for k, value in item.get(key, ()))


def seed_suffix(seed: int | None) -> str:
    """What a seed adds to a run's and a trial's name; nothing without a seed axis."""
    return "" if seed is None else f"-seed{seed}"


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
