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
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import numpy as np

from memoryd.core.errors import FieldViolation, StoreUnavailable
from memoryd.core.memory.embedding_batcher import EmbeddingBatcher
from memoryd.core.memory.payload import content_hash, embed_text_of, from_payload, to_payload
from memoryd.core.models import ImportResult, Kind, MemoryRecord, Scope, Tier
from memoryd.core.retrieval import bm25
from memoryd.core.tiers.base import TierHits
from memoryd.settings import RetrievalSettings
from memoryd.stores.embeddings.port import EmbedderUnavailable
from memoryd.stores.vectors.port import (
    TERMS_FIELD,
    Condition,
    Filter,
    HasId,
    IsEmpty,
    MatchAny,
    MatchValue,
    Range,
    RrfParams,
    StoredPoint,
    VectorPoint,
    VectorStore,
    VectorStoreError,
    canonical_id,
)

# Points read per scroll page when exporting or measuring a user's memories.
PAGE_SIZE = 256
# Memories embedded and upserted per batch on import.
_IMPORT_BATCH = 64
# Derives the id an imported memory takes when its own id belongs to another user.
_IMPORT_NAMESPACE = uuid.UUID("0b7e2c55-1a8f-4d3c-b6a2-9e4f7d21c3a8")

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class NewPoint:
    """A memory to insert: its record, its payload, and the text to embed."""

    record: MemoryRecord
    payload: dict[str, Any]
    embed_text: str


