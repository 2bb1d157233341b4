"""A study's parts (``benchmarks/study_part.py``): each seed of a sweep spec, cut by ``jobs/<spec>/parts.yaml`` where
it has one, and the ``part.json`` each leaves under its results folder when it lands.

Who reads it: ``study_part.py`` (which runs a part's runs), ``benchmarks/study_queue.py`` (which parts are still to run)
and the docs' quotes (where a study's parts stand), so that all three agree on what a study's parts are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Part:
    """One part of a study as committed: ``record`` is its ``part.json`` (None until it lands)."""

    label: str  # seed0, or seed0-a: the folder under the study's results and the sweep name's tail
    seed: int
    cut: str | None  # the parts.yaml part, None where the spec runs one part a seed
    record: dict | None


def spec_name(spec: str | Path) -> str:
    """A spec's study name (``jobs/sweeps/study2.yaml`` → ``study2``): its parts file is ``jobs/<name>/parts.yaml``,
    its results ``benchmarks/results/<name>/``."""
    return Path(spec).stem


def part_label(seed: int, cut: str | None) -> str:
    """A part's label: ``seed0``, or ``seed0-a`` for a parts file's part — its results folder, and its sweep name
    after ``<study>-``."""
    return f"seed{seed}" + (f"-{cut}" if cut else "")


def cuts(root: Path, spec: str | Path) -> dict[str, list[str]]:
    """The spec's parts file (``jobs/<name>/parts.yaml``): each part's runs (the plan's run names without the seed);
    empty when the spec has none (one part a seed)."""
    path = root / "jobs" / spec_name(spec) / "parts.yaml"
    if not path.exists():
        return {}
    parts = (yaml.safe_load(path.read_text()) or {}).get("parts")
    if not isinstance(parts, dict) or not parts:
        raise ValueError(f"{path}: no 'parts' mapping (each part's name to its runs)")
    return {str(name): list(runs) for name, runs in parts.items()}


class Parts(list):
    """A study's parts in run order (a list of ``Part``), and which of them have landed."""

    @property
    def landed(self) -> list[Part]:
        return [p for p in self if p.record is not None]

    @property
    def waiting(self) -> list[Part]:
        return [p for p in self if p.record is None]

    @property
    def complete(self) -> bool:
        return not self.waiting

    def __str__(self) -> str:
        """``3 of 5``: how many parts are in."""
        return f"{len(self.landed)} of {len(self)}"


def study_parts(root: Path, spec: str | Path, results: str | Path | None = None) -> Parts:
    """Each part of ``spec`` (its ``sweep.seeds`` × its parts file's parts), in run order, with the ``part.json``
    under ``results`` (study_part's ``--out``; default ``benchmarks/results/<name>``), or None where it has not
    landed."""
    seeds = (yaml.safe_load((root / spec).read_text()) or {}).get("sweep", {}).get("seeds")
    if not seeds:
        raise ValueError(f"{root / spec}: no sweep.seeds")
    folder = root / (results or Path("benchmarks/results") / spec_name(spec))
    found, each_seed = Parts(), list(cuts(root, spec)) or [None]
    for seed in seeds:
        for cut in each_seed:
            label = part_label(seed, cut)
            record = folder / label / "part.json"
            found.append(Part(label, seed, cut, json.loads(record.read_text()) if record.exists() else None))
    return found
