"""BM25 sparse encoding for the lexical half of hybrid search.

The vector store multiplies query terms by IDF itself (Qdrant sparse vectors with
``Modifier.IDF``), so this module only produces:

* documents: the BM25 term-frequency part, ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``;
* queries: weight 1.0 per unique term (the store supplies the IDF).

Tokens become stable 32-bit ids so that documents written by one process are matched by
queries from another: ``token_id(term)`` is the big-endian integer of the 4-byte BLAKE2b
digest of the UTF-8 term. Python's ``hash()`` must never be used here (it is salted per
process).

Pipeline: NFKC + casefold, Unicode word tokens (letters/digits; ``_`` and punctuation
split), English stop-word removal, Porter stemming of ASCII words, hashing.
Pure Python, no I/O.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

__all__ = [
    "DEFAULT_AVG_DOC_LEN",
    "DEFAULT_B",
    "DEFAULT_K1",
    "STOP_WORDS",
    "BM25Encoder",
    "SparseVector",
    "encode_document",
    "encode_query",
    "porter_stem",
    "token_id",
    "tokenize",
]

DEFAULT_K1 = 1.2
DEFAULT_B = 0.75
DEFAULT_AVG_DOC_LEN = 40.0

# Letters and digits only: "_" is a word character for ``\w`` but splitting on it makes
# identifiers like "user_id" searchable by their parts.
_WORD_RE = re.compile(r"[^\W_]+")

# A compact English list (close to the usual NLTK/Lucene lists). Contraction fragments
# ("s", "t", "ll", ...) are included because the tokeniser splits on apostrophes.
_STOP_WORDS_TEXT = """
a about above after again against all am an and any are as at be because been before
being below between both but by can could did do does doing down during each few for
from further had has have having he her here hers herself him himself his how i if in
into is it its itself just me more most my myself no nor not of off on once only or
other our ours ourselves out over own same she should so some such than that the their
theirs them themselves then there these they this those through to too under until up
very was we were what when where which while who whom why will with would you your
yours yourself yourselves s t d ll m re ve doesn didn isn wasn aren weren
"""
STOP_WORDS: frozenset[str] = frozenset(_STOP_WORDS_TEXT.split())


@dataclass(frozen=True, slots=True)
class SparseVector:
    """A sparse vector: parallel ``indices`` (sorted, unique) and ``values``."""

    indices: tuple[int, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.indices) != len(self.values):
            raise ValueError("indices and values must have the same length")

    def __len__(self) -> int:
        return len(self.indices)


def token_id(term: str) -> int:
    """Stable non-negative 32-bit id of a (stemmed) term, identical in every process."""
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest(), "big")


def tokenize(text: str) -> list[str]:
    """Normalise, split, drop stop words and stem; returns terms in text order."""
    normalised = unicodedata.normalize("NFKC", text).casefold()
    return [porter_stem(word) for word in _WORD_RE.findall(normalised) if word not in STOP_WORDS]


def distinct_terms(text: str) -> list[str]:
    """The sorted distinct terms of ``text``: what a memory is counted under for IDF."""
    return sorted(set(tokenize(text)))


@dataclass(frozen=True, slots=True)
class BM25Encoder:
    """BM25 parameters; ``avg_doc_len`` is in tokens after stop-word removal."""

    k1: float = DEFAULT_K1
    b: float = DEFAULT_B
    avg_doc_len: float = DEFAULT_AVG_DOC_LEN

    def __post_init__(self) -> None:
        if self.k1 < 0 or not 0.0 <= self.b <= 1.0 or self.avg_doc_len <= 0:
            raise ValueError("need k1 >= 0, 0 <= b <= 1 and avg_doc_len > 0")

    def encode_document(self, text: str) -> SparseVector:
        terms = tokenize(text)
        if not terms:
            return SparseVector((), ())
        # Count by id, not by term: in the (rare) event of a hash collision the two terms
        # simply share one dimension instead of producing a duplicate index.
        counts = Counter(token_id(term) for term in terms)
        norm = self.k1 * (1.0 - self.b + self.b * len(terms) / self.avg_doc_len)
        indices = tuple(sorted(counts))
        values = tuple(counts[i] * (self.k1 + 1.0) / (counts[i] + norm) for i in indices)
        return SparseVector(indices, values)

    def encode_query(self, text: str) -> SparseVector:
        ids = sorted({token_id(term) for term in tokenize(text)})
        return SparseVector(tuple(ids), (1.0,) * len(ids))


def encode_document(
    text: str,
    *,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
    avg_doc_len: float = DEFAULT_AVG_DOC_LEN,
) -> SparseVector:
    """BM25 term-frequency weights of ``text`` (IDF is applied by the store)."""
    return BM25Encoder(k1=k1, b=b, avg_doc_len=avg_doc_len).encode_document(text)


def encode_query(text: str) -> SparseVector:
    """Weight 1.0 per unique term of ``text`` (IDF is applied by the store)."""
    return BM25Encoder().encode_query(text)


# --- Porter stemmer -------------------------------------------------------------------
# M. F. Porter, "An algorithm for suffix stripping", 1980, as published (without the
# later "bli"/"logi" departures of the reference C code). Written here so that no NLTK
# data or extra dependency is needed. Only plain ASCII words are stemmed.

_STEP2: tuple[tuple[str, str], ...] = (
    ("ational", "ate"),
    ("tional", "tion"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("izer", "ize"),
    ("abli", "able"),
    ("alli", "al"),
    ("entli", "ent"),
    ("eli", "e"),
    ("ousli", "ous"),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ator", "ate"),
    ("alism", "al"),
    ("iveness", "ive"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("aliti", "al"),
    ("iviti", "ive"),
    ("biliti", "ble"),
)
_STEP3: tuple[tuple[str, str], ...] = (
    ("icate", "ic"),
    ("ative", ""),
    ("alize", "al"),
    ("iciti", "ic"),
    ("ical", "ic"),
    ("ful", ""),
    ("ness", ""),
)
_STEP4: tuple[str, ...] = (
    "al",
    "ance",
    "ence",
    "er",
    "ic",
    "able",
    "ible",
    "ant",
    "ement",
    "ment",
    "ent",
    "ion",
    "ou",
    "ism",
    "ate",
    "iti",
    "ous",
    "ive",
    "ize",
)


def _longest_first(rules: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(rules, key=lambda rule: -len(rule[0])))


# The algorithm uses the longest matching suffix of a step and never falls back to a
# shorter one when its condition fails, so rules are tried longest first.
_STEP2_RULES = _longest_first(_STEP2)
_STEP3_RULES = _longest_first(_STEP3)
_STEP4_RULES = _longest_first(tuple((suffix, "") for suffix in _STEP4))


def _is_consonant(word: str, i: int) -> bool:
    ch = word[i]
    if ch in "aeiou":
        return False
    if ch == "y":
        return i == 0 or not _is_consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """Porter's m: the number of vowel-to-consonant transitions in ``stem``."""
    m = 0
    prev_vowel = False
    for i in range(len(stem)):
        vowel = not _is_consonant(stem, i)
        if prev_vowel and not vowel:
            m += 1
        prev_vowel = vowel
    return m