class VectorMemory:
    def __init__(
        self,
        store: VectorStore,
        embedder: EmbeddingBatcher,
        retrieval: RetrievalSettings,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self._embedder = embedder
        self._retrieval = retrieval
        self._clock = clock
        self._encoder = bm25.BM25Encoder()

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a blocking store call in a thread; a store failure becomes UNAVAILABLE."""
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except VectorStoreError as exc:
            raise StoreUnavailable("vector store", str(exc)) from exc

    async def embed(self, texts: Sequence[str]) -> tuple[list[list[float]], float]:
        started = time.perf_counter()
        try:
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
        must += [MatchValue(f"metadata.{k}", v) for k, v in (metadata or {}).items()]
        if kinds:
            must.append(MatchAny("kind", [k.value for k in kinds]))
        must += list(extra)
        must_not: list[Condition] = []
        if live_only:
            must_not.append(MatchValue("deleted", True))
            must.append(
                Filter(should=[IsEmpty("expires_at"), Range("expires_at", gt=self._clock())])
            )
        return Filter(must=must, must_not=must_not)

    async def insert(self, points: Sequence[NewPoint]) -> float:
        """Embed and upsert; returns the embedding time in ms."""
        if not points:
            return 0.0
        vectors, embedding_ms = await self.embed([p.embed_text for p in points])
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

    async def first(self, flt: Filter) -> StoredPoint | None:
        points, _ = await self.call(self.store.scroll, flt, limit=1)
        return points[0] if points else None

    async def records(
        self, flt: Filter, limit: int, *, newest_first: bool = True
    ) -> list[MemoryRecord]:
        points, _ = await self.call(
            self.store.scroll, flt, limit=limit, order_by="created_at", descending=newest_first
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

    async def restore(
        self, scope: Scope, records: Sequence[MemoryRecord], compress_over_bytes: int
    ) -> ImportResult:
        """Re-embed and upsert imported memories under `scope`'s user, keeping their ids,
        times and payload. An id the user already has is skipped; an id that belongs to
        another user or tenant is never overwritten: the memory takes an id derived from
        it (the same on every import, so importing twice still skips)."""
        result = ImportResult()
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
            points: list[NewPoint] = []
            for point_id, record in targets:
                if point_id in known or point_id in seen:
                    result.skipped_count += 1
                    continue
                seen.add(point_id)
                restored = dataclasses.replace(record, id=point_id, score=0.0, archived=False)
                digest = content_hash(scope, record.tier, record.key, record.content)
                payload = to_payload(restored, scope, digest, compress_over_bytes)
                payload["deleted"] = record.deleted
                points.append(NewPoint(restored, payload, embed_text_of(payload)))
            await self.insert(points)
            result.imported_count += len(points)
        return result

    async def by_ids(self, flt: Filter, ids: Sequence[str]) -> list[MemoryRecord]:
        valid = [i for i in ids if _is_uuid(i)]
        if not valid:
            return []
        points, _ = await self.call(self.store.scroll, flt.and_(HasId(valid)), limit=len(valid))
        return [from_payload(p.id, p.payload) for p in points]

    async def search(
        self, flt: Filter, query: str, top_k: int, min_score: float | None
    ) -> TierHits:
        """Candidates by hybrid search, scored 0..1 (see `relevance`), then picked by
        relevance with a penalty for repeating an already picked memory (`diversify`)."""
        settings = self._retrieval
        threshold = settings.min_score if min_score is None else min_score
        live = await self.call(self.store.count, flt)
        if live == 0:
            return TierHits(items=[], total=0)  # the empty case answers without embedding
        query_sparse = self._encoder.encode_query(query)
        terms = list(query_sparse.indices)
        sparse = query_sparse if terms else None
        dense: list[float] | None = None
        embedding_ms = 0.0
        if settings.mode != "keyword" or sparse is None:
            [dense], embedding_ms = await self.embed([query])
        if settings.mode == "dense":
            sparse = None
        if settings.mode == "keyword" and sparse is not None:
            dense = None
        fusion = RrfParams(
            k=settings.rrf_k,
            dense_weight=settings.dense_weight,
            sparse_weight=settings.sparse_weight,
        )
        hits = await self.call(
            self.store.search,
            flt,
            dense=dense,
            sparse=sparse,
            limit=max(4 * top_k, 20),
            fusion=fusion,
            with_vectors=dense is not None,
        )
        idf = await self.call(self._idf, flt, terms, live) if hits and terms else {}
        query_vector = None if dense is None else np.asarray(dense)
        candidates: list[_Candidate] = []
        for hit in hits:
            record = from_payload(hit.id, hit.payload)
            vector = None if hit.dense_vector is None else np.asarray(hit.dense_vector)
            cosine = _cosine(query_vector, vector)
            share = _keyword_share(idf, self._terms_of(hit.payload))
            record.score = relevance(cosine, share, settings.keyword_weight)
            if record.score >= threshold:
                candidates.append(_Candidate(record, vector))
        candidates.sort(key=lambda c: c.record.score, reverse=True)
        if candidates and settings.relative_cutoff:
            # Precision over recall: neighbours far below the best match are noise.
            floor = candidates[0].record.score * settings.relative_cutoff
            candidates = [c for c in candidates if c.record.score >= floor]
        picked = diversify(candidates, top_k, settings.diversity)
        return TierHits(items=picked, total=len(candidates), embedding_ms=embedding_ms)

    def _idf(self, flt: Filter, terms: Sequence[int], live: int) -> dict[int, float]:
        """BM25 inverse document frequency of each query term among the memories `flt`
        selects (this user's, so other users' words never weigh on the ranking)."""
        idf: dict[int, float] = {}
        for term in terms:
            df = self.store.count(flt.and_(MatchValue(TERMS_FIELD, term)))
            idf[term] = math.log(1.0 + (live - df + 0.5) / (df + 0.5))
        return idf

    def _terms_of(self, payload: Mapping[str, Any]) -> set[int]:
        # Memories written before term ids were stored are tokenised here instead.
        stored = payload.get(TERMS_FIELD)
        if stored is None:
            return set(self._encoder.term_ids(embed_text_of(payload)))
        return set(stored)


@dataclass
class _Candidate:
    record: MemoryRecord
    vector: np.ndarray[Any, Any] | None


def relevance(cosine: float, keyword_share: float, keyword_weight: float) -> float:
    """The 0..1 score callers see: the memory's semantic similarity to the query (cosine,
    clipped at 0), raised towards 1 by the IDF-weighted share of the query's keywords
    it contains. Either signal alone can make a memory relevant; a memory sharing no
    keyword scores its similarity alone; with weight 1 a memory holding every keyword of
    the query scores 1."""
    return cosine + (1.0 - cosine) * keyword_weight * keyword_share


def diversify(candidates: Sequence[_Candidate], top_k: int, penalty: float) -> list[MemoryRecord]:
    """Maximal marginal relevance: repeatedly take the candidate whose score, minus
    `penalty` times its similarity to the closest memory already taken, is highest.
    Near-repeats of a taken memory sink below memories that add something new, so a
    small top_k (and the token budget) is not spent on one fact said several ways.
    Scores are not changed; with penalty 0 (or no vectors) the order is by score."""
    if penalty <= 0 or any(c.vector is None for c in candidates):
        return [c.record for c in candidates[:top_k]]
    rest = list(candidates)
    taken: list[_Candidate] = []
    while rest and len(taken) < top_k:
        best = max(rest, key=lambda c: c.record.score - penalty * _redundancy(c, taken))
        rest.remove(best)
        taken.append(best)
    return [c.record for c in taken]


def _redundancy(candidate: _Candidate, taken: Sequence[_Candidate]) -> float:
    assert candidate.vector is not None
    return max((float(candidate.vector @ t.vector) for t in taken), default=0.0)


def check_vector_restore(record: MemoryRecord) -> list[FieldViolation]:
    """Vector store point ids are UUIDs."""
    if _is_uuid(record.id):
        return []
    return [FieldViolation("id", "must be a UUID for long-term and persona items")]


def _owned(payload: Mapping[str, Any], scope: Scope) -> bool:
    return payload.get("tenant") == scope.tenant and payload.get("user_id") == scope.user_id


def _derived(scope: Scope, point_id: str) -> str:
    return str(uuid.uuid5(_IMPORT_NAMESPACE, "\x00".join((scope.tenant, scope.user_id, point_id))))


def _cosine(query: np.ndarray[Any, Any] | None, vector: np.ndarray[Any, Any] | None) -> float:
    if query is None or vector is None:
        return 0.0
    # Both sides are unit length (the embedder normalises, the store keeps cosine vectors).
    return max(0.0, min(1.0, float(query @ vector)))


def _keyword_share(idf: Mapping[int, float], terms: set[int]) -> float:
    total = sum(idf.values())
    return sum(w for t, w in idf.items() if t in terms) / total if total else 0.0


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
