"""The ``sweep`` section: a budget sweep on Ray Tune (docs/budgets.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from slm import methods
from slm.config import ConfigError, check_name
from slm.models.config import size_config
from slm.train.config import TrainJob


@dataclass
class SweepConfig:
    """A budget sweep (Ray Tune): method × size × pretraining budget × domain × in-domain data size ×
    specialization budget. Pretraining is paid once per (method, size) — once per domain for SLM-is,
    whose pretraining set depends on it — and its snapshots serve as the pretraining budgets; every
    other combination is a Tune trial that specializes one snapshot. The rest of each run's settings
    come from the job's ``pretrain`` and ``specialize`` sections."""

    name: str = "sweep"
    # Registered methods (slm.methods); []: every method swept by default (all but DSIR).
    methods: list[str] = field(default_factory=list)
    sizes: list[str] = field(default_factory=lambda: ["d2"])  # d<depth> or a preset name
    pretrain_steps: list[int] = field(default_factory=lambda: [50, 100])  # pretraining budgets
    domains: list[str] = field(default_factory=list)  # default: resample.domains, else [resample.domain]
    domain_tokens: list[int] = field(default_factory=lambda: [20000])  # in-domain data sizes
    specialize_steps: list[int] = field(default_factory=lambda: [30])  # specialization budgets
    # The seed axis: every pretraining run and trial is repeated once per seed, which sets the training
    # init and data order (pretrain.train.seed, specialize.train.seed), the soup's domain draws, SALT's
    # KD sampler, and which sequences of the domain make up the in-domain data budget. Empty: one run per
    # setting with the train sections' own seeds, and `slm advise` can say nothing of the spread.
    seeds: list[int] = field(default_factory=list)
    # The experiments claims C4-C6 need, beside the grid (docs/budgets.md, "The claims"). C4 and C5: a
    # larger model (a size name), pretrained generic per seed to the largest budget. `distill`: at the
    # largest pretraining budget it is specialized at every cell (the teacher) and the smallest size's
    # generic model is distilled from it there, in a second wave of trials, its row carrying the teacher's
    # costs. `salt_kd_share` > 0: it is also pretrained with the smallest generic model as its teacher for
    # that share of its steps (SALT); both large runs are evaluated every `curve_every` steps (0: 20
    # evaluations) into the sweep's curves table. C6 (`all_experts`): at the largest pretraining budget,
    # smallest in-domain data size and specialization budget, every SLM-mix expert is fine-tuned.
    large_size: str = ""
    # The large runs' length in steps (0: the largest of pretrain_steps). C4 and C5 compare within the
    # large model's own runs, so it need not saturate: a study sizes it to fit its time (docs/results.md).
    large_steps: int = 0
    distill: bool = False
    # The distilled student's own generic pretraining budget (one of pretrain_steps; 0: the largest). C4
    # compares it at matched compute: SLM-mix and SLM-pn at a budget costing at least the student, teacher
    # included, so the student must start low enough on the ladder for a rival budget to match it.
    distill_steps: int = 0
    salt_kd_share: float = 0.0
    curve_every: int = 0
    all_experts: bool = False
    # One part of a design too large for one stretch of work: the pretraining runs it owns (names without
    # the seed, e.g. [generic-d1, importance-legal-d1]); it trains those and the runs they need, and runs
    # every trial that starts from them (tune.plan.part_of). Empty: the whole design. docs/results.md.
    part: list[str] = field(default_factory=list)
    # Any setting of the pretrain or specialize sections as an axis, crossed with the rest of the design:
    # {pretrain.train.optim.lr: [3e-3, 1e-2, 3e-2]}. A pretrain.* axis multiplies the pretraining runs, a
    # specialize.* axis only the trials (they reuse the runs); each run and trial is named after its values
    # (-lr0.003), and each axis is a column of the results table (docs/budgets.md, "Axes").
    axes: dict[str, Any] = field(default_factory=dict)  # key → list of values; nested sections are flattened
    # Each method's own settings (issue 63: each method at its own learning rate), by method or method@size:
    # {mixture: {pretrain.train.optim.lr: 5e-3}, generic@d1: {…}}. A method's runs train at its pretrain.*
    # settings, the trials that start from them carry those and train at its specialize.* settings (the
    # distilled student's: `distilled`); each is named after them (-lr0.005) and each key is a results column,
    # as an axis is; runs and trials of methods not named keep their names and the spec's settings.
    per_method: dict[str, dict[str, Any]] = field(default_factory=dict)
    inference_budget: float = 0.0  # the largest inference FLOPs per token a size may cost (0: no limit)
    scheduler: Literal["fifo", "asha"] = "fifo"  # asha: stop weak specializations early (metric: loss)
    max_concurrent_trials: int = 0  # 0: the cluster's CPUs (GPUs) ÷ what one trial's workers take
    # Pretraining runs in flight at once (0: as many as the cluster's resources hold; 1: one at a time)
    max_concurrent_runs: int = 0
    storage_path: str = ""  # Tune's state; default <run dir>/sweeps/<name>/tune (s3:// or NFS on a cluster)
    assumed_mfu: float = 0.1  # for --dry-run's device-second estimate only
    output: str = "sweeps"  # <run dir>/sweeps/<name>/: results.parquet, results.csv, report/

    def __post_init__(self) -> None:
        # `sweep.axes.pretrain.train.optim.lr=[…]` on the command line arrives as nested sections: one key each
        self.axes = dict(_flattened(self.axes))
        self.per_method = {who: dict(_flattened(settings)) if isinstance(settings, dict) else settings
                           for who, settings in self.per_method.items()}

    def validate(self, prefix: str = "") -> None:
        for key, values in self.axes.items():
            where = f"config key '{prefix}axes.{key}'"
            check_trial_setting(key, where, "an axis")
            if not isinstance(values, list) or not values:
                raise ConfigError(f"{where}: a list of at least one value, got {values!r}")
            if len({repr(v) for v in values}) != len(values):
                raise ConfigError(f"{where}: a value is given twice in {values}")
        for who, settings in self.per_method.items():
            where = f"config key '{prefix}per_method.{who}'"
            method, _, size = who.partition("@")
            if method not in [*methods.names(), methods.DISTILLED]:
                raise ConfigError(f"{where}: no method {method!r} (registered: {[*methods.names(), methods.DISTILLED]})")
            if size:
                size_config(size, f"{prefix}per_method.{who}")
            if not isinstance(settings, dict) or not settings:
                raise ConfigError(f"{where}: settings by config key, e.g. {{pretrain.train.optim.lr: 5.0e-3}}, "
                                  f"got {settings!r}")
            for key, value in settings.items():
                at = f"config key '{prefix}per_method.{who}.{key}'"
                check_trial_setting(key, at, "a method's own value")
                if key in self.axes:
                    raise ConfigError(f"{at}: also an axis (sweep.axes.{key}); a setting is one or the other")
                if isinstance(value, (list, dict)):
                    raise ConfigError(f"{at}: one value (an axis takes lists: sweep.axes), got {value!r}")
        check_name(self.name, f"{prefix}name")  # folders under the run directory: never a path out of it
        check_name(self.output, f"{prefix}output")
        for size in self.sizes:
            size_config(size, f"{prefix}sizes")
        if self.large_size:
            size_config(self.large_size, f"{prefix}large_size")
        if self.max_concurrent_runs < 0:
            raise ConfigError(f"config key '{prefix}max_concurrent_runs': must be ≥ 0 (0: as many as the cluster's "
                              f"resources hold), got {self.max_concurrent_runs}")
        if self.max_concurrent_trials < 0:
            raise ConfigError(f"config key '{prefix}max_concurrent_trials': must be ≥ 0 (0: as many as the "
                              f"cluster's CPUs or GPUs hold), got {self.max_concurrent_trials}")
        if not 0 < self.assumed_mfu <= 1:
            raise ConfigError(f"config key '{prefix}assumed_mfu': a fraction of peak in (0, 1], got {self.assumed_mfu}")
        for key in ("sizes", "pretrain_steps", "domain_tokens", "specialize_steps"):
            if not getattr(self, key):
                raise ConfigError(f"config key '{prefix}{key}': the sweep needs at least one value")
        for key in ("pretrain_steps", "domain_tokens", "specialize_steps"):
            bad = [v for v in getattr(self, key) if v <= 0]
            if bad:
                raise ConfigError(f"config key '{prefix}{key}': budgets must be positive, got {bad}")
        if self.inference_budget < 0:
            raise ConfigError(f"config key '{prefix}inference_budget': must be ≥ 0")
        if len(set(self.seeds)) != len(self.seeds) or any(s < 0 for s in self.seeds):
            raise ConfigError(f"config key '{prefix}seeds': distinct seeds ≥ 0, got {self.seeds}")
        if not 0 <= self.salt_kd_share < 1:
            raise ConfigError(f"config key '{prefix}salt_kd_share': must be in [0, 1), got {self.salt_kd_share}")
        if (self.distill or self.salt_kd_share) and not self.large_size:
            raise ConfigError(f"config key '{prefix}large_size': distillation and SALT need a larger model "
                              f"(a size name, e.g. d2)")
        if self.curve_every < 0:
            raise ConfigError(f"config key '{prefix}curve_every': must be ≥ 0, got {self.curve_every}")
        if self.distill_steps and self.distill_steps not in self.pretrain_steps:
            raise ConfigError(f"config key '{prefix}distill_steps': one of {prefix}pretrain_steps "
                              f"({self.pretrain_steps}) or 0 (the largest), got {self.distill_steps}")
        if self.large_steps < 0:
            raise ConfigError(f"config key '{prefix}large_steps': must be ≥ 0 (0: the largest pretraining budget), "
                              f"got {self.large_steps}")


