"""What checking artifacts costs (issue 32): SHA-256 (what manifests record) against BLAKE2b side by side on
the same files (a ratio, this machine being shared), and the seconds a full check of each artifact takes.

    .venv/bin/python benchmarks/integrity.py data/corpus runs/quickstart/packed > benchmarks/results/integrity.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "platform"))

from slm.artifacts import file_sha256  # noqa: E402
from slm.runtime import cpu_model  # noqa: E402


def file_digest(path: Path, chunk: int = 1 << 22) -> str:
    """BLAKE2b (128-bit): the other candidate."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def timed(fn, files: list[Path]) -> float:
    started = time.perf_counter()
    for f in files:
        fn(f)
    return time.perf_counter() - started


def main() -> None:
    out = {"cpu": cpu_model(), "folders": []}
    for folder in map(Path, sys.argv[1:]):
        files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
        size = sum(f.stat().st_size for f in files)
        timed(file_digest, files)  # the page cache warm for both
        blake, sha = timed(file_digest, files), timed(file_sha256, files)
        blake2, sha2 = timed(file_digest, files), timed(file_sha256, files)  # twice, interleaved: the noise
        out["folders"].append({"folder": str(folder), "files": len(files), "bytes": size,
                               "blake2b_seconds": round(min(blake, blake2), 3),
                               "sha256_seconds": round(min(sha, sha2), 3),
                               "sha256_MB_per_s": round(size / 1e6 / min(sha, sha2)),
                               "blake2b_over_sha256": round(min(blake, blake2) / min(sha, sha2), 2)})
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
