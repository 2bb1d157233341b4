"""Run the study parts still to run, one at a time, in benchmarks/study_queue.yaml's order (issues 63, 64).

    python benchmarks/study_queue.py [--dry-run] [--queue benchmarks/study_queue.yaml] [--worktree DIR]

Each part is ``benchmarks/study_part.py`` run from a git worktree of the queue's ``commit`` (default
``/tmp/slm-queue-<commit>``, made when missing, with this checkout's ``runs/`` and ``data/`` linked in: edits made
here meanwhile never reach a running part, and the data stages and finished runs are shared). A part whose
``part.json`` is in this checkout is skipped; one that landed in the worktree is copied back and skipped; an
interrupted one is started again and resumes (finished runs and trials kept, the rest from their checkpoints).
Each part's tables are copied into this checkout's results folder as it lands, then its entry's ``after_each``
commands run here (and ``after_all`` once its last part is in: the report that combines the parts), then ``slm docs
write`` (and once at the start for what is already in, so a queue stopped between a copy and its chores
leaves none undone) — commit what changed. On a fresh machine the corpus is fetched first (``slm corpus fetch``). Logs:
``runs/queue/<study>-<label>.log``.

``--dry-run`` lists the parts left, in order, with the command each runs, and exits.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from slm.records.parts import Part, spec_name, study_parts

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Entry:
    """One spec of the queue: its parts run by ``study_part.py --spec SPEC [--out OUT] sweep.name=NAME OVERRIDES``."""

    spec: str
    out: str | None = None  # study_part's --out (default benchmarks/results/<study>)
    name: str | None = None  # the sweep name, with {label} (default: study_part's <study>-<label>)
    overrides: tuple[str, ...] = ()
    # Commands run in this checkout when one of its parts lands / when its last part lands (the readings that combine
    # committed parts): `python` and `slm` are this environment's.
    after_each: tuple[str, ...] = ()
    after_all: tuple[str, ...] = ()

    @classmethod
    def of(cls, raw: dict, where: str) -> Entry:
        keys = {"spec", "out", "name", "overrides", "after_each", "after_all"}
        unknown = set(raw) - keys
        if unknown or "spec" not in raw:
            raise SystemExit(f"{where}: {'unknown keys ' + str(sorted(unknown)) if unknown else 'no spec'} "
                             f"(an entry has spec and optionally {', '.join(sorted(keys - {'spec'}))})")
        return cls(raw["spec"], raw.get("out"), raw.get("name"), tuple(raw.get("overrides") or ()),
                   tuple(raw.get("after_each") or ()), tuple(raw.get("after_all") or ()))

    def results(self) -> str:
        return self.out or f"benchmarks/results/{spec_name(self.spec)}"

    def command(self, part: Part) -> list[str]:
        cmd = ["benchmarks/study_part.py", "--spec", self.spec, "--seed", str(part.seed)]
        cmd += ["--part", part.cut] if part.cut else []
        cmd += ["--out", self.out] if self.out else []
        cmd += [f"sweep.name={self.name.format(label=part.label)}"] if self.name else []
        return cmd + list(self.overrides)


def read_queue(path: Path) -> tuple[str, list[Entry]]:
    raw = yaml.safe_load(path.read_text()) or {}
    if not raw.get("commit") or not isinstance(raw.get("queue"), list):
        raise SystemExit(f"{path}: needs 'commit' (the parts' commit) and 'queue' (a list of specs)")
    return str(raw["commit"]), [Entry.of(e, f"{path}: queue[{i}]") for i, e in enumerate(raw["queue"])]


def pending(entries: list[Entry], checkout: Path) -> list[tuple[Entry, Part]]:
    """The parts without a ``part.json`` in this checkout, in order."""
    return [(entry, part) for entry in entries for part in study_parts(checkout, entry.spec, entry.results()).waiting]


def landed(entry: Entry, part: Part, worktree: Path) -> bool:
    return (worktree / entry.results() / part.label / "part.json").exists()


def copy_back(entry: Entry, part: Part, checkout: Path, worktree: Path) -> bool:
    """The part's tables, landed in the worktree, copied into this checkout (True), or False when not landed."""
    if not landed(entry, part, worktree):
        return False
    shutil.copytree(worktree / entry.results() / part.label, checkout / entry.results() / part.label,
                    dirs_exist_ok=True)
    print(f"[queue] {spec_name(entry.spec)} {part.label}: landed, copied into {entry.results()}/{part.label}: "
          "commit it", flush=True)
    return True