AXIS_SECTIONS = ("pretrain.", "specialize.")
# What the plan sets in each run's or trial's config (slm.tune.sweep.run_config, trial_config), and the sweep's
# own setting for it: an axis on one of these would be overwritten.
PLANNED_KEYS = {
    "pretrain.method": "sweep.methods", "pretrain.name": "sweep.methods", "pretrain.domain": "sweep.domains",
    "pretrain.snapshot_steps": "sweep.pretrain_steps", "pretrain.train.budget": "sweep.pretrain_steps",
    "pretrain.train.seed": "sweep.seeds", "pretrain.model.depth": "sweep.sizes", "pretrain.model.width": "sweep.sizes",
    "pretrain.model.preset": "sweep.sizes",
    "pretrain.teacher.checkpoint": "sweep.salt_kd_share", "pretrain.teacher.kd_steps": "sweep.salt_kd_share",
    "pretrain.output": "sweep.output", "specialize.source": "sweep.pretrain_steps", "specialize.name": "sweep.methods",
    "specialize.domain": "sweep.domains", "specialize.domain_tokens": "sweep.domain_tokens",
    "specialize.train.budget": "sweep.specialize_steps", "specialize.train.seed": "sweep.seeds",
    "specialize.expert": "sweep.all_experts", "specialize.teacher.checkpoint": "sweep.distill",
    "specialize.output": "sweep.output",
}


def check_trial_setting(key: str, where: str, what: str) -> None:
    """A key a run or trial may set for itself (an axis, a method's own value): one of the pretrain or specialize
    sections' and not one the plan sets (``PLANNED_KEYS``); ``ConfigError`` naming ``where`` otherwise."""
    if not key.startswith(AXIS_SECTIONS):
        raise ConfigError(f"{where}: {what} is a setting of {' or '.join(s.rstrip('.') for s in AXIS_SECTIONS)} "
                          "(the data stages' settings are the run's, not a trial's)")
    owner = next((axis for keys, axis in PLANNED_KEYS.items() if key == keys or key.startswith(keys + ".")), None)
    if owner:
        raise ConfigError(f"{where}: the sweep sets it for every run and trial; use {owner}")


def _flattened(axes: dict, prefix: str = ""):
    for key, value in axes.items():
        if isinstance(value, dict):
            yield from _flattened(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


class SweepJob(TrainJob, Protocol):
    """What a sweep reads of a job: the training side's sections and its own (``slm.job.JobConfig``)."""

    sweep: SweepConfig
