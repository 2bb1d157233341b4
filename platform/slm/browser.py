"""A real headless browser wherever the platform runs, for checking what a user sees (the report page, the dashboard,
TensorBoard): Debian's ``chromium`` when it is installed, else the same package and the libraries this machine lacks,
fetched with ``apt-get download`` (no root, nothing installed system-wide: the corpus's own way of fetching, through
``slm.corpus.packages``) into a cache and unpacked there.

    from slm.browser import chromium
    dom = chromium().dump_dom(Path("report.html").as_uri())

The libraries are the closure of chromium's Depends (first alternative of each) that ``dpkg-query`` does not find
installed; they run from the cache through ``LD_LIBRARY_PATH``. A machine without apt (not Debian) gets a clear error
naming what to install.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from slm.artifacts import atomic_write_json
from slm.corpus.packages import Package, SourcePackageError, _deb_data_tar, _decompress, fetch

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "slm" / "chromium"
HEADLESS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars")


class BrowserError(RuntimeError):
    """No browser here, and none can be fetched: says why and what to install."""


@dataclass(frozen=True)
class Chromium:
    binary: Path
    env: dict[str, str] = field(default_factory=dict)  # added to the environment (LD_LIBRARY_PATH of a fetched one)
    source: str = "PATH"  # where it came from: PATH, or the cache folder it was unpacked into

    def argv(self, *flags: str, profile: str | Path) -> list[str]:
        return [str(self.binary), *HEADLESS, f"--user-data-dir={profile}", *flags]

    def popen(self, *flags: str, profile: str | Path, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(self.argv(*flags, profile=profile), env={**os.environ, **self.env}, **kwargs)

    def run(self, *flags: str, timeout: float = 120) -> str:
        """Run it to the end with ``flags``; its stdout. A failure raises with the end of its stderr."""
        with tempfile.TemporaryDirectory(prefix="slm-chromium-") as profile:
            proc = subprocess.run(self.argv(*flags, profile=profile), env={**os.environ, **self.env},
                                  capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise BrowserError(f"{self.binary} exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
        return proc.stdout

    def dump_dom(self, url: str, budget_ms: int = 5000) -> str:
        """The page's DOM after ``budget_ms`` of virtual time (scripts run, images decode)."""
        return self.run(f"--virtual-time-budget={budget_ms}", "--dump-dom", url)

    def version(self) -> str:
        return self.run("--version", timeout=60).strip()


def chromium(cache: Path = CACHE) -> Chromium:
    """A headless Chromium: Debian's on PATH, else fetched into ``cache`` (once; later calls reuse it)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return Chromium(Path(found))
    if shutil.which("apt-get") is None or shutil.which("dpkg-query") is None:
        raise BrowserError("no chromium on PATH and no apt here to fetch Debian's: install Chromium (chromium on "
                           "PATH) to check pages in a real browser")
    root = cache / "root"
    if not (cache / "manifest.json").exists():
        _unpack(cache, _missing("chromium"))
    libraries = sorted({str(p.parent) for p in root.rglob("*.so*") if p.is_file()})
    return Chromium(root / "usr" / "lib" / "chromium" / "chromium", {"LD_LIBRARY_PATH": ":".join(
        libraries + [os.environ.get("LD_LIBRARY_PATH", "")]).rstrip(":")}, str(cache))


def _installed(package: str) -> bool:
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return "install ok installed" in proc.stdout


def _depends(package: str) -> list[str]:
    """Its Depends and Pre-Depends, the first alternative of each (apt-cache's ``|`` marks the ones after)."""
    out = subprocess.run(["apt-cache", "depends", "--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks",
                          "--no-replaces", "--no-enhances", package], capture_output=True, text=True).stdout
    deps, alternative = [], False
    for line in out.splitlines()[1:]:
        kind, _, name = line.strip().partition(":")
        if kind.lstrip("|") in ("Depends", "PreDepends"):
            name = name.strip()
            if not alternative and not name.startswith("<"):  # <virtual>: provided by what is installed
                deps.append(name)
            alternative = kind.startswith("|")
    return deps


def _missing(package: str) -> list[str]:
    """``package`` and every package of its dependency closure that is not installed here."""
    seen, todo, missing = set(), [package], []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if not _installed(name):
            missing.append(name)
            todo += _depends(name)
    return sorted(missing)


def _unpack(cache: Path, packages: list[str]) -> None:
    """Fetch each .deb into ``cache/debs`` and unpack its files into ``cache/root`` (atomically: a temp folder
    renamed), then the manifest that marks it done; the .debs go (~200 MB)."""
    debs = cache / "debs"
    records = []
    for name in packages:
        try:
            records.append(fetch(Package("deb", name), debs))
        except SourcePackageError as err:
            raise BrowserError(f"cannot fetch Chromium's package {name}: {err}") from err
    tmp = Path(tempfile.mkdtemp(prefix=".root-", dir=cache))
    for record in records:
        package = Package("deb", record["name"])
        data = _decompress(_deb_data_tar(debs / record["file"], package))
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tmp, filter="tar")
    shutil.rmtree(cache / "root", ignore_errors=True)
    tmp.rename(cache / "root")
    atomic_write_json(cache / "manifest.json", {"packages": {r["name"]: r["version"] for r in records}})
    shutil.rmtree(debs)  # unpacked: the manifest keeps their versions
