"""Where things are inside a corpus folder (bundled or imported): one definition for every reader."""

from __future__ import annotations

from pathlib import Path

GENERIC = "generic"
SPLITS = ("train", "valid")
# The corpus's own files, which its manifest records (not the embeddings and other outputs kept beside).
CORPUS_FILES = (GENERIC, "domains")


def generic_dir(corpus_dir: str | Path) -> Path:
    return Path(corpus_dir).expanduser() / GENERIC


def domain_dir(corpus_dir: str | Path, domain: str, split: str) -> Path:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return Path(corpus_dir).expanduser() / "domains" / domain / split


def domains(corpus_dir: str | Path) -> list[str]:
    root = Path(corpus_dir).expanduser() / "domains"
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def verify_corpus(corpus_dir: str | Path) -> None:
    """The corpus's shards against its manifest (sizes and hashes: a stage that reads the corpus checks it
    once as it starts). A folder of Parquet files made by other means (no manifest) is read as it is."""
    from slm.artifacts import read_manifest, verify

    if read_manifest(corpus_dir) is not None:
        verify(corpus_dir, "`slm corpus build` (the bundled corpus) or `slm corpus import … --replace` (yours)")


def corpus_files(corpus_dir: str | Path) -> dict[str, list[str]]:
    """Parquet files by split: ``all`` (generic), ``train`` and ``valid`` (specialist domains)."""
    corpus_dir = Path(corpus_dir).expanduser()
    if not corpus_dir.is_dir():
        raise FileNotFoundError(f"corpus folder {corpus_dir} does not exist: run `slm corpus build` "
                                "or `slm corpus import` first")
    files = {"all": sorted(str(p) for p in generic_dir(corpus_dir).glob("*.parquet"))}
    for split in SPLITS:
        files[split] = sorted(str(p) for d in domains(corpus_dir)
                              for p in domain_dir(corpus_dir, d, split).glob("*.parquet"))
    files = {k: v for k, v in files.items() if v}
    if not files:
        raise FileNotFoundError(f"corpus folder {corpus_dir} holds no Parquet shards")
    return files
