"""dictd dictionaries (GCIDE, WordNet, FOLDOC, Jargon File, Devil's Dictionary) from Debian's dict-*.

A dictd database is ``NAME.index`` (headword, base64 offset, base64 length per line) plus
``NAME.dict.dz`` (a gzip-compatible dictzip file). We slice each entry out by its offset, once per
distinct (offset, length), in file order, and skip the ``00-database-*`` metadata entries.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator

from slm.corpus.packages import Archive, Decode

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64_VALUE = {c: i for i, c in enumerate(_B64)}


def b64_number(text: str) -> int:
    value = 0
    for char in text:
        value = value * 64 + _B64_VALUE[char]
    return value


def entries(archive: Archive, db: str) -> Iterator[bytes]:
    index = archive.read(f"usr/share/dictd/{db}.index").decode("utf-8", errors="replace")
    body = gzip.decompress(archive.read(f"usr/share/dictd/{db}.dict.dz"))
    spans = set()
    for line in index.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0].startswith("00-database") or parts[0].startswith("00database"):
            continue
        spans.add((b64_number(parts[1]), b64_number(parts[2])))
    for offset, length in sorted(spans):
        yield body[offset : offset + length]


def extractor(db: str):
    def extract(archives: dict[str, Archive], decode: Decode) -> Iterator[str]:
        (archive,) = archives.values()
        for raw in entries(archive, db):
            yield decode(raw)

    extract.__name__ = f"dictd_{db}"
    return extract