def after_landing(entry: Entry, checkout: Path) -> list[str]:
    """What a landed part sets going in this checkout: its entry's ``after_each``, its ``after_all`` when no part of
    the entry is left, then ``slm docs write`` (the docs' generated numbers from the new tables). Each command as run;
    a failing one stops the queue, naming it."""
    commands = list(entry.after_each)
    if study_parts(checkout, entry.spec, entry.results()).complete:
        commands += entry.after_all
    commands.append("slm docs write")
    bin_dir = Path(sys.executable).parent
    for command in commands:
        argv = shlex.split(command)
        argv[0] = sys.executable if argv[0] == "python" else str(bin_dir / argv[0]) if argv[0] == "slm" else argv[0]
        print(f"[queue] {command}", flush=True)
        done = subprocess.run(argv, cwd=checkout, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"[queue] {command} exited {done.returncode} in {checkout}:\n{done.stderr[-2000:]}")
    return commands


def worktree_of(commit: str, where: Path) -> Path:
    """A worktree of ``commit`` with this checkout's runs/ and data/ linked in (made when missing)."""
    if not where.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(where), commit], cwd=ROOT, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, check=True)
    want = subprocess.run(["git", "rev-parse", commit], cwd=ROOT, capture_output=True, text=True, check=True)
    if head.stdout != want.stdout:
        raise SystemExit(f"{where} is at {head.stdout.strip()[:7]}, the queue's commit is {commit}: remove it "
                         f"(git worktree remove {where}) or name another --worktree")
    for shared in ("runs", "data"):
        (ROOT / shared).mkdir(exist_ok=True)
        link = where / shared
        if not link.exists():
            link.symlink_to(ROOT / shared)
    return where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", type=Path, default=ROOT / "benchmarks" / "study_queue.yaml")
    parser.add_argument("--worktree", type=Path, help="default: /tmp/slm-queue-<commit>")
    parser.add_argument("--dry-run", action="store_true", help="list the parts left and their commands")
    args = parser.parse_args()
    commit, entries = read_queue(args.queue)
    worktree = args.worktree or Path(f"/tmp/slm-queue-{commit}")
    left = pending(entries, ROOT)
    if args.dry_run:
        print(f"[queue] {len(left)} parts not in this checkout, to run from {commit} in {worktree}:")
        for entry, part in left:
            what = ("landed in the worktree, copied back when the queue runs" if landed(entry, part, worktree)
                    else f"python {' '.join(entry.command(part))}")
            print(f"  {spec_name(entry.spec)} {part.label}: {what}")
        return
    here = worktree_of(commit, worktree)
    left = [(entry, part) for entry, part in left if not copy_back(entry, part, ROOT, here)]
    # Each entry's chores once at the start, for what is in: a queue stopped between a copy and its chores (the
    # session ended) leaves none undone; they are idempotent and take seconds.
    failed: list[str] = []  # a reading that fails is said, and never holds up the parts after it
    for entry in entries:
        if study_parts(ROOT, entry.spec, entry.results()).landed:
            chores(entry, failed)
    print(f"[queue] {len(left)} parts to run, from {commit} in {here}", flush=True)
    env = {**os.environ, "PYTHONPATH": str(here / "platform"), "HF_HUB_OFFLINE": "1"}
    slm = str(Path(sys.executable).with_name("slm"))
    if left and not (ROOT / "data" / "corpus").exists():  # a fresh machine: the sources the parts' corpus stage builds from
        subprocess.run([slm, "corpus", "fetch", "--config", left[0][0].spec], cwd=here, env=env, check=True)
    logs = ROOT / "runs" / "queue"
    logs.mkdir(parents=True, exist_ok=True)
    for entry, part in left:
        log = logs / f"{spec_name(entry.spec)}-{part.label}.log"
        print(f"[queue] {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} start {spec_name(entry.spec)} "
              f"{part.label} (log {log})", flush=True)
        with log.open("a") as out:
            rc = subprocess.run([sys.executable, *entry.command(part)], cwd=here, env=env, stdout=out,
                                stderr=subprocess.STDOUT).returncode
        print(f"[queue] {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} end {spec_name(entry.spec)} "
              f"{part.label}: exit {rc}", flush=True)
        if not copy_back(entry, part, ROOT, here):
            raise SystemExit(f"[queue] {spec_name(entry.spec)} {part.label} did not land (exit {rc}; its log: {log}): "
                             "the queue stops here; rerun it to resume the part")
        chores(entry, failed)
    if failed:
        raise SystemExit("[queue] every part ran; these chores failed (rerun them by hand, then commit):\n"
                         + "\n".join(failed))


def chores(entry: Entry, failed: list[str]) -> None:
    try:
        after_landing(entry, ROOT)
    except SystemExit as err:
        print(err, flush=True)
        failed.append(str(err).splitlines()[0])


if __name__ == "__main__":
    main()
