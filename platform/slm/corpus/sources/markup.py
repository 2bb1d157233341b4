"""Markup to plain text (HTML, GNU info), shared by the manual-like sources."""

from __future__ import annotations

import re
from html.parser import HTMLParser

_BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "dt", "dd", "table",
          "section", "blockquote", "ul", "ol", "title"}
_SKIP = {"script", "style", "nav", "head"}


class _TextParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in _SKIP:
            self.skip += 1
        elif tag in _BLOCK:
            self.parts.append("\n\n")

    def handle_endtag(self, tag):
        if tag in _SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in _BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    parser = _TextParser()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    text = re.sub(r"[ \t]+", " ", text)
    return re.sub(r"\n\s*\n\s*", "\n\n", text).strip()


def info_to_text(info: str) -> str:
    """GNU info: drop the node header lines and the ``\\x1f`` separators, keep the prose."""
    nodes = info.split("\x1f")
    keep = []
    for node in nodes:
        lines = node.strip("\n").split("\n")
        if lines and lines[0].startswith("File:"):
            lines = lines[1:]
        if lines and (lines[0].startswith("Tag Table:") or lines[0].startswith("End Tag Table")):
            continue
        keep.append("\n".join(lines))
    return "\n\n".join(keep)
