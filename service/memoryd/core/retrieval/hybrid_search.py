"""A vector tier's search: gathering the candidates of a query, then ranking them.

The store work of one query, overlapped where it can be: the user's IDF (kept counts, or
counted in the store), the query's embedding and hybrid search, the time the query names,
the turns around the best candidates and the best candidates inside that time. The
`Ranker` then orders them (docs/ranking.md).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from memoryd.core.memory.term_counts import TermCounts, owner_of
from memoryd.core.observe import Observer
from memoryd.core.retrieval import bm25, conversation, links
from memoryd.core.retrieval.candidates import CandidatePool, speaker_of
from memoryd.core.retrieval.links import Links
from memoryd.core.retrieval.ranker import Ranker, Ranking, RankQuery
from memoryd.core.retrieval.speakers import SpeakerMemo
from memoryd.core.retrieval.temporal import Anchor, TimeResolver, TimeWindow
from memoryd.core.retrieval.turns import attach_context, turn_of, turns_around
from memoryd.core.tiers.base import TierHits
from memoryd.settings import RetrievalSettings
from memoryd.stores.vectors.port import Filter, Range, RrfParams, SparseVector

if TYPE_CHECKING:
    from memoryd.core.memory.vector_memory import VectorMemory

_WORD = re.compile(r"\w")
T = TypeVar("T")


class HybridSearch:
    """Searches the memories a filter selects through `memory` (the store gateway)."""

    def __init__(
        self,
        memory: VectorMemory,
        encoder: bm25.BM25Encoder,
        settings: RetrievalSettings,
        clock: Callable[[], float],
        observer: Observer,
    ) -> None:
        self._memory = memory
        self._encoder = encoder
        self._settings = settings
        self._clock = clock
        self._counts = TermCounts(memory.store, memory.derived)
        self._time = TimeResolver()
        self._ranker = Ranker(settings, observer, encoder)
        self._speakers = SpeakerMemo()

    async def search(
        self,
        flt: Filter,
        query: str,
        top_k: int,
        min_score: float | None,
        *,
        context_window: int = 0,
        grounding: str = "",
    ) -> TierHits:
        """Candidates by hybrid search, ranked for conversations (ADR 0400), each hit
        with its score components and, with a context window, its neighbouring turns.
        With `grounding` (the task's state the query matched, ADR 0405) a memory's
        similarity is the better of its cosine to the query and to the query so grounded;
        the candidates are the query's own."""
        memory, settings = self._memory, self._settings
        threshold = settings.min_score if min_score is None else min_score
        query_sparse = self._encoder.encode_query(query)
        terms = list(query_sparse.indices)
        sparse = query_sparse if terms else None
        # The per-user IDF: from the counts kept since the user last wrote when they hold
        # every query term (no store call at all), else counted in the store while the
        # query is embedded and searched.
        known = self._counts.known(flt)
        if known is not None and known.live == 0:
            return TierHits(items=[], total=0)  # the empty case answers without embedding
        if known is None and await self._found_empty(flt):
            return TierHits(items=[], total=0)
        idf_now = known.idf(terms) if known is not None else None
        idf_task: asyncio.Future[dict[int, float]] = asyncio.ensure_future(
            _given(idf_now)
            if idf_now is not None
            else memory.call(self._counts.idf, flt, terms)
            if terms
            else _given({})
        )
        # The time the query names (dateparser) is resolved meanwhile too; a query with no
        # time word on the loop (microseconds: less than the hop to a thread).
        when_task: asyncio.Future[TimeWindow | Anchor | None] = asyncio.ensure_future(
            _given(None)
            if settings.time_lift <= 0
            else asyncio.to_thread(self._time.resolve, query, self._clock())
            if self._time.parses(query)
            else _given(self._time.resolve(query, self._clock()))
        )
        owner = owner_of(flt)
        embeds = settings.mode != "keyword" or sparse is None
        unnaming = settings.dense_without_names and embeds
        # The query without the speakers it names that this user's last searches met,
        # embedded beside the query itself (speakers.py; the candidates confirm it).
        guessed = _unnamed(query, self._speakers.of(owner)) if unnaming else query
        unnamed_task: asyncio.Future[tuple[list[list[float]], float]] | None = None
        try:
            dense: list[float] | None = None
            grounded: list[float] | None = None
            embedding_ms = 0.0
            if embeds:
                own = memory.embed([query, f"{query}. {grounding}"] if grounding else [query])
                if guessed != query:
                    unnamed_task = asyncio.ensure_future(memory.embed([guessed], beside=True))
                vectors, embedding_ms = await own
                dense, grounded = vectors[0], (vectors[1] if grounding else None)
            if settings.mode == "dense":
                sparse = None
            if settings.mode == "keyword" and sparse is not None:
                dense = None
            # The pool is the union of the best `per_source` by cosine and by BM25: the
            # fused list cut at twice that holds both whole (RRF only gathers them here;
            # the ranking uses the scores).
            per_source = max(4 * top_k, settings.candidates)
            fusion = RrfParams(
                k=settings.rrf_k,
                dense_weight=settings.dense_weight,
                sparse_weight=settings.sparse_weight,
                prefetch_limit=per_source,
            )
            hits = await memory.call(
                memory.store.search,
                flt,
                dense=dense,
                sparse=sparse,
                limit=2 * per_source,
                fusion=fusion,
                with_vectors=dense is not None,
            )
            when = await when_task
        except BaseException:
            idf_task.cancel()
            when_task.cancel()
            if unnamed_task is not None:
                unnamed_task.cancel()
            raise
        # The turns around the best candidates (hybrid order) and, when the query names a
        # time, the best candidates from inside it (the soft filter also brings them) are
        # read at once.
        conversational = settings.adjacency_weight > 0 or settings.question_handoff > 0
        sources = [turn_of(h.payload) for h in hits[: 2 * top_k]] if conversational else []
        inside_task = (
            memory.call(
                memory.store.search,
                flt.and_(Range("occurred_at", gte=when.start, lt=when.end)),
                dense=dense,
                sparse=sparse,
                limit=2 * top_k,
                fusion=RrfParams(k=settings.rrf_k, prefetch_limit=2 * top_k),
                with_vectors=dense is not None,
            )
            if isinstance(when, TimeWindow) and not when.every_year and hits
            else _given([])
        )
        seen = {h.id for h in hits}
        unnamed_query = query
        if unnaming:
            speakers = {speaker_of(h.payload) for h in hits}
            self._speakers.met(owner, speakers)
            unnamed_query = _unnamed(query, speakers)
        if unnamed_task is not None and unnamed_query != guessed:
            unnamed_task.cancel()  # a wrong guess: embedded again as the candidates say
            unnamed_task = None
        if unnamed_task is None and unnamed_query != query:
            unnamed_task = asyncio.ensure_future(memory.embed([unnamed_query], beside=True))
        # embedding_ms stays the query's own: the second embedding overlaps the store's work.
        idf, around, inside, (unnamed, _) = await asyncio.gather(
            idf_task,
            # Turns the search returned already are not read (nor converted) again.
            turns_around(memory, flt, [t for t in sources if t is not None], 1, skip=seen),
            inside_task,
            unnamed_task if unnamed_task is not None else _given(([], 0.0)),
        )
        hits += [h for h in inside if h.id not in seen]
        pool = CandidatePool(
            self._encoder,
            idf,
            _array(dense),
            _array(grounded) if dense is not None else None,
            _array(unnamed[0]) if unnamed else None,
            self._settings.own_weight,
        )
        members = pool.add_all([(h.id, h.payload, h.dense_vector) for h in hits])
        neighbours = pool.add_all(
            [(p.id, p.payload, p.dense) for p in around if p.id not in pool.members]
        )
        # A dense search returns up to per_source of the memories it may see: fewer means
        # it saw them all, and the pool is the user's whole (filtered) memory.
        whole = dense is not None and len(hits) < per_source
        ranked = RankQuery(query, when, threshold, top_k, context_window, whole)
        ranking = self._ranker.rank(ranked, pool, members, neighbours)
        if settings.link_weight > 0 and len(ranking.picks) > settings.link_hits:
            # The second hop (links.py): only when there are picks below the first hits.
            found = await self._links(flt, terms, dense, pool, ranking)
            if found is not None:
                hop, linked = found
                ranking = self._ranker.rank(ranked, pool, members, [*neighbours, *linked], hop)
        picked = [pool.record(components, i) for i, components in ranking.picks]
        if context_window > 0:
            await attach_context(memory, flt, picked, context_window)
        return TierHits(items=picked, total=ranking.total, embedding_ms=embedding_ms)

    async def _links(
        self,
        flt: Filter,
        query_terms: Sequence[int],
        dense: list[float] | None,
        pool: CandidatePool,
        ranking: Ranking,
    ) -> tuple[Links, list[conversation.Scored]] | None:
        """The first hits of `ranking`, the candidates linked to them by a rare term and
        those linked memories the pool lacked (read now, scored into the pool)."""
        memory, settings = self._memory, self._settings
        first = tuple(i for i, _ in ranking.picks[: settings.link_hits])
        held = sorted({t for f in first for t in pool.terms[f]}.difference(query_terms))
        if not held:
            return None
        idf = await memory.call(self._counts.idf, flt, held)
        counts = self._counts.known(flt)
        if counts is None:  # a write meanwhile: the counts are not the user's any more
            return None
        floor = links.idf_floor(counts.live, settings.link_max_count)
        rare = links.rare_terms([pool.terms[f] for f in first], query_terms, idf, floor)
        if not rare:
            return None
        added: list[conversation.Scored] = []
        if settings.link_search:
            # Each rare term is held by at most link_max_count memories: a small read.
            found = await memory.call(
                memory.store.search,
                flt,
                sparse=SparseVector(indices=sorted(rare), values=[1.0] * len(rare)),
                limit=settings.link_search,
                with_vectors=dense is not None,
            )
            added = pool.add_all(
                [(h.id, h.payload, h.dense_vector) for h in found if h.id not in pool.members]
            )
        linked = links.linked_to(pool.terms, rare, first)
        return Links(first, linked, settings.link_weight), added

    async def _found_empty(self, flt: Filter) -> bool:
        """Whether `flt` selects no memory; an empty answer is kept (counts with none
        live) so that the next query of an empty tier makes no store call until the user's
        next write (a RenderContext asks every tier)."""
        generation = self._counts.generation(flt)  # before reading: a write meanwhile voids it
        if await self._memory.first(flt) is not None:
            return False
        self._counts.found_empty(flt, generation)
        return True


async def _given(value: T) -> T:
    """What is known already, as an awaitable beside the work of a gather."""
    return value


def _unnamed(query: str, speakers: Iterable[str]) -> str:
    """The query without the names of `speakers` it names (ADR 0408), or the query itself
    when it names none or holds nothing else."""
    named = conversation.named_speakers(query, speakers)
    unnamed = conversation.without_names(query, named) if named else query
    return unnamed if _WORD.search(unnamed) else query


def _array(vector: list[float] | None) -> np.ndarray[Any, Any] | None:
    return None if vector is None else np.asarray(vector, dtype=np.float32)