def _has_vowel(stem: str) -> bool:
    return any(not _is_consonant(stem, i) for i in range(len(stem)))


def _ends_double_consonant(stem: str) -> bool:
    return len(stem) >= 2 and stem[-1] == stem[-2] and _is_consonant(stem, len(stem) - 1)


def _ends_cvc(stem: str) -> bool:
    n = len(stem)
    return (
        n >= 3
        and _is_consonant(stem, n - 3)
        and not _is_consonant(stem, n - 2)
        and _is_consonant(stem, n - 1)
        and stem[-1] not in "wxy"
    )


def _step1ab(word: str) -> str:
    if word.endswith("sses") or word.endswith("ies"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]

    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
        return word
    for suffix in ("ed", "ing"):
        if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
            word = word[: -len(suffix)]
            if word.endswith(("at", "bl", "iz")):
                return word + "e"
            if _ends_double_consonant(word) and word[-1] not in "lsz":
                return word[:-1]
            if _measure(word) == 1 and _ends_cvc(word):
                return word + "e"
            return word
    return word


def _apply_rules(word: str, rules: tuple[tuple[str, str], ...], min_m: int) -> str:
    for suffix, replacement in rules:
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            if _measure(stem) > min_m and (
                suffix != "ion" or (stem.endswith("s") or stem.endswith("t"))
            ):
                return stem + replacement
            return word
    return word


def porter_stem(word: str) -> str:
    """Porter-stem a lower-case word; non-ASCII or non-alphabetic words are returned as is."""
    if len(word) <= 2 or not (word.isascii() and word.isalpha()):
        return word
    word = _step1ab(word)
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    word = _apply_rules(word, _STEP2_RULES, 0)
    word = _apply_rules(word, _STEP3_RULES, 0)
    word = _apply_rules(word, _STEP4_RULES, 1)
    if word.endswith("e"):
        m = _measure(word[:-1])
        if m > 1 or (m == 1 and not _ends_cvc(word[:-1])):
            word = word[:-1]
    if word.endswith("ll") and _measure(word) > 1:
        word = word[:-1]
    return word
