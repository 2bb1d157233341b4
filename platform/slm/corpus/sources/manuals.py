"""Debian and GNU manuals (handbook, reference, policy, developers' reference, GNU standards).

One document per chapter/section file; long chapters are split later by the builder.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator

from slm.corpus.packages import Archive, Decode
from slm.corpus.sources.markup import html_to_text, info_to_text

# (package, which files, how to read them)
_RULES = {
    "debian-handbook": (re.compile(r"^usr/share/doc/debian-handbook/html/en-US/[^/]+\.html$"), "html"),
    "debian-reference-en": (re.compile(r"^usr/share/debian-reference/[^/]+\.en\.html$"), "html"),
    "debian-policy": (re.compile(r"^usr/share/doc/debian-policy/policy\.html/_sources/.+\.rst\.txt$"), "text"),
    "developers-reference": (re.compile(r"^usr/share/developers-reference/_sources/.+\.rst\.txt$"), "text"),
    "gnu-standards": (re.compile(r"^usr/share/info/(standards|maintain)\.info\.gz$"), "info"),
}


def extract(archives: dict[str, Archive], decode: Decode) -> Iterator[str]:
    for package, archive in archives.items():
        pattern, kind = _RULES[package]
        names = archive.require([n for n in archive.names() if pattern.match(n)], f"{package} manual files")
        for name in names:
            raw = archive.read(name)
            if name.endswith(".gz"):
                raw = gzip.decompress(raw)
            text = decode(raw)
            yield html_to_text(text) if kind == "html" else info_to_text(text) if kind == "info" else text
