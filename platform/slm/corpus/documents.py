"""Documents: decoding with accounting, stable ids, splitting long texts, grouping short entries."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

REPLACEMENT = "\ufffd"
_BLANK_LINES = re.compile(r"\n\s*\n")
_TRAILING_SPACE = re.compile(r"[ \t]+\n")


@dataclass
class SourceCounts:
    """What happened to one source's raw records on their way to documents."""

    records: int = 0
    documents: int = 0
    chars: int = 0
    utf8_bytes: int = 0
    empty_dropped: int = 0
    decode_errors: int = 0  # records with bytes that were not valid UTF-8 (decoded with U+FFFD)
    replaced_chars: int = 0
    split_pieces: int = 0  # extra documents made by splitting long ones
    extra: dict = field(default_factory=dict)


def decode(raw: bytes | str, encoding: str = "utf-8", *, counts: SourceCounts) -> str:
    """Decode ``raw`` with replacement, counting the records and characters that needed it."""
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError:
        text = raw.decode(encoding, errors="replace")
        counts.decode_errors += 1
        counts.replaced_chars += text.count(REPLACEMENT) - raw.count(REPLACEMENT.encode())
        return text


def normalize(text: str) -> str:
    """Unix newlines, no trailing spaces, at most one blank line in a row, stripped ends."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    text = _TRAILING_SPACE.sub("\n", text)
    text = _BLANK_LINES.sub("\n\n", text)
    return text.strip()


def doc_id(text: str) -> str:
    """A stable content hash: the same text gets the same id in every build and on every machine."""
    return hashlib.blake2b(text.encode("utf-8", errors="surrogatepass"), digest_size=8).hexdigest()


def hash_uniform(key: str) -> float:
    """A uniform number in [0, 1) fixed by ``key`` (e.g. ``f"{seed}:{doc_id}"``): how every sample,
    draw and noise term of the data stages is made deterministic across machines, blocks and reruns."""
    digest = hashlib.blake2b(key.encode("utf-8", errors="surrogatepass"), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2**64


def hash_seed(key: str) -> int:
    """A 64-bit integer seed fixed by ``key`` (for a per-row numpy generator)."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", errors="surrogatepass"), digest_size=8).digest(), "big")


def in_valid_split(doc_id_: str, fraction: float) -> bool:
    """Whether a document belongs to the valid split: its hash as a fraction of 2**64, so the
    split is fixed by the text alone, the same in every build, import and machine."""
    return int(doc_id_, 16) / 2**64 < fraction


def split_long(text: str, max_chars: int) -> list[str]:
    """Split into pieces of at most ``max_chars``: at paragraph boundaries, then lines, and a line longer
    than that at its last sentence end, else its last space, in the second half of the limit (a hard
    cut only inside a word longer than half the limit): a 20 MB one-line record's pieces once started
    mid-word three times in four."""
    if len(text) <= max_chars:
        return [text]
    pieces: list[str] = []
    current = ""
    for para in _paragraph_units(text, max_chars):
        if current and len(current) + 2 + len(para) > max_chars:
            pieces.append(current)
            current = para
        else:
            current = f"{current}\n\n{para}" if current else para
    if current:
        pieces.append(current)
    return [p.strip() for p in pieces if p.strip()]


def _paragraph_units(text: str, max_chars: int) -> Iterator[str]:
    for para in text.split("\n\n"):
        if len(para) <= max_chars:
            yield para
            continue
        line_buf = ""
        for line in para.split("\n"):
            while len(line) > max_chars:  # a single giant line: cut at a sentence, else a word
                if line_buf:
                    yield line_buf
                    line_buf = ""
                cut = _cut(line, max_chars)
                yield line[:cut].rstrip()
                line = line[cut:].lstrip()
            if line_buf and len(line_buf) + 1 + len(line) > max_chars:
                yield line_buf
                line_buf = line
            else:
                line_buf = f"{line_buf}\n{line}" if line_buf else line
        if line_buf:
            yield line_buf


def group_pages(entries: Iterable[str], page_chars: int) -> Iterator[str]:
    """Join consecutive short entries (dictionary headwords, ontology terms) into pages."""
    page: list[str] = []
    size = 0
    for entry in entries:
        size += len(entry) + (2 if page else 0)  # the "\n\n" separators sit between entries only
        page.append(entry)
        if size >= page_chars:
            yield "\n\n".join(page)
            page, size = [], 0
    if page:
        yield "\n\n".join(page)


SENTENCE_END = re.compile(r"[.!?…][\"'”’)\]]*\s+")
SPACE = re.compile(r"\s+")


def _cut(line: str, max_chars: int) -> int:
    """Where to end a piece of ``line`` (longer than ``max_chars``): after its last sentence end within
    the limit, else at its last space, if that is past half the limit; else at the limit."""
    head = line[:max_chars + 1]
    for boundary in (SENTENCE_END, SPACE):
        ends = [m.end() if boundary is SENTENCE_END else m.start() for m in boundary.finditer(head)]
        ends = [e for e in ends if max_chars // 2 <= e <= max_chars]
        if ends:
            return ends[-1]
    return max_chars
