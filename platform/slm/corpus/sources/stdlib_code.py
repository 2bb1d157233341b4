"""Code: the Python standard library of the running interpreter (no download; version recorded).

Test packages (``test``, ``*tests``) and site-packages are skipped: the domain is library code.
"""

from __future__ import annotations

import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from slm.corpus.packages import Archive, Decode

_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "idle_test"}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def files() -> list[Path]:
    root = stdlib_root()
    keep = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts[:-1]
        if any(p in _SKIP_DIRS or p.startswith("test") or p.endswith("tests") for p in parts):
            continue
        keep.append(path)
    return keep


def extract(archives: dict[str, Archive], decode: Decode) -> Iterator[str]:
    paths = files()
    if not paths:
        raise FileNotFoundError(f"no Python files under the standard library at {stdlib_root()}")
    for path in paths:
        yield decode(path.read_bytes())


def describe() -> dict:
    return {"python": sys.version.split()[0], "stdlib": str(stdlib_root()), "files": len(files())}
