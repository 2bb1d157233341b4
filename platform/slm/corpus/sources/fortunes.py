"""BSD fortunes (Debian ``fortunes``): each file is records separated by a line holding only ``%``."""

from __future__ import annotations

import re
from collections.abc import Iterator

from slm.corpus.packages import Archive, Decode

_SEPARATOR = re.compile(rb"\n%\n")
_ROOT = "usr/share/games/fortunes/"


def extract(archives: dict[str, Archive], decode: Decode) -> Iterator[str]:
    (archive,) = archives.values()
    names = [
        n for n in archive.names()
        if n.startswith(_ROOT) and not n.endswith((".dat", ".u8")) and "/off/" not in n
    ]
    for name in archive.require(names, "fortune files"):
        for record in _SEPARATOR.split(archive.read(name)):
            yield decode(record)
