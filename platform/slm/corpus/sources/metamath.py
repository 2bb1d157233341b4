"""Math: the prose comments of Metamath's set.mm (Debian ``metamath-databases``, CC0).

set.mm interleaves formal statements with ``$( … $)`` comments that state and explain theorems in
words and math notation; the comments are the text. Formal statements are left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from slm.corpus.packages import Archive, Decode

_COMMENT = re.compile(r"\$\((.*?)\$\)", re.S)
_RULE = re.compile(r"^[#=*.~-]{8,}$", re.M)  # section banners made of punctuation


def comments(text: str) -> Iterator[str]:
    for match in _COMMENT.finditer(text):
        body = _RULE.sub("", match.group(1))
        body = "\n".join(line.strip() for line in body.splitlines())
        if len(body.strip()) >= 40:
            yield body.strip()


def extract(archives: dict[str, Archive], decode: Decode) -> Iterator[str]:
    (archive,) = archives.values()
    yield from comments(decode(archive.read("usr/share/metamath/databases/set.mm")))
