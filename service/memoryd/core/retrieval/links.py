"""Linked memories: the second hop of a question that needs two or more turns (ADR 0404).

A question like "Which opening did his coach give him, and how did it work out in his
first tournament?" finds the turn that names the opening ("the Caro-Kann"), but the turn
about the tournament shares no word with the question, only with that first hit ("Round 1
I won with the Caro-Kann"). A term the user has said in very few memories (a name, a
place, a thing: at most `max_count` of them) links the memories that hold it: they are
about the same thing. The first hits' rare terms that the query does not already hold
lift the other candidates holding one of them, below the first hits (never above: the
first round's order stays, single-hop questions keep their answers) and above the rest.

Pure computation; the search (hybrid_search) reads the counts and the linked memories
the pool lacks.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Links:
    """The first hits (best first) and the candidates linked to them, lifted by `weight`
    of the ranking's scale but never above the last first hit."""

    first: tuple[str, ...]
    linked: frozenset[str]
    weight: float


def idf_floor(live: int, max_count: int) -> float:
    """The BM25 IDF (as `Counts.idf` computes it) of a term held by `max_count` of
    `live` memories: a term at or above it is held by at most that many."""
    return math.log(1.0 + (live - max_count + 0.5) / (max_count + 0.5))


def rare_terms(
    first_terms: Iterable[Collection[int]],
    query_terms: Collection[int],
    idf: Mapping[int, float],
    floor: float,
) -> set[int]:
    """The terms of the first hits, not in the query, held by few memories (IDF at or
    above `floor`). A query term is left out: every candidate was found for it already."""
    return {
        t
        for terms in first_terms
        for t in terms
        if t not in query_terms and idf.get(t, 0.0) >= floor
    }


def linked_to(
    terms: Mapping[str, Collection[int]], rare: Collection[int], first: Collection[str]
) -> frozenset[str]:
    """The candidates, other than the first hits, holding one of the `rare` terms."""
    if not rare:
        return frozenset()
    wanted = set(rare)
    return frozenset(
        i for i, held in terms.items() if i not in first and not wanted.isdisjoint(held)
    )


def lift(ranks: Mapping[str, float], links: Links) -> dict[str, float]:
    """Each linked candidate's lift: `weight`, but at most up to (just under) the lowest
    rank of the first hits, so that the first hits keep their places; 0 for one ranked
    there already."""
    present = [ranks[f] for f in links.first if f in ranks]
    if not present:
        return {}
    ceiling = min(present)
    out = {}
    for i in links.linked:
        rank = ranks.get(i)
        if rank is None or rank >= ceiling:
            continue
        raised = min(rank + links.weight, math.nextafter(ceiling, -math.inf))
        if raised > rank:
            out[i] = raised - rank
    return out
