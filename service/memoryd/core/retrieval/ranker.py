"""The ranking of a hybrid search: candidates in, picks with their score components out.

Pure computation over the candidate pool (docs/ranking.md walks through it): convex
fusion of keyword and cosine scores, the speaker, time and when lifts, the conversation lift,
the relevance floor and cut-off, then picking (MMR, or with a context window `spread`).
Every pick carries its `ScoreComponents`, so a caller can tell why a memory ranked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memoryd.core.models import ScoreComponents
from memoryd.core.observe import Observer
from memoryd.core.retrieval import bm25, conversation
from memoryd.core.retrieval.candidates import CandidatePool
from memoryd.core.retrieval.links import Links
from memoryd.core.retrieval.links import lift as lift_links
from memoryd.core.retrieval.mmr import Candidate, diversify
from memoryd.core.retrieval.temporal import Anchor, TimeWindow, asks_when, tells_a_time
from memoryd.settings import RetrievalSettings


@dataclass(frozen=True)
class RankQuery:
    """What the ranking needs of the query: its text, the time it names (resolved), the
    score floor, how many picks and the context window the picks come with."""

    text: str
    when: TimeWindow | Anchor | None
    min_score: float
    top_k: int
    context_window: int = 0
    # The candidates are every memory the search could see (it found fewer than it asked
    # for): fusion scales each signal by its best, not by the pool's range.
    whole: bool = False


@dataclass
class Ranking:
    """The picks, best first, each with its components; `total` is how many candidates
    passed the score floor and cut-off."""

    picks: list[tuple[str, ScoreComponents]]
    total: int


def relevance(cosine: float, keyword_share: float, keyword_weight: float) -> float:
    """The 0..1 score callers see: the memory's semantic similarity to the query (cosine,
    clipped at 0), raised towards 1 by the IDF-weighted share of the query's keywords
    it contains. Either signal alone can make a memory relevant; a memory sharing no
    keyword scores its similarity alone; with weight 1 a memory holding every keyword of
    the query scores 1."""
    return cosine + (1.0 - cosine) * keyword_weight * keyword_share


class Ranker:
    """Ranks a query's candidate pool by the retrieval settings (ADR 0400)."""

    def __init__(
        self, settings: RetrievalSettings, observer: Observer, encoder: bm25.BM25Encoder
    ) -> None:
        self._settings = settings
        self._observer = observer
        self._encoder = encoder

    def rank(
        self,
        query: RankQuery,
        pool: CandidatePool,
        hits: Sequence[conversation.Scored],
        neighbours: Sequence[conversation.Scored] = (),
        links: Links | None = None,
    ) -> Ranking:
        """Rank `hits` (the search's candidates) and `neighbours` (turns read around them,
        or linked to the first hits, scored against the hits' range) of `pool`; with
        `links`, the linked candidates rise towards the first hits (links.py)."""
        settings = self._settings
        with self._observer.fusion("signals"):
            conversation.fuse(
                hits, settings.fusion_keyword_weight, others=neighbours, whole=query.whole
            )
        members = [*hits, *neighbours]
        named = conversation.named_speakers(query.text, {m.speaker for m in members if m.speaker})
        when = query.when
        if isinstance(when, Anchor):
            when = self._anchor_window(when, members, pool)
        window = when if isinstance(when, TimeWindow) else None
        # A when-question is answered by the memory that tells the event with a time
        # ("last Sunday"): its own time then dates it (ADR 0410).
        asked_when = settings.when_lift > 0 and asks_when(query.text)
        dated = {m.id for m in members if asked_when and _tells_a_time(m)}
        for m in members:
            if m.speaker and m.speaker in named:
                m.base += settings.speaker_lift
            if window is not None and window.contains(m.occurred_at):
                m.base += settings.time_lift
            if m.id in dated:
                m.base += settings.when_lift
        lift = settings.adjacency_weight, settings.question_handoff
        ranks = conversation.conversation_lift(members, {m.id: m.base for m in members}, *lift)
        linked = lift_links(ranks, links) if links is not None else {}
        for i, raised in linked.items():
            ranks[i] += raised
        # What callers see as the score (and min_score compares with) is the memory's
        # `relevance`, which means the same in every query, lifted by its conversation.
        # The speaker and time lifts reorder what is relevant; they never make a memory
        # relevant (every turn of the named person, or of today, would pass).
        keyword_weight = settings.keyword_weight
        own = {m.id: relevance(m.cosine, m.share, keyword_weight) for m in members}
        scores = conversation.conversation_lift(members, own, *lift)
        for m in members:
            m.rank = ranks[m.id]
        kept = [m for m in members if scores[m.id] >= query.min_score]
        if kept and settings.relative_cutoff:
            # Precision over recall: memories far below the best match are noise.
            floor = max(scores[m.id] for m in kept) * settings.relative_cutoff
            kept = [m for m in kept if scores[m.id] >= floor]
        kept.sort(key=lambda m: m.rank, reverse=True)
        chosen: list[tuple[conversation.Scored, float]]
        if query.context_window > 0:
            spread = conversation.spread(kept, query.top_k, query.context_window)
            chosen = [(m, 0.0) for m in spread]
        else:
            candidates = [Candidate(m.id, m.rank, pool.vectors.get(m.id), m.said) for m in kept]
            chosen = [
                (kept[i], penalty)
                for i, penalty in diversify(candidates, query.top_k, settings.diversity)
            ]
        picks = [
            (
                m.id,
                ScoreComponents(
                    dense=m.cosine - m.grounded,
                    unnamed_dense=m.unnamed_cosine,
                    own_dense=m.own_cosine,
                    grounding_lift=m.grounded,
                    keyword=m.bm25,
                    keyword_share=m.share,
                    fused=m.fused,
                    speaker_lift=settings.speaker_lift if m.speaker in named else 0.0,
                    time_lift=(
                        settings.time_lift
                        if window is not None and window.contains(m.occurred_at)
                        else 0.0
                    ),
                    conversation_lift=m.rank - m.base - linked.get(m.id, 0.0),
                    rank=m.rank,
                    mmr_penalty=penalty,
                    relevance=own[m.id],
                    final=min(1.0, scores[m.id]),
                    link_lift=linked.get(m.id, 0.0),
                    when_lift=settings.when_lift if m.id in dated else 0.0,
                ),
            )
            for m, penalty in chosen
        ]
        return Ranking(picks, total=len(kept))

    def _anchor_window(
        self, anchor: Anchor, members: Sequence[conversation.Scored], pool: CandidatePool
    ) -> TimeWindow | None:
        """The window an event bounds ("before she moved"): the time of the candidate
        that holds the largest share of the event's keywords."""
        event_terms = set(self._encoder.term_ids(anchor.event))
        weights = {t: w for t, w in pool.idf.items() if t in event_terms}
        if not weights:
            return None
        best = max(members, key=lambda m: _keyword_share(weights, pool.terms[m.id]), default=None)
        if best is None or _keyword_share(weights, pool.terms[best.id]) <= 0:
            return None
        return anchor.window(best.occurred_at)


def _tells_a_time(member: conversation.Scored) -> bool:
    """Whether a candidate's words, not its speaker's name, tell a time."""
    return tells_a_time(conversation.without_speaker(member.content, member.speaker))


def _keyword_share(idf: dict[int, float], terms: set[int]) -> float:
    total = sum(idf.values())
    return sum(w for t, w in idf.items() if t in terms) / total if total else 0.0
