"""Ranking hybrid candidates the way conversations need (ADR 0400).

Pure computation over a small candidate pool (never over all of a user's memories):

* `fuse`: convex score-level fusion of the keyword (BM25) and cosine scores, each min-max
  normalised over the pool, leaning on the keyword side. Rank fusion (RRF) throws the
  scores away and lets a weak dense list outvote a confident keyword match.
* `named_speakers` / speaker lift: a question naming a person ("What breed is Priya's
  dog?") prefers turns said by that person over the other side's questions about it.
* `conversation_lift`: a turn is lifted by its best neighbour in the same session (the
  answer often sits in the reply next to the turn that matches the question), and a turn
  that asks hands part of its score to the reply after it.
* `spread`: with a context window, a hit already brings its neighbours, so another hit
  inside that window would spend a slot on turns the caller gets anyway.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

# Metadata keys naming who said something (see payload.CONTEXT_METADATA_KEYS).
SPEAKER_KEYS = ("speaker", "author", "sender")


@dataclass
class Scored:
    """One memory of the pool: its raw signals and the scores derived from them."""

    id: str
    cosine: float
    bm25: float
    share: float  # IDF-weighted share of the query's keywords it holds
    content: str = ""  # its text (a turn's line begins with its speaker's name)
    speaker: str = ""
    session: str = ""
    position: int = 0
    occurred_at: float = 0.0
    fused: float = 0.0  # the convex fusion of its keyword and cosine scores
    base: float = 0.0  # fused score with the speaker and time lifts
    rank: float = 0.0  # base lifted by its conversation: what the pool is ordered by
    asks: bool = False  # the text is a question
    said: bool = False  # a turn of a conversation (payload.is_turn)
    grounded: float = 0.0  # what the query grounded in the task's state added to `cosine`
    # The cosine to the query without the speakers it names, when it names one
    # (`without_names`): what the fusion ranks by then.
    unnamed_cosine: float | None = None
    # The cosine of the turn's own text (embedded without its lead, ADR 0409) to the query
    # the fusion ranks by, when the turn keeps one, and its share of `ranked_cosine`.
    own_cosine: float | None = None
    own_weight: float = 0.0

    @property
    def ranked_cosine(self) -> float:
        """The cosine the fusion ranks by: to the query without the speakers it names (ADR
        0408), blended with the turn's own vector's (ADR 0409)."""
        ranked = self.cosine if self.unnamed_cosine is None else self.unnamed_cosine
        if self.own_cosine is None:
            return ranked
        return (1.0 - self.own_weight) * ranked + self.own_weight * self.own_cosine

    @property
    def turn(self) -> tuple[str, int] | None:
        """(session, position) when the memory is a turn of a session."""
        return (self.session, self.position) if self.session and self.position else None


def bm25_of(matched: float, length: int, k1: float, b: float, avg_len: float) -> float:
    """BM25 of a short text from the summed IDF of the query terms it holds (`matched`) and
    its number of distinct terms (payload `term_ids`): every term counted once (in a
    sentence a content word rarely repeats). No tokenising at query time."""
    if not matched:
        return 0.0
    return matched * (k1 + 1.0) / (1.0 + k1 * (1.0 - b + b * length / avg_len))


def _minmax(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    return lo, (hi - lo)


def fuse(
    pool: Sequence[Scored],
    keyword_weight: float,
    others: Sequence[Scored] = (),
    *,
    whole: bool = False,
) -> None:
    """Set `base` of every memory of `pool` (and `others`, scored against the pool's
    range: neighbours fetched later) to the convex fusion of its min-max normalised BM25
    and cosine (`ranked_cosine`) scores. A pool where a signal is flat contributes nothing
    from it.

    `whole`: the pool is every memory the search could see (fewer than it asked for), not
    the top of a larger field. Its weakest member is then no bottom of the field to scale
    from, only whatever else the user said, and min-max would stretch a small gap between
    two weak memories into a large one (three memories: cosines 0.363 and 0.332 become 0.1
    and 0). Each signal is scaled by its best instead (0 stays 0), as a full pool's range
    roughly does."""
    if not pool:
        return
    k_lo, k_span = _minmax([s.bm25 for s in pool])
    d_lo, d_span = _minmax([s.ranked_cosine for s in pool])
    if whole:
        k_lo, k_span = 0.0, max(s.bm25 for s in pool)
        d_lo, d_span = 0.0, max(s.ranked_cosine for s in pool)
    for s in (*pool, *others):
        keyword = (s.bm25 - k_lo) / k_span if k_span > 0 else 0.0
        dense = (s.ranked_cosine - d_lo) / d_span if d_span > 0 else 0.0
        s.fused = s.base = max(0.0, keyword_weight * keyword + (1.0 - keyword_weight) * dense)


_WORD = re.compile(r"\w+", re.UNICODE)
# A transcript line, "Name: text": one to three words (capitalised: checked after the
# match, in any script), then a colon and a space.
_SPEAKER_PREFIX = re.compile(r"([^\W\d_][\w'.-]*(?: [^\W\d_][\w'.-]*){0,2}): ")
# Where a line's name must have ended (three words of a name fit many times over).
_NAME_CHARS = 120


def speaker_of(metadata: Mapping[str, object], content: str, *, said: bool) -> str:
    """Who said a memory: its metadata's speaker (`SPEAKER_KEYS`), else, for a turn of a
    conversation, the name a transcript line begins with ("Priya: I adopted her"), the way
    chat logs are commonly stored."""
    named = (
        next((str(metadata[k]) for k in SPEAKER_KEYS if metadata.get(k)), "") if metadata else ""
    )
    if named or not said:
        return named
    # A name holds no colon, so the line's first ": " ends it; the few names of a
    # conversation come back for every candidate of every query: matched once each.
    end = content.find(": ", 0, _NAME_CHARS)
    return _line_speaker(content[: end + 2]) if end > 0 else ""


def without_speaker(content: str, speaker: str) -> str:
    """A turn's text without the "Name: " its line begins with (a name such as "April" is
    no time the turn tells)."""
    head = f"{speaker}: "
    return content[len(head) :] if speaker and content.startswith(head) else content


@lru_cache(maxsize=4096)
def _line_speaker(head: str) -> str:
    """The name of a line beginning `head` ("Priya: "), or ""."""
    line = _SPEAKER_PREFIX.fullmatch(head)
    if line is None or not all(word[0].isupper() for word in line.group(1).split(" ")):
        return ""
    return line.group(1)


def named_speakers(query: str, speakers: Iterable[str]) -> set[str]:
    """The speakers whose name (every word of it, case-folded) the query contains."""
    words = {w.casefold() for w in _WORD.findall(query)}
    named = set()
    for speaker in speakers:
        parts = [w.casefold() for w in _WORD.findall(speaker)]
        if parts and all(p in words for p in parts):
            named.add(speaker)
    return named


def without_names(query: str, speakers: Iterable[str]) -> str:
    """`query` without the words of `speakers`' names as the query writes them, capitalised
    (and a possessive "'s" after one): "Which places has Thandiwe travelled to?" -> "Which
    places has travelled to?"; the mark a name ends with stays ("owned by Priya?" -> "owned
    by?"). A lower-case word stays, even one a name is made of ("will", "may"): there it
    is more likely the word.

    A turn stored as "Thandiwe: text" carries the name in its vector, and a short turn is
    mostly its name: against a query naming Thandiwe, "Thandiwe: Ha, of course you did."
    outscores "Thandiwe: Back from Marrakech!". The speaker lift counts the name once;
    the dense side ranks by the rest of the question (ADR 0408)."""
    names = {w.casefold() for speaker in speakers for w in _WORD.findall(speaker)}
    if not names:
        return query
    kept: list[str] = []
    for word in _QUERY_WORD.findall(query):
        ending = _ENDING.search(word)
        assert ending is not None  # the pattern matches the empty end of any word
        if not (word[:1].isupper() and word[: ending.start()].casefold() in names):
            kept.append(word)
        elif kept:
            kept[-1] += ending["mark"]  # the question still asks
    return " ".join(kept)


# A query's words as written (punctuation kept with its word), and how a word ends: a
# possessive, then its punctuation (`mark`).
_QUERY_WORD = re.compile(r"\S+")
_ENDING = re.compile(r"(?:['\u2019]s?)?(?P<mark>[^\w'\u2019]*)$")


def conversation_lift(
    pool: Sequence[Scored],
    values: Mapping[str, float],
    adjacency: float,
    question_handoff: float,
) -> dict[str, float]:
    """Each member's value in `values` lifted by its conversation (same session only):

    * adjacency: + `adjacency` x the best value of the turns right before and after it;
    * question hand-off: a turn that asks a question (ends with "?") keeps 1 - h of its
      value, and the turn after it gains h x the question's value: the reply, not the
      question, holds what was asked about.
    """
    by_turn = {s.turn: s for s in pool if s.turn is not None}
    out: dict[str, float] = {}
    for s in pool:
        own = values[s.id]
        turn = s.turn
        if turn is None:
            out[s.id] = own
            continue
        session, position = turn
        before, after = by_turn.get((session, position - 1)), by_turn.get((session, position + 1))
        lifted = own * (1.0 - question_handoff) if s.asks else own
        near = [values[n.id] for n in (before, after) if n is not None]
        lifted += adjacency * max(near, default=0.0)
        if before is not None and before.asks:
            lifted += question_handoff * values[before.id]
        out[s.id] = lifted
    return out


def spread(ranked: Sequence[Scored], top_k: int, window: int) -> list[Scored]:
    """The first `top_k` of `ranked`, skipping a turn within `window` positions of a turn
    already taken in the same session (it comes as that hit's context)."""
    if window <= 0:
        return list(ranked[:top_k])
    taken: list[Scored] = []
    for s in ranked:
        turn = s.turn
        if turn is not None and any(
            t.turn is not None and t.turn[0] == turn[0] and abs(t.turn[1] - turn[1]) <= window
            for t in taken
        ):
            continue
        taken.append(s)
        if len(taken) == top_k:
            break
    return taken
