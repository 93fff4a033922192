"""Persona: key/value facts about a user, unique per (key, value), explicit or inferred."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence

from memoryd.core.errors import FieldViolation
from memoryd.core.locks import KeyedLocks
from memoryd.core.memory.payload import content_hash, embed_text_of, to_payload
from memoryd.core.memory.vector_memory import NewPoint, VectorMemory, check_vector_restore
from memoryd.core.models import (
    AddCommand,
    AddResult,
    GetResult,
    ImportResult,
    Kind,
    Lookup,
    MemoryRecord,
    Operation,
    PruneCommand,
    PruneStrategy,
    RetrieveQuery,
    Scope,
    Source,
    Tier,
    TierUsage,
)
from memoryd.core.text import utf8_len
from memoryd.core.tiers.base import TierHits
from memoryd.core.validation import Violations, check_key
from memoryd.settings import LimitSettings, LongTermSettings
from memoryd.stores.vectors.port import Filter, MatchAny, MatchValue

# Persona is small by nature; listing returns at most this many facts.
_LIST_LIMIT = 1000


class PersonaTier:
    tier = Tier.PERSONA

    def __init__(
        self,
        memory: VectorMemory,
        settings: LongTermSettings,
        limits: LimitSettings,
        clock: Callable[[], float],
    ) -> None:
        self._memory = memory
        self._settings = settings
        self._limits = limits
        self._clock = clock
        self._locks = KeyedLocks()

    def check_add(self, cmd: AddCommand, v: Violations) -> None:
        check_key(v, cmd.key, self._limits, required=True)

    def can_retrieve(self, scope: Scope) -> bool:
        return True

    def _live(self, scope: Scope) -> Filter:
        return self._memory.scope_filter(scope, Tier.PERSONA)

    async def add(self, cmd: AddCommand) -> AddResult:
        scope = cmd.scope
        digest = content_hash(scope, Tier.PERSONA, cmd.key, cmd.content)
        now = self._clock()
        async with self._locks((scope.tenant, scope.user_id)):
            same = await self._memory.first(
                self._live(scope).and_(MatchValue("content_hash", digest))
            )
            if same is not None:
                # Remembering a known fact again only refreshes it.
                await self._memory.call(
                    self._memory.store.set_payload, [same.id], {"updated_at": now}
                )
                return AddResult(same.id, Operation.DEDUPLICATED, Tier.PERSONA, quota_remaining=-1)
            record = MemoryRecord(
                id=str(uuid.uuid4()),
                tier=Tier.PERSONA,
                content=cmd.content,
                kind=Kind.FACT if cmd.kind is Kind.UNSPECIFIED else cmd.kind,
                key=cmd.key,
                metadata=dict(cmd.metadata),
                importance=0.5 if cmd.importance is None else cmd.importance,
                created_at=now,
                updated_at=now,
                source=Source.EXPLICIT if cmd.source is Source.UNSPECIFIED else cmd.source,
                agent_id=scope.agent_id,
            )
            payload = to_payload(record, scope, digest, self._settings.compress_over_bytes)
            await self._memory.insert([NewPoint(record, payload, embed_text_of(payload))])
        return AddResult(record.id, Operation.ADD, Tier.PERSONA, quota_remaining=-1)

    async def retrieve(self, query: RetrieveQuery, top_k: int) -> TierHits:
        flt = self._memory.scope_filter(
            query.scope, Tier.PERSONA, metadata=query.filters, kinds=query.kinds
        )
        if not query.query.strip():
            # Persona facts are few and all relevant: with no query, list every one.
            items = await self._memory.records(flt, _LIST_LIMIT)
            return TierHits(items=items, total=len(items))
        return await self._memory.search(flt, query.query, top_k, query.min_score)

    async def get(self, lookup: Lookup) -> GetResult:
        live = self._live(lookup.scope)
        found = await self._memory.by_ids(live, lookup.ids)
        if lookup.keys:
            by_key = live.and_(MatchAny("key", list(lookup.keys)))
            found += await self._memory.records(by_key, _LIST_LIMIT)
        found_ids = {r.id for r in found}
        found_keys = {r.key for r in found}
        missing = [i for i in lookup.ids if i not in found_ids]
        missing += [k for k in lookup.keys if k not in found_keys]
        unique = list({r.id: r for r in found}.values())
        return GetResult(items=unique, missing=missing)

    async def delete(self, lookup: Lookup) -> int:
        """Forgetting is a hard delete: a persona fact the user withdrew must not linger."""
        live = self._live(lookup.scope)
        ids = {r.id for r in await self._memory.by_ids(live, lookup.ids)}
        if lookup.keys:
            by_key = live.and_(MatchAny("key", list(lookup.keys)))
            ids |= {r.id for r in await self._memory.records(by_key, _LIST_LIMIT)}
        if ids:
            await self._memory.call(self._memory.store.delete, sorted(ids))
        return len(ids)

    async def prune(self, cmd: PruneCommand) -> int:
        memory = self._memory
        if cmd.strategy is PruneStrategy.ALL:
            flt = memory.scope_filter(cmd.scope, Tier.PERSONA, live_only=False)
        elif cmd.strategy is PruneStrategy.BY_FILTER:
            flt = memory.scope_filter(
                cmd.scope, Tier.PERSONA, live_only=False, metadata=cmd.filters
            )
        else:
            return 0  # persona facts are permanent: they neither expire nor age out
        return await memory.remove(flt, cmd.dry_run)

    async def export_count(self, scope: Scope) -> int:
        return await self._memory.export_count(scope, Tier.PERSONA)

    def export_pages(self, scope: Scope) -> AsyncIterator[list[MemoryRecord]]:
        return self._memory.export_pages(scope, Tier.PERSONA)

    def check_restore(self, record: MemoryRecord) -> list[FieldViolation]:
        problems = check_vector_restore(record)
        if not record.key:
            problems.append(FieldViolation("key", "is required for persona items"))
        elif utf8_len(record.key) > self._limits.max_key_bytes:
            problems.append(FieldViolation("key", f"is over {self._limits.max_key_bytes} bytes"))
        return problems

    async def check_room(
        self, scope: Scope, records: Sequence[MemoryRecord], auto_prune: bool
    ) -> None:
        return None  # persona facts have no quota

    async def restore(
        self, scope: Scope, records: Sequence[MemoryRecord], auto_prune: bool = False
    ) -> ImportResult:
        return await self._memory.restore(scope, records, self._settings.compress_over_bytes)

    async def usage(self, scope: Scope) -> TierUsage:
        """Persona has no quota: limits and percent are 0."""
        count, size = await self._memory.measure(self._memory.scope_filter(scope, Tier.PERSONA))
        return TierUsage(Tier.PERSONA, count=count, bytes=size)
