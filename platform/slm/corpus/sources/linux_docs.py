"""Technical documentation: the Linux kernel's Documentation/ tree (Debian ``linux-doc-6.1``).

One document per ``.rst``/``.txt`` file; device-tree bindings and the ABI listings (YAML and
key/value tables, not prose) are left out.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator

from slm.corpus.packages import Archive, Decode

_FILE = re.compile(r"^usr/share/doc/linux-doc-[\d.]+/Documentation/(?!devicetree/|ABI/).+\.(rst|txt)\.gz$")


def extract(archives: dict[str, Archive], decode: Decode) -> Iterator[str]:
    (archive,) = archives.values()
    names = [n for n in archive.names() if _FILE.match(n)]
    for name in archive.require(names, "Documentation/**/*.rst.gz"):
        yield decode(gzip.decompress(archive.read(name)))
