"""docs/usage.md run as written (issue 31): every command of its ```bash blocks, in the order the page gives
them, and its ```python block, from the repository root with `.venv/bin` first on PATH, as a reader who
copies them would. Each bash block runs as one shell script (`set -e`: an `export` carries to the block's
later lines); a `tensorboard` line is a server: started in the background, it passes when its page answers
over HTTP, and is stopped. Where the page shows a command's output (the block right after it), the
output is compared with it: JSON field by field (paths and `seconds` aside), text exactly.

    .venv/bin/python benchmarks/usage_commands.py > benchmarks/results/usage_commands.json

Needs the README's main command done (`runs/quickstart/` with its sweep) and no other Ray on this machine:
the persistent-head recipe ends with `ray stop`, which stops every Ray on the machine, so the script
refuses to start while a raylet runs. ~5 minutes on 2 cores when the quickstart's outputs are current (the
quickstart rerun twice, all of it found done); when the corpus changed since (a new corpus builder), the first
rerun makes its data stages again: ~50 minutes on 2 AVX2 cores (measured 2026-12-04: the embed stage alone
~25 minutes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "usage.md"
SCRATCH = Path("/tmp/usage")  # the page's own scratch folder
BLOCK_LIMIT_S = 3 * 3600
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
# A comment that quotes what a command prints (`# "connected to Ray at …", not …`): it must print it.
MUST_SAY = re.compile(r'#\s*"([^"]+?)\s*…"')


@dataclass
class Block:
    language: str
    code: str
    shown: str | None  # the output the page shows right after it, if any
    shown_language: str | None


@dataclass
class Outcome:
    what: str
    rc: int
    seconds: float
    tail: list[str]
    matches_page: bool | None = None  # None: the page shows no output for it
    differences: list[str] = field(default_factory=list)


def blocks(page: str) -> list[Block]:
    """The page's fenced blocks that are commands (bash, python), each with the output block after it."""
    fences = list(FENCE.finditer(page))
    found = []
    for i, fence in enumerate(fences):
        if fence.group(1) not in ("bash", "python"):
            continue
        after = fences[i + 1] if i + 1 < len(fences) else None
        shown = (after if after is not None and after.group(1) in ("", "json")
                 and not page[fence.end():after.start()].strip() else None)
        found.append(Block(fence.group(1), fence.group(2), shown.group(2) if shown else None,
                           shown.group(1) if shown else None))
    return found


def environment() -> dict[str, str]:
    return {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def compare(shown: str, language: str, printed: str) -> list[str]:
    """Where a command's output differs from what the page shows (JSON: the fields, paths and timings
    aside; text: the lines)."""
    if language == "json":
        try:
            got = json.loads(printed[printed.index("{"):])
        except ValueError:
            return ["the output is not JSON"]
        want = json.loads(shown)
        moving = {"seconds", "written", "out"}  # timings, and paths that name this machine's folders
        return [f"{k}: page {want.get(k)!r}, ran {got.get(k)!r}" for k in sorted(set(want) | set(got))
                if k not in moving and not _same(want.get(k), got.get(k))]
    want_lines, got_lines = shown.rstrip("\n").split("\n"), printed.rstrip("\n").split("\n")
    return [] if want_lines == got_lines else [f"text: page {want_lines[:3]!r}…, ran {got_lines[:3]!r}…"]


def _same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a))
    if isinstance(a, str) and isinstance(b, str) and "runs/" in a and "runs/" in b:
        return a[a.index("runs/"):] == b[b.index("runs/"):]  # a path in the checkout, wherever it is
    return a == b


