"""The study parts' queue (benchmarks/study_queue.py): which parts are left, what each runs, a landed part copied back,
and the worktree the parts run in."""
import importlib.util
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from slm.records.parts import cuts, study_parts

REPO = Path(__file__).resolve().parents[1]
# The queue runs parts from a git worktree of its commit: a checkout that is no git clone (an exported tree) has none.
needs_git = pytest.mark.skipif(not (REPO / ".git").exists(), reason=f"{REPO} is not a git clone")


@pytest.fixture(scope="module")
def queue():
    spec = importlib.util.spec_from_file_location("slm_queue", REPO / "benchmarks" / "study_queue.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name)


@needs_git
def test_the_shipped_queue_names_committed_specs_and_a_commit_of_this_history(queue):
    commit, entries = queue.read_queue(REPO / "benchmarks" / "study_queue.yaml")
    subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO, check=True)
    for entry in entries:
        assert (REPO / entry.spec).is_file(), entry.spec
        assert study_parts(REPO, entry.spec, entry.results())  # its seeds × its parts
        for command in entry.after_each + entry.after_all:  # each names a script of the tree or an slm command
            argv = shlex.split(command)
            assert (argv[0] == "python" and (REPO / argv[1]).is_file()) or argv[:2] == ["slm", "report"], command


def test_a_committed_part_is_not_run_again_and_the_pinned_parts_keep_its_command(queue):
    """The like-with-like part (study2 pinned, seed 0, part c) is committed: it is not pending, and the queue runs
    the pinned edition's other parts with the command that part ran with (its part.json's overrides)."""
    _, entries = queue.read_queue(REPO / "benchmarks" / "study_queue.yaml")
    pinned = next(e for e in entries if e.results() == "benchmarks/results/study2_pinned")
    left = [part.label for entry, part in queue.pending(entries, REPO) if entry is pinned]
    assert "seed0-c" not in left and "seed1-c" in left and len(left) == 19
    ran = json.loads((REPO / "benchmarks/results/study2_pinned/seed0-c/part.json").read_text())["overrides"]
    part = next(p for p in study_parts(REPO, pinned.spec, pinned.results()) if p.label == "seed0-c")
    command = pinned.command(part)
    assert command[:7] == ["benchmarks/study_part.py", "--spec", "jobs/sweeps/study2.yaml", "--seed", "0", "--part", "c"]
    assert set(command[9:]) == set(ran[3:])  # study_part adds the seed, the part's runs and its own name first


def test_a_part_landed_in_the_worktree_is_copied_back(queue, tmp_path):
    checkout, worktree = tmp_path / "checkout", tmp_path / "worktree"
    (checkout / "jobs/sweeps").mkdir(parents=True)
    (checkout / "jobs/sweeps/toy.yaml").write_text("sweep:\n  seeds: [0, 1]\n")
    entry = queue.Entry("jobs/sweeps/toy.yaml")
    assert [p.label for _, p in queue.pending([entry], checkout)] == ["seed0", "seed1"]
    done = worktree / "benchmarks/results/toy/seed0"
    done.mkdir(parents=True)
    (done / "part.json").write_text('{"part": "toy-seed0"}')
    (done / "results.csv").write_text("trial\n")
    part = study_parts(checkout, entry.spec)[0]
    assert queue.copy_back(entry, part, checkout, worktree)
    assert (checkout / "benchmarks/results/toy/seed0/results.csv").read_text() == "trial\n"
    assert [p.label for _, p in queue.pending([entry], checkout)] == ["seed1"]
    parts = study_parts(checkout, entry.spec)
    assert [p.label for p in parts.landed] == ["seed0"] and not parts.complete and str(parts) == "1 of 2"
    assert not queue.copy_back(entry, parts[1], checkout, worktree)


def test_a_queue_entry_with_an_unknown_key_is_refused(queue, tmp_path):
    path = tmp_path / "study_queue.yaml"
    path.write_text("commit: HEAD\nqueue:\n  - spec: jobs/sweeps/c5.yaml\n    seeds: [0]\n")
    with pytest.raises(SystemExit, match=r"study_queue.yaml: queue\[0\]: unknown keys \['seeds'\]"):
        queue.read_queue(path)


@needs_git
def test_the_worktree_is_the_commit_with_runs_and_data_shared(queue, tmp_path):
    where = tmp_path / "wt"
    try:
        queue.worktree_of("HEAD", where)
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
        assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True).stdout == head
        assert (where / "runs").resolve() == (REPO / "runs").resolve()
        assert (where / "data").resolve() == (REPO / "data").resolve()
        assert queue.worktree_of("HEAD", where) == where  # made once, then found
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=REPO, check=False)


def test_study_parts_are_each_seed_cut_by_the_parts_file():
    assert list(cuts(REPO, "jobs/sweeps/study2_own.yaml")) == ["a", "b", "c", "d"]
    assert cuts(REPO, "jobs/sweeps/c5.yaml") == {}
    labels = [p.label for p in study_parts(REPO, "jobs/sweeps/transfer.yaml")]
    assert labels[:4] == ["seed0-sp-low", "seed0-sp-high", "seed0-mup-low", "seed0-mup-high"] and len(labels) == 8


def test_a_landing_runs_its_entrys_commands_and_the_combining_one_when_the_last_part_is_in(queue, tmp_path, monkeypatch):
    """after_each runs at each landing; after_all only once every part of the entry is in; then `slm docs write`
    (here on a README without quote blocks); a failing command stops the queue naming it."""
    checkout = tmp_path
    (checkout / "jobs/sweeps").mkdir(parents=True)
    (checkout / "jobs/sweeps/toy.yaml").write_text("sweep:\n  seeds: [0, 1]\n")
    (checkout / "README.md").write_text("# toy\n")
    (checkout / "docs").mkdir()
    each = "python -c \"import pathlib; p = pathlib.Path('each.txt'); p.write_text(p.read_text() + 'x' if p.exists() else 'x')\""
    entry = queue.Entry("jobs/sweeps/toy.yaml", after_each=(each,), after_all=("python -c \"open('all.txt', 'w')\"",))
    first = checkout / "benchmarks/results/toy/seed0"
    first.mkdir(parents=True)
    (first / "part.json").write_text("{}")
    assert queue.after_landing(entry, checkout) == [each, "slm docs write"]
    assert (checkout / "each.txt").read_text() == "x" and not (checkout / "all.txt").exists()
    (checkout / "benchmarks/results/toy/seed1").mkdir()
    (checkout / "benchmarks/results/toy/seed1/part.json").write_text("{}")
    assert queue.after_landing(entry, checkout)[1] == entry.after_all[0]
    assert (checkout / "each.txt").read_text() == "xx" and (checkout / "all.txt").exists()
    failing = queue.Entry("jobs/sweeps/toy.yaml", after_each=("python -c \"raise SystemExit(3)\"",))
    with pytest.raises(SystemExit, match=r"raise SystemExit\(3\)\" exited 3"):
        queue.after_landing(failing, checkout)
    # In the queue a failing chore is said and recorded, and the parts after it still run.
    monkeypatch.setattr(queue, "ROOT", checkout)
    failed = []
    queue.chores(failing, failed)
    assert len(failed) == 1 and "exited 3" in failed[0]
