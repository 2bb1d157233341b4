"""Run directories, manifests and atomic writes.

Every stage writes its outputs under a temporary name and renames them into place, then writes a
``manifest.json`` whose ``complete`` flag is the last thing set. A stage whose manifest is complete
and whose config hash matches is skipped; anything else is redone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

MANIFEST = "manifest.json"


def _tmp_sibling(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{time.monotonic_ns()}")


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (file or folder); rename it into place on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(path)
    try:
        yield tmp
        if path.is_dir() and tmp.is_dir():
            old = _tmp_sibling(path)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def file_sha256(path: str | Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def describe_files(folder: str | Path, under: tuple[str, ...] = ("",)) -> dict[str, dict[str, Any]]:
    """Every file a stage wrote under ``folder`` (``under``: only in these sub-folders), by relative path:
    its size and SHA-256 (SHA-NI makes it 2-3× BLAKE2b's speed on the machines measured:
    benchmarks/results/integrity.json). Not the manifest itself, hidden files (locks, temporaries) nor folders
    with a manifest of their own (another stage's output, which records its files itself)."""
    folder = Path(folder)
    out = {}
    for path in sorted(p for sub in under for p in (folder / sub).rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file() or path.name == MANIFEST or any(part.startswith(".") for part in rel.parts):
            continue
        if any((folder / Path(*rel.parts[:i]) / MANIFEST).exists() for i in range(1, len(rel.parts))):
            continue
        out[rel.as_posix()] = {"bytes": path.stat().st_size, "sha256": file_sha256(path)}
    return out


def input_digests(paths: list[str | Path]) -> list[Any]:
    """What a stage read, for its manifest's key, in order: each file's SHA-256, each folder's files
    (``describe_files``); not where they lie, so a moved run folder stays current. A stage whose inputs and
    settings hash to its manifest's key is complete and current."""
    return [describe_files(path) if path.is_dir() else file_sha256(path) for path in map(Path, paths)]


class ArtifactError(ValueError):
    """A file a stage wrote is not what it wrote: missing, another size, other bytes."""


def verify(folder: str | Path, remake: str, *, hashes: bool = True, only: list[str] | None = None) -> dict[str, Any]:
    """Check the files ``folder``'s manifest records (``only``: those paths, relative) against the disk:
    present and of the recorded size always, the same bytes when ``hashes`` (read in full: done when a run
    starts or resumes). Raises ``ArtifactError``, one line naming the file, what differs, and ``remake`` (the
    command that makes it again). Returns the manifest. A manifest written before files were recorded is
    accepted as it is (said once in its place: nothing to check it against)."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None or not manifest.get("complete"):
        raise ArtifactError(f"{folder}: no complete manifest (the stage did not finish); remake it: {remake}")
    recorded = manifest.get("files")
    if recorded is None:
        return manifest
    for rel, want in recorded.items():
        if only is not None and rel not in only:
            continue
        if (what := difference(folder / rel, want, hashes=hashes)) is not None:
            raise ArtifactError(f"{folder / rel}: {what}; remake it: {remake}")
    return manifest


def difference(path: Path, want: dict[str, Any], *, hashes: bool = True) -> str | None:
    """How the file at ``path`` differs from what its stage recorded (``want``: bytes, sha256), or None."""
    if not path.is_file():
        return "missing (its stage wrote it)"
    if (size := path.stat().st_size) != want["bytes"]:
        return f"{size:,} bytes, its stage wrote {want['bytes']:,} (truncated or replaced)"
    if hashes and file_sha256(path) != want["sha256"]:
        return f"its bytes changed since its stage wrote them (SHA-256 {want['sha256'][:12]}…, now other)"
    return None


def changed_files(folder: str | Path) -> dict[str, str]:
    """The files ``folder``'s manifest records that are no longer what their stage wrote, by relative path:
    what differs (missing, another size, other bytes). Empty for a folder without a manifest or whose
    manifest records no files. A stage that keeps earlier outputs asks this first, and remakes (or
    refuses) what it lists: a manifest records what was written, never what is found."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    recorded = (manifest or {}).get("files") or {}
    return {rel: what for rel, want in recorded.items() if (what := difference(folder / rel, want)) is not None}


def forget_stale(folder: str | Path) -> bool:
    """Remove ``folder``'s manifest when a file it records has been rewritten since: it describes an earlier
    output made from other inputs (a stage that writes its inputs into its folder before running — a trial's
    instantiated model — calls this after writing them), so nothing checks the new files against it and the
    stage writes its own. True when it was removed."""
    if not changed_files(folder):
        return False
    (Path(folder) / MANIFEST).unlink()
    return True


def check_recorded(path: str | Path) -> bool:
    """Check one file a command is about to read (a model, a checkpoint) against the manifest of the
    nearest folder above it that has one, when that manifest records it: ``ArtifactError`` naming the file
    if it differs. False when no manifest records it (a file made elsewhere: read as it is)."""
    path = Path(path).resolve()
    for folder in path.parents:
        manifest = read_manifest(folder)
        if manifest is None:
            continue
        want = (manifest.get("files") or {}).get(path.relative_to(folder).as_posix())
        if want is None:
            return False
        if (what := difference(path, want)) is not None:
            raise ArtifactError(f"{path}: {what}; remake it: rm -r {folder} and run what made it again "
                                f"(its manifest: stage {manifest.get('stage', '?')})")
        return True
    return False


def remake(folder: str | Path, stage: str) -> str:
    """What makes a stage's output again (``verify``'s hint): a complete stage is skipped, so its folder
    goes first."""
    return f"rm -r {folder} and rerun the job (its {stage} stage makes it again)"


def read_manifest(folder: str | Path) -> dict[str, Any] | None:
    path = Path(folder) / MANIFEST
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); delete it to rebuild the stage") from err


def write_manifest(folder: str | Path, manifest: dict[str, Any], files: tuple[str, ...] = ("",),
                   written: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """Write ``manifest`` with the files the stage wrote (``describe_files`` of the sub-folders ``files``:
    sizes and hashes, which ``verify`` checks when they are read) and ``complete: true`` set last (the
    stage's commit point). A stage that keeps earlier files beside what it wrote now says which are new
    (``written``: a test on the relative path): every other file the folder's manifest recorded must still
    be what was recorded (``ArtifactError`` otherwise), so a corrupt file is never recorded as written."""
    folder = Path(folder)
    described = describe_files(folder, files)
    if written is not None:
        earlier = ((read_manifest(folder) or {}).get("files") or {})
        for rel, now in described.items():
            if not written(rel) and rel in earlier and now != earlier[rel]:
                raise ArtifactError(f"{folder / rel}: changed since its stage wrote it ({now['bytes']:,} bytes, "
                                    f"SHA-256 {now['sha256'][:12]}…; recorded {earlier[rel]['bytes']:,} bytes, "
                                    f"{earlier[rel]['sha256'][:12]}…): not recorded over; remake it")
    manifest = {k: v for k, v in manifest.items() if k not in ("complete", "files")}
    manifest["files"] = described
    manifest["complete"] = True
    atomic_write_json(folder / MANIFEST, manifest)
    return manifest


def is_complete(folder: str | Path, config_hash: str | None = None) -> bool:
    manifest = read_manifest(folder)
    if not manifest or not manifest.get("complete"):
        return False
    return config_hash is None or manifest.get("config_hash") == config_hash


class RunLockedError(RuntimeError):
    """Another process is running a command in the same run directory."""


@contextlib.contextmanager
def run_lock(run_dir: str | Path, command: str = "") -> Iterator[None]:
    """One command at a time in a run directory: two at once pruned each other's checkpoints and wrote
    each step twice into the same logs. The lock is the OS's (``filelock``: flock), so a holder that
    dies — killed, out of memory, a lost node — releases it with its last breath: no stale lock to clear.
    ``.lock.json`` beside it says who holds it, for the message. (flock is per host: on a shared file
    system, run one command per run directory across machines.)"""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    lock, holder = FileLock(str(run_dir / ".lock")), run_dir / ".lock.json"
    try:
        lock.acquire(timeout=0)
    except Timeout:
        who = json.loads(holder.read_text()) if holder.exists() else {}
        raise RunLockedError(
            f"{run_dir} is in use by pid {who.get('pid', '?')} on {who.get('host', '?')} since "
            f"{who.get('started', '?')} ({who.get('command') or 'an slm command'}): wait for it to finish, or "
            "stop it, then run this again (a killed command releases the lock)") from None
    try:
        atomic_write_json(holder, {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                                   "started": time.strftime("%Y-%m-%d %H:%M:%S")})
        yield
    finally:
        holder.unlink(missing_ok=True)
        lock.release()