def serve(line: str, env: dict[str, str], url: str = "http://127.0.0.1:6006/", wait: float = 90) -> Outcome:
    """A server line: started, asked for its page until it answers, stopped."""
    began = time.perf_counter()
    proc = subprocess.Popen(line, shell=True, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    status = 0
    while time.perf_counter() - began < wait and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                status = response.status
                break
        except OSError:
            time.sleep(1)
    answered = status == 200
    os.killpg(proc.pid, 15)
    out, _ = proc.communicate(timeout=30)
    return Outcome(line, 0 if answered else 1, round(time.perf_counter() - began, 1),
                   [f"HTTP {status} from {url}" if answered else "no answer", *out.strip().splitlines()[-3:]])


def run_bash(block: Block, env: dict[str, str]) -> list[Outcome]:
    """A bash block: server lines one by one, the other lines as one script."""
    lines = [ln for ln in block.code.splitlines() if ln.strip()]
    if all(ln.split()[0] == "tensorboard" for ln in lines):
        return [serve(ln, env) for ln in lines]
    began = time.perf_counter()
    try:  # the head block reruns the quickstart: its data stages again when the corpus changed (~50 min on AVX2)
        proc = subprocess.run(["bash", "-e", "-c", block.code], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=BLOCK_LIMIT_S)
    except subprocess.TimeoutExpired as err:
        said = ((err.stdout or b"") + (err.stderr or b"")).decode(errors="replace").strip().splitlines()[-4:]
        return [Outcome(" && ".join(ln.split("  #")[0].strip() for ln in lines), 124,
                        round(time.perf_counter() - began, 1), [f"still running after {BLOCK_LIMIT_S} s", *said])]
    printed = proc.stdout
    outcome = Outcome(" && ".join(ln.split("  #")[0].strip() for ln in lines), proc.returncode,
                      round(time.perf_counter() - began, 1), (proc.stdout + proc.stderr).strip().splitlines()[-4:])
    for line in lines:
        said = MUST_SAY.search(line)
        if said and said.group(1) not in proc.stdout + proc.stderr:
            outcome.rc = outcome.rc or 1
            outcome.differences.append(f"did not say {said.group(1)!r}")
    if block.shown is not None:
        outcome.differences += compare(block.shown, block.shown_language or "", printed)
        outcome.matches_page = not outcome.differences
    return [outcome]


def run_python(block: Block, env: dict[str, str]) -> Outcome:
    began = time.perf_counter()
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-c", block.code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    return Outcome(block.code.strip().splitlines()[-1], proc.returncode, round(time.perf_counter() - began, 1),
                   (proc.stdout + proc.stderr).strip().splitlines()[-4:])


def main() -> int:
    raylets = [p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "raylet"]
    if raylets:
        print(f"usage_commands: a Ray runs on this machine (raylet pids {raylets}); the page's `ray stop` would "
              "end it: run this when no other Ray runs", file=sys.stderr)
        return 2
    if not (REPO / "runs" / "quickstart" / "sweeps" / "quickstart" / "results.parquet").exists():
        print("usage_commands: run the README's main command first (runs/quickstart/ with its sweep)", file=sys.stderr)
        return 2
    shutil.rmtree(SCRATCH, ignore_errors=True)
    env = environment()
    outcomes: list[Outcome] = []
    for block in blocks(PAGE.read_text()):
        done = run_bash(block, env) if block.language == "bash" else [run_python(block, env)]
        for outcome in done:
            print(f"[usage] {'ok' if outcome.rc == 0 else 'FAILED'} in {outcome.seconds} s: {outcome.what[:120]}",
                  file=sys.stderr, flush=True)
        outcomes += done
    token = Path("~/.ray/auth_token").expanduser()
    secret = token.read_text().strip() if token.exists() else None
    for outcome in outcomes:  # `ray get-auth-token` prints it: never into a committed file
        outcome.tail = [line.replace(secret, "<token>") if secret else line for line in outcome.tail]
    print(json.dumps({
        "page": str(PAGE.relative_to(REPO)),
        "commands_passed": f"{sum(o.rc == 0 for o in outcomes)} / {len(outcomes)}",
        "outputs_as_shown": f"{sum(bool(o.matches_page) for o in outcomes)} / "
                            f"{sum(o.matches_page is not None for o in outcomes)}",
        "outcomes": [asdict(o) for o in outcomes]}, indent=2))
    return 0 if all(o.rc == 0 for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
