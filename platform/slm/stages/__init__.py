"""The stages a job lists: one module each in this package, registered by name in :data:`STAGES`.

A stage is a function of (the job config, the run directory) that reads its inputs' artifacts, writes its own
with a manifest and returns a small summary (``results.json``); a stage whose outputs are complete and current
is skipped, so a job that died is run again. Beside the function, a stage says what the checks made before a
job starts need of it — the training sections it logs under, the domains it reads, its label in Ray's
dashboard — so ``slm.pipeline`` knows no stage by name. Adding a stage is one module here (``@stage("name")``
over its function) and its test: importing this package imports every module in it.

Each stage imports what it runs inside its function: a job pays only for its stages' dependencies (Ray Data,
torch, Ray Train and Tune, scikit-learn, matplotlib: seconds to import together).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slm.config import Registry
from slm.job import JobConfig

Run = Callable[[JobConfig, Path], dict]


def _reads_no_domain(cfg: JobConfig) -> list[tuple[str, str]]:
    return []


@dataclass(frozen=True)
class Stage:
    """A registered stage: ``run`` and what the job's checks ask of it."""

    run: Run
    # The training sections (``pretrain``, ``specialize``) it trains under: their loggers are checked installed.
    trains: tuple[str, ...] = ()
    # (config key, domain) of every domain it reads, checked against the corpus before any stage runs.
    reads_domains: Callable[[JobConfig], list[tuple[str, str]]] = _reads_no_domain
    # Its words in the Ray job's name (``pretrain soup-d2``); None: its name.
    label: Callable[[JobConfig], str] | None = None
    # The domains it builds into the corpus before the later stages read them (the corpus stage's bundled ones).
    builds_domains: tuple[str, ...] = ()

    def __call__(self, cfg: JobConfig, run_dir: Path) -> dict:
        return self.run(cfg, run_dir)


STAGES: Registry[Stage] = Registry("stage", "stages")


def evaluated_domains(cfg: JobConfig) -> list[tuple[str, str]]:
    """The domains whose valid sets are packed and every training run evaluates on (``corpus.domains``)."""
    return [("corpus.domains", d) for d in cfg.corpus.domains]


def stage(name: str, *, trains: tuple[str, ...] = (),
          reads_domains: Callable[[JobConfig], list[tuple[str, str]]] = _reads_no_domain,
          label: Callable[[JobConfig], str] | None = None,
          builds_domains: tuple[str, ...] = ()) -> Callable[[Run], Run]:
    """Register the decorated function as the stage ``name`` (the fields of :class:`Stage`)."""

    def register(run: Run) -> Run:
        STAGES.register(name, Stage(run, trains, reads_domains, label, builds_domains))
        return run

    return register


for _module in pkgutil.iter_modules(__path__):  # every stage module registers itself
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["STAGES", "Stage", "evaluated_domains", "stage"]
