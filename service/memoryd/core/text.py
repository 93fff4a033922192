"""Small text helpers shared by the hot tiers' keyword ordering."""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> set[str]:
    return {w.casefold() for w in _WORD.findall(text)}


def overlap_score(query_words: set[str], text: str) -> float:
    """Share of the query's words found in `text`: 0..1, 0 for an empty query."""
    if not query_words:
        return 0.0
    return len(query_words & words(text)) / len(query_words)


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def snake_key(text: str) -> str:
    """A key's identity in lower snake case: "Lenguaje preferido" = "lenguaje_preferido"."""
    return "_".join(w.casefold() for w in _WORD.findall(text))
