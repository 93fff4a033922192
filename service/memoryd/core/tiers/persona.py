"""Persona: key/value facts about a user, unique per (key, value), explicit or inferred.

Facts come three ways. An Add stores what it is given (unique per key and value). A fact
extracted from a conversation (`learn`, source auto) is unique per key: a new value
replaces the old one, which stays in the fact's history, and it never touches a key the
user stated explicitly. An explicit "remember that ..." (`remember`) wins over an
extracted fact of its key the same way, and "forget ..." (`forget`) deletes.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memoryd.core.errors import FieldViolation
from memoryd.core.locks import KeyedLocks
from memoryd.core.memory.payload import content_hash
from memoryd.core.memory.vector_memory import VectorMemory, check_vector_restore
from memoryd.core.models import (
    AddCommand,
    AddResult,
    FactVersion,
    GetResult,
    ImportResult,
    Kind,
    Lookup,
    MemoryRecord,
    Operation,
    Origin,
    PruneCommand,
    PruneStrategy,
    RetrieveQuery,
    Scope,
    Source,
    Tier,
    TierUsage,
)
from memoryd.core.text import snake_key, utf8_len
from memoryd.core.tiers.base import TierHits
from memoryd.core.tiers.vector_tier import VectorTier
from memoryd.core.validation import Violations, check_key
from memoryd.settings import LimitSettings, LongTermSettings
from memoryd.stores.vectors.port import HasId, MatchAny, MatchValue

# Persona is small by nature; listing returns at most this many facts.
_LIST_LIMIT = 1000
# A forget command that names no key deletes at most this many facts by similarity.
_FORGET_LIMIT = 20


@dataclass
class FactChange:
    """What `learn` or `remember` did: `operation` None means skipped (`reason` says why)."""

    record: MemoryRecord
    operation: Operation | None
    reason: str = ""


class PersonaTier(VectorTier):
    """A vector tier without quota (no usage ledger): facts are few by nature."""

    tier = Tier.PERSONA

    def __init__(
        self,
        memory: VectorMemory,
        settings: LongTermSettings,
        limits: LimitSettings,
        clock: Callable[[], float],
    ) -> None:
        super().__init__(memory, clock, settings.compress_over_bytes)
        self._settings = settings
        self._limits = limits
        self._locks = KeyedLocks()

    def check_add(self, cmd: AddCommand, v: Violations) -> None:
        check_key(v, cmd.key, self._limits, required=True)

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
                await self._memory.update_fields([same.id], {"updated_at": now})
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
            await self._memory.insert([self._point(record, scope)])
        return AddResult(record.id, Operation.ADD, Tier.PERSONA, quota_remaining=-1)

    # ------------------------------------------------------------------ learning

    async def _facts(self, scope: Scope) -> list[MemoryRecord]:
        """Every fact of the user, newest first."""
        return await self._memory.records(self._live(scope), _LIST_LIMIT)

    def _new_fact(
        self,
        scope: Scope,
        key: str,
        value: str,
        kind: Kind,
        source: Source,
        now: float,
        session_id: str,
        metadata: dict[str, str],
    ) -> MemoryRecord:
        return MemoryRecord(
            id=str(uuid.uuid4()),
            tier=Tier.PERSONA,
            content=value,
            kind=kind,
            key=key,
            metadata=metadata,
            created_at=now,
            updated_at=now,
            source=source,
            agent_id=scope.agent_id,
            session_id=session_id,
        )

    @staticmethod
    def _changed(
        fact: MemoryRecord,
        value: str,
        source: Source,
        now: float,
        *,
        kind: Kind | None = None,
        session_id: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> MemoryRecord:
        """`fact` holding `value` now; its old value goes to its history (and so does how
        it came in: the new value's writer sets its origin again)."""
        return dataclasses.replace(
            fact,
            content=value,
            source=source,
            origin=Origin.UNSPECIFIED,
            updated_at=now,
            history=(*fact.history, FactVersion(fact.content, fact.source, now)),
            score=0.0,
            kind=fact.kind if kind is None else kind,
            session_id=fact.session_id if session_id is None else session_id,
            metadata=fact.metadata if metadata is None else metadata,
        )

    async def learn(
        self,
        scope: Scope,
        key: str,
        value: str,
        *,
        kind: Kind = Kind.FACT,
        session_id: str = "",
        metadata: dict[str, str] | None = None,
    ) -> FactChange:
        """An extracted fact (source auto), unique by key: a known key and value is skipped,
        a known key with another value is updated (the old value goes to its history), a
        key the user stated explicitly is never touched."""
        async with self._locks((scope.tenant, scope.user_id)):
            now = self._clock()
            same_key = [f for f in await self._facts(scope) if snake_key(f.key) == snake_key(key)]
            explicit = next((f for f in same_key if f.source is Source.EXPLICIT), None)
            if explicit is not None:
                return FactChange(explicit, None, "the user stated this key explicitly")
            digest = content_hash(scope, Tier.PERSONA, key, value)
            for fact in same_key:
                if content_hash(scope, Tier.PERSONA, key, fact.content) == digest:
                    return FactChange(fact, None, "known already")
            if same_key:
                record = self._changed(
                    same_key[0],
                    value,
                    Source.AUTO,
                    now,
                    kind=kind,
                    session_id=session_id,
                    metadata={**same_key[0].metadata, **(metadata or {})},
                )
                operation = Operation.UPDATED
            else:
                record = self._new_fact(
                    scope, key, value, kind, Source.AUTO, now, session_id, dict(metadata or {})
                )
                operation = Operation.ADD
            await self._memory.insert([self._point(record, scope)])
        return FactChange(record, operation)

    async def remember(
        self, scope: Scope, key: str, value: str, *, session_id: str = ""
    ) -> FactChange:
        """An explicit "remember that ...": the fact with source explicit. Said again it is
        refreshed; held by an extracted fact of the same key, that fact takes the value
        and becomes explicit (the old value goes to its history)."""
        async with self._locks((scope.tenant, scope.user_id)):
            now = self._clock()
            facts = await self._facts(scope)
            digest = content_hash(scope, Tier.PERSONA, key, value)
            same = next(
                (
                    f
                    for f in facts
                    if f.key == key and content_hash(scope, Tier.PERSONA, key, f.content) == digest
                ),
                None,
            )
            if same is not None:
                patch: dict[str, object] = {
                    "updated_at": now,
                    "source": Source.EXPLICIT.value,
                    "origin": Origin.COMMAND.value,
                }
                await self._memory.update_fields([same.id], patch)
                operation = (
                    Operation.DEDUPLICATED if same.source is Source.EXPLICIT else Operation.UPDATED
                )
                record = dataclasses.replace(
                    same, updated_at=now, source=Source.EXPLICIT, origin=Origin.COMMAND
                )
                return FactChange(record, operation)
            extracted = next(
                (
                    f
                    for f in facts
                    if snake_key(f.key) == snake_key(key) and f.source is not Source.EXPLICIT
                ),
                None,
            )
            if extracted is not None:
                # An extractor's confidence says nothing about what the user stated.
                kept = {k: v for k, v in extracted.metadata.items() if k != "confidence"}
                record = self._changed(extracted, value, Source.EXPLICIT, now, metadata=kept)
                operation = Operation.UPDATED
            else:
                record = self._new_fact(
                    scope, key, value, Kind.FACT, Source.EXPLICIT, now, session_id, {}
                )
                operation = Operation.ADD
            # Provenance: this value was stated by a memory command.
            record = dataclasses.replace(record, origin=Origin.COMMAND)
            await self._memory.insert([self._point(record, scope)])
        return FactChange(record, operation)

    async def forget(
        self,
        scope: Scope,
        keys: Sequence[str],
        about: str,
        min_score: float,
        *,
        among: set[str] | None = None,
    ) -> list[MemoryRecord]:
        """Delete the facts whose key is one of `keys` (compared in snake case); when none
        is, the facts scoring at least `min_score` against `about`; only facts whose id is
        in `among`, when given. Returns them."""
        async with self._locks((scope.tenant, scope.user_id)):
            live = self._live(scope)
            if among is not None:
                live = live.and_(HasId(sorted(among)))
            wanted = {snake_key(k) for k in keys} - {""}
            facts = await self._memory.records(live, _LIST_LIMIT)
            going = [f for f in facts if snake_key(f.key) in wanted]
            if not going and about.strip() and among != set():
                hits = await self._memory.search(live, about, _FORGET_LIMIT, min_score)
                going = hits.items
            await self._delete_records(scope, going)
        return going

    # ------------------------------------------------------------------ reads

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
            await self._memory.delete_ids(sorted(ids))
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
        return await self._remove(cmd.scope, flt, cmd.dry_run)

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
        count, size = await self._memory.measure(self._live(scope))
        return TierUsage(Tier.PERSONA, count=count, bytes=size)
