"""benchmarks/ is kept to what the docs quote (issue 65): benchmarks/README.md indexes every script, and each row
names exactly the pages that name the script and the tests that run it; a script that nothing names fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELPERS = {"timing.py"}  # modules the scripts import, not scripts


def named_by(script: str) -> tuple[list[str], list[str]]:
    docs = sorted(str(p.relative_to(ROOT)) for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
                  if script in p.read_text())
    tests = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py")
                   if p.name != Path(__file__).name and script in p.read_text())
    return docs, tests


def index() -> dict[str, tuple[list[str], list[str]]]:
    rows = {}
    for line in (ROOT / "benchmarks" / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.split(" | ")]
        if len(cells) == 4 and cells[0].startswith("| `"):
            rows[cells[0].strip("| `")] = (re.findall(r"\[([^\]]+)\]\(", cells[2]), re.findall(r"`([^`]+)`", cells[3]))
    return rows


def test_every_script_is_indexed_as_what_names_it():
    rows = index()
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
    assert sorted(rows) == scripts, "benchmarks/README.md's index and the folder differ"
    for script in scripts:
        docs, tests = named_by(script)
        assert rows[script] == (docs, tests), f"{script}: the index says {rows[script]}, the tree {(docs, tests)}"
        assert docs or tests or script in HELPERS, f"{script}: no page quotes it and no test runs it: retire it"


def test_the_scripts_reach_the_platform_through_its_public_names():
    """Issue 65: a benchmark imports what the package offers (modules and names without a leading underscore),
    never a private helper, so that a refactor inside a module cannot silently break a script the docs quote."""
    import ast

    private = []
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("slm"):
                names = [*(node.module or "").split("."), *(a.name for a in node.names)]
                private += [f"{script.name}: from {node.module} import {n}" for n in names if n.startswith("_")]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id == "slm":
                    private.append(f"{script.name}: {ast.unparse(node)}")
    assert private == [], private


def test_no_script_shadows_a_standard_module():
    """A script runs with benchmarks/ first on sys.path: one named like a standard module (``queue.py`` was) is what
    every other script's imports then find — pyarrow failed to import ``queue.Queue`` in each of them."""
    import sys

    shadowing = [p.name for p in (ROOT / "benchmarks").glob("*.py") if p.stem in sys.stdlib_module_names]
    assert shadowing == [], shadowing
