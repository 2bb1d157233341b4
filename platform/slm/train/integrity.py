"""Checkpoints that say whether they are whole: each rank lists the files it wrote into a checkpoint
(size and SHA-256) in ``files-<rank>.json``, written last; a resume checks the lists and falls back to
the newest checkpoint that passes, saying which it took and why it passed the others over.

A checkpoint cut short (a full disk, a kill during a copy, a truncated file) used to fail every rerun
with torch's "checkpoint file is corrupted", naming no path. Checkpoints written before these lists
existed have none and are taken as they are.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from slm.artifacts import file_sha256

LIST = "files-{rank}.json"
STEP = re.compile(r"step-\d{8}")  # a checkpoint folder's name (``slm.train.session.step_folder``)


def step_folders(folder: Path) -> list[Path]:
    """The checkpoint folders directly under ``folder``, oldest first (none when it does not exist)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and STEP.fullmatch(p.name))


def files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def write_list(folder: Path, rank: int, written: set[str]) -> None:
    """``files-<rank>.json``: the files this rank wrote into ``folder``, with their sizes and hashes;
    written under a temporary name and renamed, after everything it lists."""
    entries = {name: {"bytes": (folder / name).stat().st_size, "sha256": file_sha256(folder / name)}
               for name in sorted(written)}
    target = folder / LIST.format(rank=rank)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(entries, indent=1))
    os.replace(tmp, target)


def problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be resumed from (a missing, short or changed file), or None."""
    lists = sorted(folder.glob("files-*.json"))
    for listing in lists:
        try:
            entries = json.loads(listing.read_text())
        except (OSError, json.JSONDecodeError) as err:
            return f"{listing.name} unreadable ({err})"
        for name, expected in entries.items():
            path = folder / name
            if not path.is_file():
                return f"{name} missing"
            size = path.stat().st_size
            if size != expected["bytes"]:
                return f"{name} is {size} bytes, {expected['bytes']} were written"
            if file_sha256(path) != expected["sha256"]:
                return f"{name} changed since it was written (SHA-256 differs)"
    return None


def newest_whole(candidates: list[Path], log) -> Path | None:
    """The newest of ``candidates`` (oldest first) that passes ``problem``; ``log`` hears of each one
    passed over and of the fallback taken."""
    skipped = []
    for folder in reversed(candidates):
        reason = problem(folder)
        if reason is None:
            if skipped:
                log(f"resuming from {folder.name}, the newest whole checkpoint (passed over: "
                    + "; ".join(f"{p.name}: {why}" for p, why in skipped) + ")")
            return folder
        skipped.append((folder, reason))
    if skipped:
        log("no whole checkpoint to resume from (" + "; ".join(f"{p.name}: {why}" for p, why in skipped)
            + "): starting from step 0")
    return None


# Ray Train's own record of a run's checkpoints, in its experiment folder (Ray Train v2).
RAY_TRAIN_RECORD = "checkpoint_manager_snapshot.json"


def set_aside_stale_record(experiment: Path, log) -> list[str]:
    """Ray Train refuses to start (``CheckpointManagerInitializationError``) while its record names a
    checkpoint folder that is gone — one deleted by hand, or lost — until the whole experiment folder, all
    progress, is removed. Set such a record aside instead (renamed, kept): Ray Train starts a new one and
    the workers resume from the newest whole checkpoint still on disk (``RayTrainSession.resume_from``).
    Returns the checkpoints the record named that are gone."""
    record = experiment / RAY_TRAIN_RECORD
    if not record.is_file():
        return []
    gone = sorted({name for name in STEP.findall(record.read_text()) if not (experiment / name).is_dir()})
    if gone:
        aside = record.with_name(f"{record.name}.stale-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(record, aside)
        log(f"{experiment.name}: Ray Train's record names checkpoints that are gone ({', '.join(gone)}); set it "
            f"aside as {aside.name}: resuming from the newest whole checkpoint on disk")
    return gone
