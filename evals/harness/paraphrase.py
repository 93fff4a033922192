"""Word overlap between a query and a memory: a paraphrase case must share no content word."""

from __future__ import annotations

import re
import unicodedata

# Function words, pronouns and the generic "user": words a paraphrase may share.
_STOP_WORDS_TEXT = """
    a about above after again against all also am an and any anything are as at be because
    been before being below between both but by can could did do does doing down during each
    else every everything few for from further get got had has have having he her here hers
    herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should
    so some something such than that the their theirs them themselves then there these they
    this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves s t d ll m re ve don doesn
    didn isn wasn aren weren won user users
"""
_STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_WORD_RE = re.compile(r"[^\W_]+")


def _stem(word: str) -> str:
    for suffix, repl in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + repl
    return word


def content_words(text: str) -> set[str]:
    """Lower-cased, accent-folded, crudely stemmed words of a text, stop words removed."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return {_stem(w) for w in _WORD_RE.findall(folded) if w not in _STOP_WORDS}


def _related(a: str, b: str) -> bool:
    short, long_ = sorted((a, b), key=len)
    if a == b or (len(short) >= 4 and long_.startswith(short)):
        return True
    return len(short) >= 5 and a[:5] == b[:5]


def shared_content_words(query: str, memory: str) -> set[str]:
    """Query words that a memory also contains (equal stems, a shared prefix of 5+ letters,
    or one word a 4+-letter prefix of the other): a paraphrase case must have none."""
    memory_words = content_words(memory)
    return {q for q in content_words(query) if any(_related(q, m) for m in memory_words)}
