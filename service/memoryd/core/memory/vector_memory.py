"""The store and embedding gateway of the vector tiers: every call they make to the vector
store and the embedder passes here, with one error mapping (UNAVAILABLE).

A store call runs in a worker thread, except a search of an adapter whose searches keep
the GIL throughout (the embedded engine): that runs on the event loop. Ranking lives in
`core/retrieval` (`HybridSearch`, `Ranker`); what is derived from a user's points is kept
in one `DerivedCache`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from memoryd.core.errors import StoreUnavailable
from memoryd.core.memory import restore as restoring
from memoryd.core.memory.derived import DerivedCache
from memoryd.core.memory.embedding_batcher import EmbeddingBatcher
from memoryd.core.memory.own_vector import OWN_FIELD, keeps_own, pack
from memoryd.core.memory.payload import from_payload
from memoryd.core.memory.points import NewPoint
from memoryd.core.memory.restore import RestorePlan, check_vector_restore, is_uuid
from memoryd.core.memory.term_counts import carried, live_condition, payload_owner
from memoryd.core.models import ImportResult, Kind, MemoryRecord, Scope, Tier
from memoryd.core.observe import NullObserver, Observer
from memoryd.core.retrieval import bm25
from memoryd.core.retrieval.hybrid_search import HybridSearch
from memoryd.core.tiers.base import TierHits
from memoryd.settings import RetrievalSettings
from memoryd.stores.embeddings.port import EmbedderUnavailable
from memoryd.stores.vectors.port import (
    TERMS_FIELD,
    Condition,
    Filter,
    HasId,
    MatchAny,
    MatchValue,
    StoredPoint,
    VectorPoint,
    VectorStore,
    VectorStoreError,
    field_path,
)

__all__ = [
    "PAGE_SIZE",
    "NewPoint",
    "RestorePlan",
    "VectorMemory",
    "check_vector_restore",
]

# Points read per scroll page when exporting or measuring a user's memories.
PAGE_SIZE = 256

P = ParamSpec("P")
T = TypeVar("T")


class VectorMemory:
    """The vector tiers' one way to the vector store and the embedder: filters, inserts,
    reads page by page, removals, restores, and `search` (ranked by `HybridSearch`)."""

    def __init__(
        self,
        store: VectorStore,
        embedder: EmbeddingBatcher,
        retrieval: RetrievalSettings,
        clock: Callable[[], float],
        observer: Observer | None = None,
    ) -> None:
        self.store = store
        # An adapter whose searches keep the GIL from start to end (the embedded engine)
        # says so with this optional trait of its own (not part of the port): its searches
        # run on the event loop, since a thread would give the loop nothing back and add
        # two wake-ups, ~0.3 ms each on a VM (ADR 0002). Asked once: it is a constant.
        on_loop = bool(getattr(store, "searches_keep_the_gil", False))
        self._search_on_loop = store.search if on_loop else None
        self._embedder = embedder
        self._own_weight = retrieval.own_weight
        self._clock = clock
        self._encoder = bm25.BM25Encoder()
        # Shared with the tiers built on this memory, which report their removals to it.
        self.observer: Observer = observer or NullObserver()
        # What the core derives from a user's points (term counts, last turns, empty
        # tiers), kept until the user's next write.
        self.derived = DerivedCache(store.generation)
        self._search = HybridSearch(self, self._encoder, retrieval, clock, self.observer)

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

    async def embed(
        self, texts: Sequence[str], *, beside: bool = False
    ) -> tuple[list[list[float]], float]:
        started = time.perf_counter()
        try:
            with self.observer.embedding(len(texts)):
                vectors = await self._embedder.embed(texts, beside=beside)
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
            must.append(live_condition(self._clock()))
        return Filter(must=must, must_not=must_not)

    def keeps_own(self, lead: str) -> bool:
        """Whether a memory embedded after `lead` also keeps its own text's vector (ADR
        0409, `own_vector.keeps_own`). (The long-term tier asks before its lock, to embed
        both texts in one call.)"""
        return keeps_own(lead, self._own_weight)

    async def insert(self, points: Sequence[NewPoint], *, fresh: bool = False) -> float:
        """Embed (what is not embedded yet) and upsert; returns the embedding time in ms.

        `fresh`: the caller made these ids (new UUIDs, or checked absent under the user's
        lock), so the upsert replaces no point: the user's term counts are then carried
        through the write instead of voided (term_counts.py)."""
        if not points:
            return 0.0
        owns = [self.keeps_own(p.lead) for p in points]
        texts = [p.dense_text for p in points if p.vector is None]
        texts += [
            p.embed_text
            for p, own in zip(points, owns, strict=True)
            if own and p.own_vector is None
        ]
        missing = list(dict.fromkeys(texts))  # a text a batch holds twice is embedded once
        embedded, embedding_ms = await self.embed(missing) if missing else ([], 0.0)
        computed = dict(zip(missing, embedded, strict=True))
        upserts = []
        for p, own in zip(points, owns, strict=True):
            payload = {**p.payload, TERMS_FIELD: self._encoder.term_ids(p.embed_text)}
            if own:
                payload[OWN_FIELD] = pack(p.own_vector or computed[p.embed_text])
            vector = p.vector if p.vector is not None else computed[p.dense_text]
            sparse = self._encoder.encode_document(p.embed_text)
            upserts.append(
                VectorPoint(id=p.record.id, dense=vector, sparse=sparse, payload=payload)
            )
        owner = _owner(upserts) if fresh else None
        before, held = self.derived.held(owner) if owner is not None else (None, [])
        await self.call(self.store.upsert, upserts)
        if owner is not None and held:
            after = carried(held, [(p.id, p.payload) for p in upserts])
            self.derived.carry_written(owner, after, before)
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

    async def points(self, flt: Filter) -> AsyncIterator[list[StoredPoint]]:
        """Every matching point, one scroll page at a time (never all in memory), payloads
        undecoded (for callers that read a field or two)."""
        offset: str | None = None
        while True:
            points, offset = await self.call(self.store.scroll, flt, limit=PAGE_SIZE, offset=offset)
            if points:
                yield points
            if offset is None:
                return

    async def pages(self, flt: Filter) -> AsyncIterator[list[MemoryRecord]]:
        """Every matching memory, one scroll page at a time (never all in memory)."""
        async for points in self.points(flt):
            yield [from_payload(p.id, p.payload) for p in points]

    async def owners(self, tier: Tier) -> list[tuple[str, str]]:
        """Every (tenant, user_id) having memories of `tier`, read page by page."""
        found: set[tuple[str, str]] = set()
        async for points in self.points(Filter(must=[MatchValue("tier", tier.value)])):
            found.update((str(p.payload["tenant"]), str(p.payload["user_id"])) for p in points)
        return sorted(found)

    async def survey(
        self, tier: Tier, after_page: Callable[[float], Awaitable[None]] | None = None
    ) -> int:
        """Every stored memory of `tier`, all users (soft-deleted and expired ones too, as
        they still take space): reports each page's ages in days to the observer and
        returns their content bytes. `after_page` is awaited after each page with the
        seconds the page took (to pace the survey)."""
        now = self._clock()
        size = 0
        started = time.perf_counter()
        async for points in self.points(Filter(must=[MatchValue("tier", tier.value)])):
            size += sum(int(p.payload.get("size", 0)) for p in points)
            created = [float(p.payload.get("created_at", now)) for p in points]
            self.observer.ages(tier, [max(0.0, now - c) / 86_400.0 for c in created])
            if after_page is not None:
                await after_page(time.perf_counter() - started)
                started = time.perf_counter()
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
        async for points in self.points(flt):
            count += len(points)
            size += sum(int(p.payload.get("size", 0)) for p in points)
        return count, size

    async def plan_restore(self, scope: Scope, records: Sequence[MemoryRecord]) -> RestorePlan:
        """Which imported memories are new for the user, under which ids (`restore`)."""
        return await restoring.plan_restore(self, scope, records)

    async def write_restore(
        self, scope: Scope, plan: RestorePlan, compress_over_bytes: int, lead_chars: int = 0
    ) -> ImportResult:
        """Write the plan's new memories under the user (`restore`)."""
        return await restoring.write_restore(self, scope, plan, compress_over_bytes, lead_chars)

    async def restore(
        self, scope: Scope, records: Sequence[MemoryRecord], compress_over_bytes: int
    ) -> ImportResult:
        """`plan_restore`, then `write_restore`."""
        plan = await self.plan_restore(scope, records)
        return await self.write_restore(scope, plan, compress_over_bytes)

    async def by_ids(self, flt: Filter, ids: Sequence[str]) -> list[MemoryRecord]:
        valid = [i for i in ids if is_uuid(i)]
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
        grounding: str = "",
    ) -> TierHits:
        """The memories `flt` selects that best answer `query` (also read in the light of
        `grounding`, the task's state), ranked (`HybridSearch`), each with its score
        components."""
        return await self._search.search(
            flt, query, top_k, min_score, context_window=context_window, grounding=grounding
        )


def _owner(points: Sequence[VectorPoint]) -> tuple[str, str] | None:
    """The one (tenant, user_id) all `points` belong to, if they share one."""
    owners = {payload_owner(p.payload) for p in points}
    return owners.pop() if len(owners) == 1 else None
