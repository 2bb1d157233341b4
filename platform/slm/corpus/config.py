"""The ``corpus`` section: where the corpus lives and how the bundled one is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slm.config import ConfigError, check_name

BUNDLED_DOMAINS = ["code", "legal", "medical", "math", "techdocs", "literature"]


@dataclass
class CorpusConfig:
    """The corpus on disk: the bundled sources (fetched to ``cache_dir``) or a user's import."""

    dir: str = "data/corpus"
    cache_dir: str = "~/.cache/slm/sources"
    domains: list[str] = field(default_factory=lambda: list(BUNDLED_DOMAINS))
    # Share of generic documents that may come from GCIDE + WordNet (the dictionaries are ~75% of
    # the generic bytes; uncapped, the generic mix would be a dictionary).
    dictionary_cap: float = 0.5
    # Dictionary-like sources (entries of a few dozen characters) are grouped into pages of about this
    # many characters, so that a document is a page, not a headword.
    page_chars: int = 4000
    # Longer documents are split at paragraph boundaries into pieces of at most this many characters.
    max_doc_chars: int = 8000
    # Fraction of each specialist domain held out as its valid split, chosen by document hash.
    valid_fraction: float = 0.05
    shard_docs: int = 4096
    workers: int = 2  # processes that extract sources in parallel

    def validate(self, prefix: str = "") -> None:
        for name in ("page_chars", "max_doc_chars", "shard_docs", "workers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"config key '{prefix}{name}': must be at least 1, got {getattr(self, name)}")
        for name in ("dictionary_cap", "valid_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"config key '{prefix}{name}': must be in [0, 1], got {getattr(self, name)}")
        for domain in self.domains:
            check_name(domain, f"{prefix}domains")
