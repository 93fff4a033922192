"""What every vector-backed tier shares: embedding, hybrid search, payload filters.

Store and embedding calls are blocking, so each runs in a worker thread: the event loop
never waits on them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt

from memoryd.core.errors import FieldViolation, StoreUnavailable
from memoryd.core.memory import term_counts
from memoryd.core.memory.embedding_batcher import EmbeddingBatcher
from memoryd.core.memory.payload import (
    attach_lead,
    content_hash,
    content_of,
    embed_text_of,
    from_payload,
    is_turn,
    to_payload,
    with_lead,
)
from memoryd.core.models import ImportResult, Kind, MemoryRecord, Scope, Tier
from memoryd.core.observe import NullObserver, Observer
from memoryd.core.retrieval import bm25, conversation
from memoryd.core.retrieval.temporal import Anchor, TimeResolver, TimeWindow
from memoryd.core.tiers.base import TierHits
from memoryd.settings import RetrievalSettings
from memoryd.stores.embeddings.port import EmbedderUnavailable
from memoryd.stores.vectors.port import (
    TERMS_FIELD,
    Condition,
    DenseVector,
    Filter,
    HasId,
    MatchAny,
    MatchValue,
    Range,
    RrfParams,
    ScoredPoint,
    StoredPoint,
    VectorPoint,
    VectorStore,
    VectorStoreError,
    canonical_id,
    field_path,
)

# Points read per scroll page when exporting or measuring a user's memories.
PAGE_SIZE = 256
# Memories embedded and upserted per batch on import.
_IMPORT_BATCH = 64
# Derives the id an imported memory takes when its own id belongs to another user.
_IMPORT_NAMESPACE = uuid.UUID("0b7e2c55-1a8f-4d3c-b6a2-9e4f7d21c3a8")

P = ParamSpec("P")
T = TypeVar("T")


@dataclass
class RestorePlan:
    """Imported memories that are new for the user (under the ids they will take), and how
    many were skipped because the user already has them."""

    new: list[MemoryRecord] = field(default_factory=list)
    skipped: int = 0


@dataclass(frozen=True)
class NewPoint:
    """A memory to insert: its record, its payload, the text its keyword terms and vector
    come from, the `lead` its vector also sees (the turn before it; ADR 0400), and the
    `vector`, when the caller embedded `dense_text` beforehand."""

    record: MemoryRecord
    payload: dict[str, Any]
    embed_text: str
    vector: list[float] | None = None
    lead: str = ""

    @property
    def dense_text(self) -> str:
        return with_lead(self.lead, self.embed_text)


class VectorMemory:
    def __init__(
        self,
        store: VectorStore,
        embedder: EmbeddingBatcher,
        retrieval: RetrievalSettings,
        clock: Callable[[], float],
        observer: Observer | None = None,
    ) -> None:
        self.store = store
        # A search of a store whose searches keep the GIL throughout runs on the event
        # loop: a thread would give the loop nothing back and add two wake-ups, ~0.3 ms
        # each on a VM (ADR 0002). Decided once: the property is the adapter's constant.
        self._search_on_loop = store.search if store.searches_keep_the_gil else None
        self._embedder = embedder
        self._retrieval = retrieval
        self._clock = clock
        self._encoder = bm25.BM25Encoder()
        # Shared with the tiers built on this memory, which report their removals to it.
        self.observer: Observer = observer or NullObserver()
        self._time = TimeResolver()
        self._counts = term_counts.TermCounts()

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a blocking store call in a thread (a search that keeps the GIL: on the
        loop); a store failure becomes UNAVAILABLE."""
        on_loop = fn == self._search_on_loop
        try:
            if on_loop:
                return fn(*args, **kwargs)
            return await asyncio.to_thread(fn, *args, **kwargs)
        except VectorStoreError as exc:
            raise StoreUnavailable("vector store", str(exc)) from exc

    async def embed(self, texts: Sequence[str]) -> tuple[list[list[float]], float]:
        started = time.perf_counter()
        try:
            with self.observer.embedding(len(texts)):
                vectors = await self._embedder.embed(texts)
        except EmbedderUnavailable as exc:
            raise StoreUnavailable("embedder", str(exc)) from exc
        return vectors, (time.perf_counter() - started) * 1000

    def scope_filter(
        self,
        scope: Scope,
        tier: Tier,
        *,
        live_only: bool = True,
        metadata: Mapping[str, str] | None = None,
        kinds: Sequence[Kind] = (),
        extra: Sequence[Condition] = (),
    ) -> Filter:
        """Tenant + user + tier, and unless asked otherwise: not deleted, not expired."""
        must: list[Condition] = [
            MatchValue("tenant", scope.tenant),
            MatchValue("user_id", scope.user_id),
            MatchValue("tier", tier.value),
        ]
        must += [MatchValue(field_path("metadata", k), v) for k, v in (metadata or {}).items()]
        if kinds:
            must.append(MatchAny("kind", [k.value for k in kinds]))
        must += list(extra)
        must_not: list[Condition] = []
        if live_only:
            must_not.append(MatchValue("deleted", True))
            must.append(term_counts.live_condition(self._clock()))
        return Filter(must=must, must_not=must_not)

    async def insert(self, points: Sequence[NewPoint]) -> float:
        """Embed (what is not embedded yet) and upsert; returns the embedding time in ms."""
        if not points:
            return 0.0
        missing = [p.dense_text for p in points if p.vector is None]
        fresh, embedding_ms = await self.embed(missing) if missing else ([], 0.0)
        computed = iter(fresh)
        vectors = [p.vector if p.vector is not None else next(computed) for p in points]
        upserts = [
            VectorPoint(
                id=p.record.id,
                dense=vector,
                sparse=self._encoder.encode_document(p.embed_text),
                payload={**p.payload, TERMS_FIELD: self._encoder.term_ids(p.embed_text)},
            )
            for p, vector in zip(points, vectors, strict=True)
        ]
        await self.call(self.store.upsert, upserts)
        return embedding_ms

    # ------------------------------------------------------------------ store gateway
    # What tiers ask of the store besides search and listing: they never reach past
    # VectorMemory to the store itself.

    async def count(self, flt: Filter) -> int:
        """How many points `flt` selects."""
        return await self.call(self.store.count, flt)

    async def delete_ids(self, ids: Sequence[str]) -> None:
        """Delete the points with these ids (found under a user's filter by the caller)."""
        await self.call(self.store.delete, ids)

    async def delete_matching(self, flt: Filter) -> int:
        """Delete every point `flt` selects; returns how many went."""
        return await self.call(self.store.delete_where, flt)

    async def update_fields(self, ids: Sequence[str], patch: Mapping[str, Any]) -> None:
        """Set these top-level payload fields on the points with these ids, without
        re-embedding them (callers change no searched text this way)."""
        await self.call(self.store.set_payload, ids, patch)

    async def points_by_id(self, ids: Sequence[str]) -> list[StoredPoint]:
        """The stored points with these ids, whoever's (ids are global); unknown ids are
        skipped."""
        return await self.call(self.store.retrieve, ids)

    async def payload_pages(self, flt: Filter) -> AsyncIterator[list[StoredPoint]]:
        """Every point `flt` selects, one scroll page at a time, payloads undecoded (for
        callers that read a field or two)."""
        offset: str | None = None
        while True:
            points, offset = await self.call(self.store.scroll, flt, limit=PAGE_SIZE, offset=offset)
            if points:
                yield points
            if offset is None:
                return

    async def first(self, flt: Filter) -> StoredPoint | None:
        points, _ = await self.call(self.store.scroll, flt, limit=1)
        return points[0] if points else None

    async def records(
        self,
        flt: Filter,
        limit: int,
        *,
        newest_first: bool = True,
        order_by: str = "created_at",
    ) -> list[MemoryRecord]:
        points, _ = await self.call(
            self.store.scroll, flt, limit=limit, order_by=order_by, descending=newest_first
        )
        return [from_payload(p.id, p.payload) for p in points]

    async def pages(self, flt: Filter) -> AsyncIterator[list[MemoryRecord]]:
        """Every matching memory, one scroll page at a time (never all in memory)."""
        offset: str | None = None
        while True:
            points, offset = await self.call(self.store.scroll, flt, limit=PAGE_SIZE, offset=offset)
            if points:
                yield [from_payload(p.id, p.payload) for p in points]
            if offset is None:
                return

    async def owners(self, tier: Tier) -> list[tuple[str, str]]:
        """Every (tenant, user_id) having memories of `tier`, read page by page."""
        found: set[tuple[str, str]] = set()
        flt = Filter(must=[MatchValue("tier", tier.value)])
        offset: str | None = None
        while True:
            points, offset = await self.call(self.store.scroll, flt, limit=PAGE_SIZE, offset=offset)
            found.update((str(p.payload["tenant"]), str(p.payload["user_id"])) for p in points)
            if offset is None:
                return sorted(found)

    async def survey(self, tier: Tier) -> int:
        """Every stored memory of `tier`, all users (soft-deleted and expired ones too, as
        they still take space): reports each page's ages in days to the observer and
        returns their content bytes."""
        now = self._clock()
        flt = Filter(must=[MatchValue("tier", tier.value)])
        size = 0
        offset: str | None = None
        while True:
            points, offset = await self.call(self.store.scroll, flt, limit=PAGE_SIZE, offset=offset)
            size += sum(int(p.payload.get("size", 0)) for p in points)
            created = [float(p.payload.get("created_at", now)) for p in points]
            self.observer.ages(tier, [max(0.0, now - c) / 86_400.0 for c in created])
            if offset is None:
                return size

    async def remove(self, flt: Filter, dry_run: bool) -> int:
        """Delete what matches `flt` (on dry_run only count it); returns how many."""
        if dry_run:
            return await self.call(self.store.count, flt)
        return await self.call(self.store.delete_where, flt)

    async def export_count(self, scope: Scope, tier: Tier) -> int:
        """Everything of the user in `tier`, soft-deleted and expired included."""
        flt = self.scope_filter(scope, tier, live_only=False)
        return await self.call(self.store.count, flt)

    def export_pages(self, scope: Scope, tier: Tier) -> AsyncIterator[list[MemoryRecord]]:
        # Soft-deleted and expired memories too: an export is a full backup.
        return self.pages(self.scope_filter(scope, tier, live_only=False))

    async def measure(self, flt: Filter) -> tuple[int, int]:
        """How many memories match, and their content bytes (payload `size`), paging."""
        count = size = 0
        offset: str | None = None
        while True:
            points, offset = await self.call(self.store.scroll, flt, limit=PAGE_SIZE, offset=offset)
            count += len(points)
            size += sum(int(p.payload.get("size", 0)) for p in points)
            if offset is None:
                return count, size

    async def bytes_used(self, flt: Filter, count: int, room: int, max_item_bytes: int) -> int:
        """Content bytes of the `count` memories `flt` selects, or 0 when the count alone
        proves they fit in `room` (no memory is over `max_item_bytes`): summing pages
        through every memory, so it is skipped whenever it can be."""
        if count * max_item_bytes <= room:
            return 0
        return (await self.measure(flt))[1]

    async def plan_restore(self, scope: Scope, records: Sequence[MemoryRecord]) -> RestorePlan:
        """Which imported memories are new for `scope`'s user, and under which ids: an id the
        user already has is skipped; an id that belongs to another user or tenant is never
        overwritten: the memory takes an id derived from it (the same on every import, so
        importing twice still skips). Writes nothing."""
        plan = RestorePlan()
        seen: set[str] = set()
        for start in range(0, len(records), _IMPORT_BATCH):
            batch = records[start : start + _IMPORT_BATCH]
            ids = [canonical_id(r.id) for r in batch]
            known = {p.id: p.payload for p in await self.call(self.store.retrieve, ids)}
            targets = [
                (i if i not in known or _owned(known[i], scope) else _derived(scope, i), r)
                for i, r in zip(ids, batch, strict=True)
            ]
            derived = [i for i, _ in targets if i not in known]
            if derived:
                found = await self.call(self.store.retrieve, derived)
                known |= {p.id: p.payload for p in found}
            for point_id, record in targets:
                if point_id in known or point_id in seen:
                    plan.skipped += 1
                    continue
                seen.add(point_id)
                plan.new.append(dataclasses.replace(record, id=point_id, score=0.0, archived=False))
        return plan

    async def write_restore(
        self, scope: Scope, plan: RestorePlan, compress_over_bytes: int, lead_chars: int = 0
    ) -> ImportResult:
        """Re-embed and upsert the plan's new memories under `scope`'s user, keeping their
        times and payload (a soft-deleted one stays deleted). A turn whose previous turn
        comes in the same import is embedded after it, as when it was added."""
        turns = {(r.session_id, r.position): r for r in plan.new if r.session_id}
        for start in range(0, len(plan.new), _IMPORT_BATCH):
            points: list[NewPoint] = []
            for record in plan.new[start : start + _IMPORT_BATCH]:
                digest = content_hash(scope, record.tier, record.key, record.content)
                payload = to_payload(record, scope, digest, compress_over_bytes)
                payload["deleted"] = record.deleted
                before = turns.get((record.session_id, record.position - 1))
                lead = attach_lead(payload, record, before, lead_chars)
                points.append(NewPoint(record, payload, embed_text_of(payload), lead=lead))
            await self.insert(points)
        return ImportResult(imported_count=len(plan.new), skipped_count=plan.skipped)

    async def restore(
        self, scope: Scope, records: Sequence[MemoryRecord], compress_over_bytes: int
    ) -> ImportResult:
        """`plan_restore`, then `write_restore`."""
        plan = await self.plan_restore(scope, records)
        return await self.write_restore(scope, plan, compress_over_bytes)

    async def by_ids(self, flt: Filter, ids: Sequence[str]) -> list[MemoryRecord]:
        valid = [i for i in ids if _is_uuid(i)]
        if not valid:
            return []
        points, _ = await self.call(self.store.scroll, flt.and_(HasId(valid)), limit=len(valid))
        return [from_payload(p.id, p.payload) for p in points]

    async def search(
        self,
        flt: Filter,
        query: str,
        top_k: int,
        min_score: float | None,
        *,
        context_window: int = 0,
    ) -> TierHits:
        """Candidates by hybrid search, ranked for conversations (ADR 0400): convex fusion
        of normalised BM25 and cosine scores, lifted for the speaker the query names, for
        the time it names, and by the best neighbouring turn; then picked (`diversify`, or
        with a context window `spread`), each hit with its neighbouring turns."""
        settings = self._retrieval
        threshold = settings.min_score if min_score is None else min_score
        query_sparse = self._encoder.encode_query(query)
        terms = list(query_sparse.indices)
        sparse = query_sparse if terms else None
        # The per-user IDF: from the counts kept since the store last changed when they
        # hold every query term (no store call at all), else counted in the store while
        # the query is embedded and searched.
        known = self._known_counts(flt)
        if known is not None and known.live == 0:
            return TierHits(items=[], total=0)  # the empty case answers without embedding
        if known is None and await self._found_empty(flt):
            return TierHits(items=[], total=0)
        idf_now = _idf_from(known, terms) if known is not None else None
        idf_task = asyncio.ensure_future(
            _ready(idf_now)
            if idf_now is not None
            else self.call(self._idf, flt, terms)
            if terms
            else _nothing()
        )
        # The time the query names (dateparser) is resolved meanwhile too.
        when_task = asyncio.ensure_future(
            asyncio.to_thread(self._time.resolve, query, self._clock())
            if settings.time_lift > 0
            else _no_time()
        )
        try:
            dense: list[float] | None = None
            embedding_ms = 0.0
            if settings.mode != "keyword" or sparse is None:
                [dense], embedding_ms = await self.embed([query])
            if settings.mode == "dense":
                sparse = None
            if settings.mode == "keyword" and sparse is not None:
                dense = None
            # The pool is the union of the best `per_source` by cosine and by BM25: the
            # fused list cut at twice that holds both whole (RRF only gathers them here;
            # the ranking below uses the scores).
            per_source = max(4 * top_k, settings.candidates)
            fusion = RrfParams(
                k=settings.rrf_k,
                dense_weight=settings.dense_weight,
                sparse_weight=settings.sparse_weight,
                prefetch_limit=per_source,
            )
            hits = await self.call(
                self.store.search,
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
            raise
        # The turns around the best candidates (hybrid order) and, when the query names a
        # time, the best candidates from inside it (the soft filter also brings them) are
        # read at once; the store answers both in parallel threads.
        conversational = settings.adjacency_weight > 0 or settings.question_handoff > 0
        sources = [_turn_of(h.payload) for h in hits[: 2 * top_k]] if conversational else []
        inside_task = (
            self.call(
                self.store.search,
                flt.and_(_window_condition(when)),
                dense=dense,
                sparse=sparse,
                limit=2 * top_k,
                fusion=RrfParams(k=settings.rrf_k, prefetch_limit=2 * top_k),
                with_vectors=dense is not None,
            )
            if isinstance(when, TimeWindow) and not when.every_year and hits
            else _no_hits()
        )
        seen = {h.id for h in hits}
        idf, around, inside = await asyncio.gather(
            idf_task,
            # Turns the search returned already are not read (nor converted) again.
            self._turns_around(flt, [t for t in sources if t is not None], 1, skip=seen),
            inside_task,
        )
        hits += [h for h in inside if h.id not in seen]
        query_vector = None if dense is None else np.asarray(dense, dtype=np.float32)
        pool = _Pool(self, idf, query_vector)
        pool.add_all([(h.id, h.payload, h.dense_vector) for h in hits])
        members = list(pool.members.values())
        neighbours = pool.add_all(
            [(p.id, p.payload, p.dense) for p in around if p.id not in pool.members]
        )
        with self.observer.fusion("signals"):
            conversation.fuse(members, settings.fusion_keyword_weight, others=neighbours)
        members += neighbours
        named = conversation.named_speakers(query, {m.speaker for m in members if m.speaker})
        if isinstance(when, Anchor):
            when = self._anchor_window(when, members, pool)
        self._lift(members, named, when)
        lift = settings.adjacency_weight, settings.question_handoff
        ranks = conversation.conversation_lift(members, {m.id: m.base for m in members}, *lift)
        own = {m.id: self._absolute(m) for m in members}
        scores = conversation.conversation_lift(members, own, *lift)
        for m in members:
            m.rank = ranks[m.id]
        kept = [m for m in members if scores[m.id] >= threshold]
        if kept and settings.relative_cutoff:
            # Precision over recall: memories far below the best match are noise.
            floor = max(scores[m.id] for m in kept) * settings.relative_cutoff
            kept = [m for m in kept if scores[m.id] >= floor]
        kept.sort(key=lambda m: m.rank, reverse=True)
        if context_window > 0:
            chosen = conversation.spread(kept, top_k, context_window)
        else:
            candidates = [_Candidate(m.id, m.rank, pool.vectors.get(m.id), m.said) for m in kept]
            chosen = [pool.members[i] for i in diversify(candidates, top_k, settings.diversity)]
        picked = [pool.record(m.id, min(1.0, scores[m.id])) for m in chosen]
        if context_window > 0:
            await self._attach_context(flt, picked, context_window)
        return TierHits(items=picked, total=len(kept), embedding_ms=embedding_ms)

    def _lift(
        self,
        members: Sequence[conversation.Scored],
        named: set[str],
        when: TimeWindow | Anchor | None,
    ) -> None:
        """The speaker and time lifts, added to each member's fused score."""
        settings = self._retrieval
        for m in members:
            if m.speaker and m.speaker in named:
                m.base += settings.speaker_lift
            if isinstance(when, TimeWindow) and when.contains(m.occurred_at):
                m.base += settings.time_lift

    def _absolute(self, member: conversation.Scored) -> float:
        """What callers see as the score (and min_score compares with), before the
        conversation lift: the memory's `relevance`, which means the same in every query.
        The speaker and time lifts reorder what is relevant; they never make a memory
        relevant (every turn of the named person, or of today, would pass)."""
        return relevance(member.cosine, member.share, self._retrieval.keyword_weight)

    def _anchor_window(
        self, anchor: Anchor, members: Sequence[conversation.Scored], pool: _Pool
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

    async def _turns_around(
        self,
        flt: Filter,
        turns: Sequence[tuple[str, int]],
        window: int,
        *,
        skip: Collection[str] = (),
    ) -> list[StoredPoint]:
        """The turns within `window` positions of each (session, position), in one scroll;
        those with an id in `skip` left out."""
        around: dict[str, list[int]] = {}
        for session, position in turns:
            around.setdefault(session, []).append(position)
        if not around:
            return []
        groups: list[Condition] = [
            Filter(
                must=[
                    MatchValue("session_id", session),
                    Filter(
                        should=[
                            Range("position", gte=p - window, lte=p + window) for p in positions
                        ]
                    ),
                ]
            )
            for session, positions in around.items()
        ]
        limit = sum(len(ps) for ps in around.values()) * (2 * window + 1)
        # The session ids first: an indexed condition that narrows the scan at once.
        sessions = MatchAny("session_id", list(around))
        wanted = flt.and_(sessions, Filter(should=groups))
        if skip:
            wanted = Filter(wanted.must, wanted.should, [*wanted.must_not, HasId(list(skip))])
        points, _ = await self.call(
            self.store.scroll,
            wanted,
            limit=limit,
            with_vectors=True,
        )
        return points

    async def _attach_context(
        self, flt: Filter, picked: Sequence[MemoryRecord], window: int
    ) -> None:
        """Each hit of a session gets the turns within `window` positions of it, in order."""
        turns = [(r.session_id, r.position) for r in picked if r.session_id and r.position]
        if not turns:
            return
        points = await self._turns_around(flt, turns, window)
        by_session: dict[str, list[MemoryRecord]] = {}
        for p in points:
            record = from_payload(p.id, p.payload)
            by_session.setdefault(record.session_id, []).append(record)
        for r in picked:
            if not (r.session_id and r.position):
                continue
            near = [
                c
                for c in by_session.get(r.session_id, [])
                if c.id != r.id and abs(c.position - r.position) <= window
            ]
            r.context = sorted(near, key=lambda c: c.position)

    async def _found_empty(self, flt: Filter) -> bool:
        """Whether `flt` selects no memory; an empty answer is kept as counts (none live)
        so that the next query of an empty tier makes no store call until a write to the
        user (a RenderContext asks every tier, and the user's points are walked each time)."""
        key, now = term_counts.key_of(flt)
        generation = self._generation(flt)  # before reading: a write meanwhile voids it
        if await self.first(flt) is not None:
            return False
        if generation is not None:
            self._counts.keep(key, term_counts.Counts(generation, now, math.inf, 0), [], [])
        return True

    def _known_counts(self, flt: Filter) -> term_counts.Counts | None:
        """The counts kept for `flt`, if nothing they count has changed since."""
        key, now = term_counts.key_of(flt)
        return self._counts.get(key, self._generation(flt), now)

    def _generation(self, flt: Filter) -> int | None:
        """The store's generation for the user `flt` selects (all writes if none)."""
        owner = term_counts.owner_of(flt)
        return self.store.generation(*owner) if owner else self.store.generation()

    def _idf(self, flt: Filter, terms: Sequence[int]) -> dict[int, float]:
        """BM25 inverse document frequency of each query term among the memories `flt`
        selects (this user's, so other users' words never weigh on the ranking): counted
        in the store as far as the counts kept for `flt` do not hold them."""
        key, now = term_counts.key_of(flt)
        # Read before counting: a write landing meanwhile moves it, and what was counted
        # is then never reused.
        generation = self._generation(flt)
        entry = self._counts.get(key, generation, now)
        if entry is None:
            live = self.store.count(flt)
            # The first of the counted memories to expire ends the counts' validity.
            expiring, _ = self.store.scroll(flt, limit=1, order_by=term_counts.EXPIRES_FIELD)
            first = expiring[0].payload.get(term_counts.EXPIRES_FIELD) if expiring else None
            until = float(first) if isinstance(first, int | float) else math.inf
            entry = term_counts.Counts(generation or 0, now, until, live)
        known = {t: df for t in terms if (df := entry.df.get(t)) is not None}
        missing = [t for t in terms if t not in known]
        if missing:
            counted = self.store.count_each(flt, TERMS_FIELD, missing)
            known.update(zip(missing, counted, strict=True))
            if generation is not None:
                self._counts.keep(key, entry, missing, counted)
        elif generation is not None:
            self._counts.keep(key, entry, [], [])
        idf = _idf_from(entry, terms, known)
        assert idf is not None  # every term is in `known`
        return idf

    def _terms_of(self, payload: Mapping[str, Any]) -> set[int]:
        # Memories written before term ids were stored are tokenised here instead.
        stored = payload.get(TERMS_FIELD)
        if stored is None:
            return set(self._encoder.term_ids(embed_text_of(payload)))
        return set(stored)


@dataclass
class _Candidate:
    id: str
    score: float
    vector: DenseVector | None
    said: bool = False  # a turn of a conversation (payload.is_turn)


class _Pool:
    """The memories a query ranks: their signals, vectors, term ids and payloads."""

    def __init__(
        self,
        memory: VectorMemory,
        idf: Mapping[int, float],
        query_vector: np.ndarray[Any, Any] | None,
    ) -> None:
        self._memory = memory
        self.idf = idf
        self._query = query_vector
        self.members: dict[str, conversation.Scored] = {}
        self.payloads: dict[str, dict[str, Any]] = {}
        self.vectors: dict[str, DenseVector] = {}
        self.terms: dict[str, set[int]] = {}

    def add_all(
        self, points: Sequence[tuple[str, dict[str, Any], DenseVector | None]]
    ) -> list[conversation.Scored]:
        """Score points read from the store (id, payload, dense vector) into the pool."""
        cosines = [0.0] * len(points)
        with_vector = [i for i, p in enumerate(points) if p[2] is not None]
        if with_vector and self._query is not None:
            # One matrix product for every candidate (vectors and query are unit length).
            matrix = np.stack([points[i][2] for i in with_vector])  # type: ignore[misc]
            sims = np.clip(_dots(matrix, self._query), 0.0, 1.0).tolist()
            for row, i in enumerate(with_vector):
                cosines[i] = sims[row]
        added = []
        total_idf = sum(self.idf.values())
        for (point_id, payload, vector), cosine in zip(points, cosines, strict=True):
            terms = self._memory._terms_of(payload)
            matched = sum(w for t, w in self.idf.items() if t in terms)
            metadata = payload.get("metadata") or {}
            speaker = next(
                (str(metadata[k]) for k in conversation.SPEAKER_KEYS if metadata.get(k)), ""
            )
            member = conversation.Scored(
                id=point_id,
                cosine=cosine,
                bm25=conversation.bm25_of(
                    matched, len(terms), bm25.DEFAULT_K1, bm25.DEFAULT_B, bm25.DEFAULT_AVG_DOC_LEN
                ),
                share=matched / total_idf if total_idf else 0.0,
                speaker=speaker,
                session=str(payload.get("session_id") or ""),
                position=int(payload.get("position") or 0),
                occurred_at=float(payload.get("occurred_at") or payload.get("created_at") or 0.0),
                asks=content_of(payload).rstrip().endswith("?"),
                said=is_turn(Kind(payload.get("kind") or Kind.UNSPECIFIED.value), metadata),
            )
            self.members[point_id] = member
            self.payloads[point_id] = payload
            if vector is not None:
                self.vectors[point_id] = vector
            self.terms[point_id] = terms
            added.append(member)
        return added

    def record(self, point_id: str, score: float) -> MemoryRecord:
        return from_payload(point_id, self.payloads[point_id], score)


def _turn_of(payload: Mapping[str, Any]) -> tuple[str, int] | None:
    session, position = payload.get("session_id"), payload.get("position")
    return (str(session), int(position)) if session and position else None


async def _nothing() -> dict[int, float]:
    return {}


async def _ready(idf: dict[int, float]) -> dict[int, float]:
    return idf


def _idf_from(
    counts: term_counts.Counts, terms: Sequence[int], df: Mapping[int, int] | None = None
) -> dict[int, float] | None:
    """Each term's IDF from the counts (`df`, else the entry's own); None if one is not
    counted yet."""
    frequencies = counts.df if df is None else df
    idf = {}
    for term in terms:
        n = frequencies.get(term)
        if n is None:
            return None
        idf[term] = math.log(1.0 + (counts.live - n + 0.5) / (n + 0.5))
    return idf


async def _no_time() -> TimeWindow | Anchor | None:
    return None


async def _no_hits() -> list[ScoredPoint]:
    return []


def _window_condition(window: TimeWindow) -> Condition:
    return Range("occurred_at", gte=window.start, lt=window.end)


def relevance(cosine: float, keyword_share: float, keyword_weight: float) -> float:
    """The 0..1 score callers see: the memory's semantic similarity to the query (cosine,
    clipped at 0), raised towards 1 by the IDF-weighted share of the query's keywords
    it contains. Either signal alone can make a memory relevant; a memory sharing no
    keyword scores its similarity alone; with weight 1 a memory holding every keyword of
    the query scores 1."""
    return cosine + (1.0 - cosine) * keyword_weight * keyword_share


def diversify(candidates: Sequence[_Candidate], top_k: int, penalty: float) -> list[str]:
    """Maximal marginal relevance: repeatedly take the candidate whose score, minus
    `penalty` times its similarity to the closest memory already taken, is highest.
    Near-repeats of a taken memory sink below memories that add something new, so a
    small top_k (and the token budget) is not spent on one fact said several ways.
    Returns the ids taken; with penalty 0 (or no vectors) the order is by score."""
    if penalty <= 0 or len(candidates) <= 1 or any(c.vector is None for c in candidates):
        return [c.id for c in candidates[:top_k]]
    # For each candidate its similarity to the closest memory taken so far: a running
    # maximum, updated with the similarities to each new pick (one row per pick).
    matrix = np.stack([c.vector for c in candidates]).astype(np.float64)  # type: ignore[misc]
    scores = np.asarray([c.score for c in candidates], dtype=np.float64)
    closest = np.zeros(len(candidates), dtype=np.float64)  # nothing taken: no redundancy
    open_ = np.ones(len(candidates), dtype=bool)
    said = np.asarray([c.said for c in candidates], dtype=bool)
    taken: list[int] = []
    while len(taken) < min(top_k, len(candidates)):
        # The first best on ties, as max() over the candidates in order would take.
        best = int(np.argmax(np.where(open_, scores - penalty * closest, -np.inf)))
        row = _dots(matrix, matrix[best])
        if candidates[best].said:
            # Turns of a conversation are not repeats of each other: each was said once, and
            # a question often needs several turns on one topic (ADR 0400).
            row[said] = 0.0
        closest = row if not taken else np.maximum(closest, row)
        taken.append(best)
        open_[best] = False
    return [candidates[i].id for i in taken]


def _dots(matrix: npt.NDArray[Any], vector: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Each row of `matrix` dotted with `vector`, in numpy's own loop: a matrix product
    this small would go to the BLAS, whose worker threads spin on every call (measured:
    +10 ms CPU per query on 2 cores) for a few microseconds of arithmetic."""
    dots: npt.NDArray[Any] = np.einsum("ij,j->i", matrix, vector)
    return dots


def check_vector_restore(record: MemoryRecord) -> list[FieldViolation]:
    """Vector store point ids are UUIDs."""
    if _is_uuid(record.id):
        return []
    return [FieldViolation("id", "must be a UUID for long-term and persona items")]


def _owned(payload: Mapping[str, Any], scope: Scope) -> bool:
    return payload.get("tenant") == scope.tenant and payload.get("user_id") == scope.user_id


def _derived(scope: Scope, point_id: str) -> str:
    return str(uuid.uuid5(_IMPORT_NAMESPACE, "\x00".join((scope.tenant, scope.user_id, point_id))))


def _keyword_share(idf: Mapping[int, float], terms: set[int]) -> float:
    total = sum(idf.values())
    return sum(w for t, w in idf.items() if t in terms) / total if total else 0.0


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
