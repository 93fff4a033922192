"""Entity memory: the people, organisations, places and projects a user's memories talk
about, and (subject, predicate, object) relations between them.

An entity is unique per user by name (case and spacing aside): an Add naming a known name
or alias merges into that entity. A relation names its ends by name; missing entities are
created. A subject holds one object per predicate unless the predicate is multi-valued
(settings): a newer relation to another object closes the old one (`invalid_at`) instead
of deleting it, so what used to hold stays on record. Relations point at their entities'
name keys, so an export imported under another user keeps its links. Deleting an entity
deletes its relations.

Quotas (RT-006, from the quota profile): entities and relations per user, refused with the
same error as the other tiers unless auto-prune drops the oldest 10% first. Entities are
persistent (RT-005): they neither expire nor go to the cold archive.

Across replicas (ADR 0500): the quotas are reserved on the usage counters (one per kind,
`entity/entities` and `entity/relations`), so no two writers pass them; every find-then-
write sequence of a user (merge by name, relation ends, import, delete, prune) runs under
the user's entity lock (`UserLocks`: Redis when configured, so every replica takes the
same one), so two replicas adding one name at once end with one entity.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

from memoryd.core.errors import FieldViolation, StoreUnavailable
from memoryd.core.lifecycle.ledger import Holds
from memoryd.core.lifecycle.quotas import QuotaProfiles
from memoryd.core.memory.vector_memory import VectorMemory
from memoryd.core.models import (
    AddCommand,
    AddResult,
    Entity,
    GetResult,
    ImportResult,
    Kind,
    Lookup,
    MemoryRecord,
    Operation,
    PruneCommand,
    PruneStrategy,
    Relation,
    RetrieveQuery,
    Scope,
    Source,
    Tier,
    TierUsage,
)
from memoryd.core.tiers import entity_records
from memoryd.core.tiers.base import TierHits
from memoryd.core.tiers.bodies import (
    INVALID_AT,
    OBJECT_KEY,
    PREDICATE_KEY,
    SUBJECT_KEY,
    name_key,
    predicate_key,
    render_entity,
)
from memoryd.core.tiers.entity_graph import EntityGraph, names_of, pick
from memoryd.core.tiers.entity_quota import EntityQuotas
from memoryd.core.tiers.entity_records import EntityChange, new_entity, new_relation
from memoryd.core.tiers.vector_tier import VectorTier
from memoryd.core.validation import Violations
from memoryd.settings import EntitySettings, LimitSettings
from memoryd.stores.locks.port import LocksUnavailable, UserLocks
from memoryd.stores.usage.port import UsageCounters
from memoryd.stores.vectors.port import MatchValue

__all__ = ["EntityChange", "EntityTier"]

# The user lock every entity write sequence holds (see the module docstring).
_LOCK = "entity"


class EntityTier(VectorTier):
    """The entity tier's requests. Graph queries are `EntityGraph`'s, the two quotas
    `EntityQuotas`', what a record holds `entity_records`'."""

    tier = Tier.ENTITY

    def __init__(
        self,
        memory: VectorMemory,
        settings: EntitySettings,
        quotas: QuotaProfiles,
        limits: LimitSettings,
        clock: Callable[[], float],
        counters: UsageCounters,
        locks: UserLocks,
        compress_over_bytes: int = 1024,
    ) -> None:
        super().__init__(memory, clock, compress_over_bytes)
        self._limits = limits
        self._multi_valued = {predicate_key(p) for p in settings.multi_valued_predicates}
        self._user_locks = locks
        self._graph = EntityGraph(memory, clock, settings.max_relations_per_entity)
        self._quota = EntityQuotas(memory, self._graph, quotas, counters, clock)
        self._ledgers.extend(self._quota.ledgers.values())

    @contextlib.asynccontextmanager
    async def _locked(self, scope: Scope) -> AsyncIterator[None]:
        """The user's entity lock, across replicas; out of reach: UNAVAILABLE."""
        async with contextlib.AsyncExitStack() as stack:
            try:
                await stack.enter_async_context(
                    self._user_locks.hold(scope.tenant, scope.user_id, _LOCK)
                )
            except LocksUnavailable as exc:
                raise StoreUnavailable("entity locks", str(exc)) from exc
            yield

    def check_add(self, cmd: AddCommand, v: Violations) -> None:
        entity_records.check_add(cmd, self._limits, v)

    # ------------------------------------------------------------------ writes

    async def upsert_entity(
        self,
        scope: Scope,
        entity: Entity,
        *,
        source: Source = Source.EXPLICIT,
        auto_prune: bool = False,
        session_id: str = "",
        metadata: Mapping[str, str] | None = None,
        importance: float | None = None,
    ) -> EntityChange:
        """Add the entity, or merge it into the one already known by its name or an alias."""
        quota = self._quota
        async with self._locked(scope):
            now = self._clock()
            found = await self._graph.find(scope, (entity.name, *entity.aliases))
            existing = pick(found, entity.name) or (found[0] if found else None)
            if existing is not None:
                merged = entity_records.merged(existing, entity, source)
                room = await quota.room(scope, Kind.ENTITY)
                if merged is None:
                    return EntityChange(existing, Operation.DEDUPLICATED, room)
                record = dataclasses.replace(
                    existing,
                    entity=merged,
                    content=render_entity(merged),
                    updated_at=now,
                    source=Source.EXPLICIT if source is Source.EXPLICIT else existing.source,
                    score=0.0,
                )
                await self._memory.insert([self._point(record, scope)])
                return EntityChange(record, Operation.UPDATED, room)
            async with Holds() as holds:
                await quota.hold(
                    holds, scope, Kind.ENTITY, 1, auto_prune=auto_prune, delete=self._delete
                )
                record = new_entity(
                    scope,
                    entity,
                    source,
                    now,
                    session_id=session_id,
                    metadata=metadata,
                    importance=importance,
                )
                point = self._point(record, scope)
                await holds.write([record], lambda: self._memory.insert([point]))
            room = await quota.room(scope, Kind.ENTITY)
        operation = Operation.ADD_WITH_PRUNE if holds.pruned else Operation.ADD
        return EntityChange(record, operation, room)

    async def add_relation(
        self,
        scope: Scope,
        relation: Relation,
        *,
        source: Source = Source.EXPLICIT,
        auto_prune: bool = False,
        session_id: str = "",
        metadata: Mapping[str, str] | None = None,
        importance: float | None = None,
    ) -> EntityChange:
        """Link two entities by name (creating the missing ones). A current relation of the
        same subject and (single-valued) predicate to another object is closed at this
        one's `valid_from`; if that one started later, this one is stored closed instead."""
        graph, quota = self._graph, self._quota
        async with self._locked(scope):
            now = self._clock()
            valid_from = relation.valid_from if relation.valid_from is not None else now
            predicate = predicate_key(relation.predicate)
            found = await graph.find(scope, (relation.subject, relation.object))
            ends = {name_key(n): pick(found, n) for n in (relation.subject, relation.object)}
            relations = graph.of_kind(scope, Kind.RELATION).and_(
                MatchValue(PREDICATE_KEY, predicate)
            )
            subject, obj = ends[name_key(relation.subject)], ends[name_key(relation.object)]
            if subject is not None and obj is not None:
                same = await self._memory.records(
                    graph.current(
                        relations.and_(
                            MatchValue(SUBJECT_KEY, subject.key), MatchValue(OBJECT_KEY, obj.key)
                        )
                    ),
                    1,
                )
                if same:
                    room = await quota.room(scope, Kind.RELATION)
                    return EntityChange(same[0], Operation.DEDUPLICATED, room)
            missing = sum(1 for r in ends.values() if r is None)
            keep = [r.id for r in ends.values() if r is not None]
            async with Holds() as holds:
                await quota.hold(
                    holds,
                    scope,
                    Kind.ENTITY,
                    missing,
                    auto_prune=auto_prune,
                    keep=keep,
                    delete=self._delete,
                )
                await quota.hold(
                    holds, scope, Kind.RELATION, 1, auto_prune=auto_prune, delete=self._delete
                )
                created: list[MemoryRecord] = []
                for name in (relation.subject, relation.object):
                    if ends[name_key(name)] is None:
                        made = new_entity(
                            scope, Entity(name=name), source, now, session_id=session_id
                        )
                        ends[name_key(name)] = made
                        created.append(made)
                subject, obj = ends[name_key(relation.subject)], ends[name_key(relation.object)]
                assert subject is not None and subject.entity is not None
                assert obj is not None and obj.entity is not None
                closed: list[str] = []
                invalid_at = relation.invalid_at
                if invalid_at is None and predicate not in self._multi_valued:
                    of_subject = relations.and_(MatchValue(SUBJECT_KEY, subject.key))
                    closed, invalid_at = await graph.superseded(of_subject, valid_from, None)
                record = new_relation(
                    scope,
                    relation,
                    subject.entity,
                    obj.entity,
                    valid_from,
                    invalid_at,
                    source,
                    now,
                    session_id=session_id,
                    metadata=metadata,
                    importance=importance,
                )
                written = [*created, record]
                points = [self._point(r, scope) for r in written]
                await holds.write(written, lambda: self._memory.insert(points))
            if closed:
                await self._memory.update_fields(
                    closed, {INVALID_AT: valid_from, "updated_at": now}
                )
            room = await quota.room(scope, Kind.RELATION)
        operation = Operation.ADD_WITH_PRUNE if holds.pruned else Operation.ADD
        return EntityChange(record, operation, room, created, closed)

    async def add(self, cmd: AddCommand) -> AddResult:
        source = Source.EXPLICIT if cmd.source is Source.UNSPECIFIED else cmd.source
        scope, prune, session = cmd.scope, cmd.auto_prune, cmd.scope.session_id
        if cmd.entity is not None:
            change = await self.upsert_entity(
                scope,
                cmd.entity,
                source=source,
                auto_prune=prune,
                session_id=session,
                metadata=cmd.metadata,
                importance=cmd.importance,
            )
        else:
            assert cmd.relation is not None  # check_add made sure of one of them
            change = await self.add_relation(
                scope,
                cmd.relation,
                source=source,
                auto_prune=prune,
                session_id=session,
                metadata=cmd.metadata,
                importance=cmd.importance,
            )
        return AddResult(change.record.id, change.operation, Tier.ENTITY, change.quota_remaining)

    # ------------------------------------------------------------------ reads

    async def retrieve(self, query: RetrieveQuery, top_k: int) -> TierHits:
        """Entities (or the kinds asked for) by hybrid search, each with its relations; with
        no query, the newest."""
        kinds = query.kinds or [Kind.ENTITY]
        flt = self._memory.scope_filter(
            query.scope, Tier.ENTITY, metadata=query.filters, kinds=kinds
        )
        if not query.query.strip():
            items = await self._memory.records(flt, top_k)
            hits = TierHits(items=items, total=await self._count(flt))
        else:
            hits = await self._memory.search(flt, query.query, top_k, query.min_score)
        hits.items = await self._graph.with_relations(query.scope, hits.items)
        return hits

    async def get(self, lookup: Lookup) -> GetResult:
        found, missing = await self._graph.lookup(lookup)
        items = await self._graph.with_relations(lookup.scope, found)
        return GetResult(items=items, missing=missing)

    # ------------------------------------------------------------------ deletes

    async def _delete(self, scope: Scope, records: Sequence[MemoryRecord]) -> int:
        """Delete `records`, their entities' relations with them; returns how many went."""
        going = await self._graph.cascade(scope, records)
        await self._delete_records(scope, [going[i] for i in sorted(going)])
        return len(going)

    async def delete(self, lookup: Lookup) -> int:
        """Hard delete; an entity takes its relations with it. Returns every item deleted."""
        async with self._locked(lookup.scope):
            found, _ = await self._graph.lookup(lookup)
            return await self._delete(lookup.scope, found)

    async def _oldest(self, scope: Scope, kind: Kind, percent: float) -> list[MemoryRecord]:
        flt = self._graph.of_kind(scope, kind)
        n = math.ceil(await self._count(flt) * percent / 100)
        return await self._memory.records(flt, n, newest_first=False) if n else []

    async def prune(self, cmd: PruneCommand) -> int:
        memory, scope = self._memory, cmd.scope
        everything = memory.scope_filter(scope, Tier.ENTITY, live_only=False)
        if cmd.strategy is PruneStrategy.ARCHIVE_OLDER_THAN:
            return 0  # persistent (RT-005): entities are never archived
        async with self._locked(scope):
            if cmd.strategy is PruneStrategy.ALL:
                return await self._remove(scope, everything, cmd.dry_run)
            if cmd.strategy is PruneStrategy.EXPIRED:
                # Nothing here expires; only items imported with the deleted mark are purged.
                deleted = everything.and_(MatchValue("deleted", True))
                return await self._remove(scope, deleted, cmd.dry_run)
            if cmd.strategy is PruneStrategy.BY_FILTER:
                flt = memory.scope_filter(scope, Tier.ENTITY, live_only=False, metadata=cmd.filters)
                going = [r async for page in memory.pages(flt) for r in page]
            else:  # OLDEST_PERCENT: of the entities (with their relations) and relations
                going = await self._oldest(scope, Kind.ENTITY, cmd.percent)
                going += await self._oldest(scope, Kind.RELATION, cmd.percent)
            if cmd.dry_run:
                return len(await self._graph.cascade(scope, going))
            return await self._delete(scope, going)

    # ------------------------------------------------------------------ import

    def check_restore(self, record: MemoryRecord) -> list[FieldViolation]:
        return entity_records.restore_problems(record, self._limits)

    async def check_room(
        self, scope: Scope, records: Sequence[MemoryRecord], auto_prune: bool
    ) -> None:
        """Refuse an import whose entities or relations would pass their quota (ids already
        stored count as nothing new). Entity imports do not auto-prune: `auto_prune` is
        accepted for the common signature, and the quota is still enforced."""
        plan = await self._memory.plan_restore(scope, records)
        for kind, new in self._quota.counted(plan.new).items():
            if new > await self._quota.room(scope, kind):
                raise self._quota.full(scope, kind)

    async def restore(
        self, scope: Scope, records: Sequence[MemoryRecord], auto_prune: bool = False
    ) -> ImportResult:
        """Content and name key derive from the body, as on Add. An entity whose name the
        user already has under another id is skipped: names stay unique."""
        derived = [d for r in records if (d := entity_records.derived(r)) is not None]
        async with self._locked(scope):
            names = [r.entity.name for r in derived if r.entity is not None]
            known = {
                key: str(uuid.UUID(r.id))
                for r in await self._graph.find(scope, names)
                for key in names_of(r)
            }
            kept: list[MemoryRecord] = []
            skipped = 0
            for r in derived:
                if r.entity is not None:
                    holder = known.get(name_key(r.entity.name))
                    if holder is not None and holder != str(uuid.UUID(r.id)):
                        skipped += 1
                        continue
                    known.setdefault(name_key(r.entity.name), str(uuid.UUID(r.id)))
                kept.append(r)
            plan = await self._memory.plan_restore(scope, kept)
            async with Holds() as holds:
                for kind, new in self._quota.counted(plan.new).items():
                    await self._quota.hold(holds, scope, kind, new)
                result = await holds.write(
                    plan.new,
                    lambda: self._memory.write_restore(scope, plan, self._compress_over_bytes),
                )
        result.skipped_count += skipped
        return result

    async def usage(self, scope: Scope) -> TierUsage:
        """Entities against their quota; bytes of entities and relations; percent is that of
        the fuller of the two quotas."""
        graph, quota = self._graph, self._quota
        _, entity_bytes = await self._memory.measure(graph.of_kind(scope, Kind.ENTITY))
        _, relation_bytes = await self._memory.measure(graph.of_kind(scope, Kind.RELATION))
        # The counts (what the quotas check) from the counters.
        entities = await quota.held(scope, Kind.ENTITY)
        relations = await quota.held(scope, Kind.RELATION)
        max_entities, profile = quota.limit(scope, Kind.ENTITY)
        return TierUsage(
            Tier.ENTITY,
            count=entities,
            bytes=entity_bytes + relation_bytes,
            max_count=max_entities,
            percent=quota.percent(scope, entities, relations),
            quota_profile=profile,
        )
