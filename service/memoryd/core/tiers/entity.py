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

import asyncio
import contextlib
import dataclasses
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from memoryd.core.errors import FieldViolation, QuotaExceeded, StoreUnavailable
from memoryd.core.lifecycle.ledger import Ledger
from memoryd.core.lifecycle.quotas import QuotaProfiles, quota_full, quota_percent
from memoryd.core.memory.payload import content_hash, embed_text_of, to_payload
from memoryd.core.memory.vector_memory import PAGE_SIZE, NewPoint, VectorMemory
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
from memoryd.core.tiers.archiving import AUTO_PRUNE_SHARE
from memoryd.core.tiers.base import TierHits
from memoryd.core.tiers.bodies import (
    INVALID_AT,
    MAX_ALIASES,
    NAMES_FIELD,
    OBJECT_KEY,
    PREDICATE_KEY,
    SUBJECT_KEY,
    entity_problems,
    name_key,
    predicate_key,
    relation_problems,
    render_entity,
    render_relation,
)
from memoryd.core.validation import Violations
from memoryd.settings import EntitySettings, LimitSettings
from memoryd.stores.locks.port import LocksUnavailable, UserLocks
from memoryd.stores.usage.port import Correction, UsageCounters
from memoryd.stores.vectors.port import Filter, HasId, IsEmpty, MatchAny, MatchValue, Range

# Times closer than this are one instant (epoch seconds; see `_current`).
_TIME_STEP = 1e-6
# The user lock every entity write sequence holds (see the module docstring).
_LOCK = "entity"
# The usage counters of the two quotas (items only: the quotas count no bytes).
_COUNTERS = {Kind.ENTITY: "entity/entities", Kind.RELATION: "entity/relations"}


@dataclass
class EntityChange:
    """What an entity or relation Add did."""

    record: MemoryRecord
    operation: Operation
    quota_remaining: int
    # Entities a relation created for its ends.
    created: list[MemoryRecord] = field(default_factory=list)
    # Ids of the relations a new relation closed.
    closed: list[str] = field(default_factory=list)


def _new_record(
    scope: Scope,
    kind: Kind,
    content: str,
    source: Source,
    now: float,
    session_id: str,
    metadata: Mapping[str, str] | None,
    importance: float | None,
    *,
    key: str = "",
    entity: Entity | None = None,
    relation: Relation | None = None,
) -> MemoryRecord:
    """A new entity or relation record (what the two share)."""
    return MemoryRecord(
        id=str(uuid.uuid4()),
        tier=Tier.ENTITY,
        content=content,
        kind=kind,
        key=key,
        metadata=dict(metadata or {}),
        importance=0.5 if importance is None else importance,
        created_at=now,
        updated_at=now,
        source=source,
        agent_id=scope.agent_id,
        session_id=session_id,
        entity=entity,
        relation=relation,
    )


def _names_of(record: MemoryRecord) -> set[str]:
    entity = record.entity
    if entity is None:
        return set()
    return {name_key(n) for n in (entity.name, *entity.aliases)}


class EntityTier:
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
        self._memory = memory
        self._settings = settings
        self._quotas = quotas
        self._limits = limits
        self._clock = clock
        self._compress_over_bytes = compress_over_bytes
        self._multi_valued = {predicate_key(p) for p in settings.multi_valued_predicates}
        self._user_locks = locks
        self._ledgers = {
            kind: Ledger(counters, Tier.ENTITY, self._recounter(kind), counter=name, sized=False)
            for kind, name in _COUNTERS.items()
        }

    def _recounter(self, kind: Kind) -> Callable[[Scope], Awaitable[tuple[int, int]]]:
        async def recount(scope: Scope) -> tuple[int, int]:
            return await self._count(self._of_kind(scope, kind)), 0

        return recount

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

    # ------------------------------------------------------------------ filters

    def _of_kind(self, scope: Scope, kind: Kind, *, live_only: bool = True) -> Filter:
        return self._memory.scope_filter(scope, Tier.ENTITY, kinds=[kind], live_only=live_only)

    def _current(self, flt: Filter) -> Filter:
        """Relations that hold now: never closed, or closed in the future."""
        # A relation closed "now" is closed. The store keeps times as JSON numbers, whose
        # parse may land one float step away (about 0.2 µs today): a microsecond's margin
        # keeps that step from reopening it.
        later = self._clock() + _TIME_STEP
        return flt.and_(Filter(should=[IsEmpty(INVALID_AT), Range(INVALID_AT, gt=later)]))

    def _relations_of(self, scope: Scope, keys: Sequence[str], *, live_only: bool = True) -> Filter:
        ends = Filter(should=[MatchAny(SUBJECT_KEY, list(keys)), MatchAny(OBJECT_KEY, list(keys))])
        return self._of_kind(scope, Kind.RELATION, live_only=live_only).and_(ends)

    # ------------------------------------------------------------------ checks

    def check_add(self, cmd: AddCommand, v: Violations) -> None:
        limits = self._limits
        if (cmd.entity is None) == (cmd.relation is None):
            v.add("entity", "the entity tier takes exactly one of `entity` and `relation`")
        if cmd.content:
            v.add("content", "must be empty for the entity tier: the entity or relation is it")
        if cmd.key:
            v.add("key", "must be empty for the entity tier: an entity is named by entity.name")
        if cmd.expires_at is not None:
            v.add(
                "expires_at",
                "must be unset for the entity tier: entities persist, and a relation ends "
                "with relation.invalid_at",
            )
        if cmd.entity is not None:
            for p in entity_problems(cmd.entity, limits.max_key_bytes, limits.max_content_bytes):
                v.add(p.field, p.description)
            if cmd.entity.relations:
                v.add("entity.relations", "is filled on read; add relations with `relation`")
            if cmd.kind not in (Kind.UNSPECIFIED, Kind.ENTITY):
                v.add("kind", "must be ENTITY (or unset) for an entity")
        if cmd.relation is not None:
            for p in relation_problems(cmd.relation, limits.max_key_bytes):
                v.add(p.field, p.description)
            if cmd.kind not in (Kind.UNSPECIFIED, Kind.RELATION):
                v.add("kind", "must be RELATION (or unset) for a relation")

    def can_retrieve(self, scope: Scope) -> bool:
        return True

    # ------------------------------------------------------------------ quotas

    def _limit(self, scope: Scope, kind: Kind) -> tuple[int, str]:
        profile = self._quotas.profile_for(scope)
        if kind is Kind.ENTITY:
            return profile.limits.entity_max_entities, profile.name
        return profile.limits.entity_max_relations, profile.name

    def _full(self, scope: Scope, kind: Kind) -> QuotaExceeded:
        limit, profile = self._limit(scope, kind)
        what = "entities" if kind is Kind.ENTITY else "relations"
        return quota_full(
            f"entity:{scope.user_id}",
            f"entity.max_{what}",
            limit,
            f"entity memory is full (max: {limit:,} {what}, quota profile {profile!r}); "
            f"delete old {what} or upgrade your plan",
        )

    async def _count(self, flt: Filter) -> int:
        return await self._memory.call(self._memory.store.count, flt)

    async def _held(self, scope: Scope, kind: Kind) -> int:
        """How many of `kind` the user holds (pending reservations included): the counter."""
        return (await self._ledgers[kind].held(scope)).count

    async def _room(self, scope: Scope, kind: Kind) -> int:
        """How many more of `kind` fit."""
        limit, _ = self._limit(scope, kind)
        return max(0, limit - await self._held(scope, kind))

    async def _reserve(
        self,
        scope: Scope,
        kind: Kind,
        needed: int,
        auto_prune: bool,
        keep: Sequence[str],
        reserved: dict[Kind, int],
    ) -> bool:
        """Reserve room for `needed` more of `kind` on its counter (atomic across replicas),
        noted in `reserved` to be settled once written or released on failure: when full,
        with auto-prune drop the oldest tenth first (never the entities in `keep`); without,
        refuse. Returns whether it pruned."""
        if needed <= 0:
            return False
        limit, _ = self._limit(scope, kind)
        ledger, pruned = self._ledgers[kind], False
        while True:
            got = await ledger.reserve(scope, needed, 0, limit, 0)
            if got.granted:
                reserved[kind] = reserved.get(kind, 0) + needed
                return pruned
            short = got.held.count + needed - limit
            if not auto_prune or pruned or needed > limit:
                raise self._full(scope, kind)
            flt = self._of_kind(scope, kind)
            if keep:
                flt = Filter(must=[flt], must_not=[HasId(list(keep))])
            oldest = await self._memory.records(
                flt, max(math.ceil(got.held.count * AUTO_PRUNE_SHARE), short), newest_first=False
            )
            if len(oldest) < short:
                raise self._full(scope, kind)
            await self._delete(scope, oldest)
            pruned = True

    async def _release(self, scope: Scope, reserved: Mapping[Kind, int]) -> None:
        """A write failed (or was cancelled) after `_reserve`: give its room back."""
        for kind, n in reserved.items():
            await asyncio.shield(self._ledgers[kind].release(scope, n, 0))

    async def _settle(
        self, scope: Scope, reserved: Mapping[Kind, int], records: Sequence[MemoryRecord]
    ) -> None:
        """The write of `records`, reserved as `reserved`, landed."""
        for kind, n in reserved.items():
            ids = [r.id for r in records if r.kind is kind]
            await self._ledgers[kind].settle(scope, n, 0, ids)

    async def _forget(self, scope: Scope, removed: Iterable[MemoryRecord]) -> None:
        """Uncount removed items (those the counters count: not marked deleted)."""
        held = [r for r in removed if not r.deleted]
        for kind, ledger in self._ledgers.items():
            of_kind = [r for r in held if r.kind is kind]
            if of_kind:
                await ledger.forget(scope, of_kind)

    async def reconcile(self, scope: Scope) -> Correction | None:
        """Maintenance: recount the user's entities and relations and correct both counters.
        Returns the one that was off, if any (None when both kept moving)."""
        fixed = [await ledger.reconcile(scope) for ledger in self._ledgers.values()]
        done = [f for f in fixed if f is not None]
        changed = [f for f in done if f.before != f.after]
        return (changed or done)[0] if done else None

    # ------------------------------------------------------------------ writes

    async def _find(self, scope: Scope, names: Iterable[str]) -> list[MemoryRecord]:
        """Entities known by any of `names` (as name or alias), oldest first."""
        keys = list(dict.fromkeys(k for n in names if (k := name_key(n))))
        if not keys:
            return []
        flt = self._of_kind(scope, Kind.ENTITY).and_(MatchAny(NAMES_FIELD, keys))
        return await self._memory.records(flt, 4 * len(keys) + 4, newest_first=False)

    @staticmethod
    def _pick(found: Sequence[MemoryRecord], name: str) -> MemoryRecord | None:
        """The entity `name` means: the one so named, else the oldest with it as alias."""
        key = name_key(name)
        for record in found:
            if record.entity is not None and name_key(record.entity.name) == key:
                return record
        return next((r for r in found if key in _names_of(r)), None)

    def _new_entity(
        self,
        scope: Scope,
        entity: Entity,
        source: Source,
        now: float,
        *,
        session_id: str = "",
        metadata: Mapping[str, str] | None = None,
        importance: float | None = None,
    ) -> MemoryRecord:
        name = " ".join(entity.name.split())
        aliases = [a.strip() for a in entity.aliases if name_key(a) != name_key(name)]
        clean = Entity(
            name=name,
            type=entity.type.strip(),
            aliases=tuple(dict.fromkeys(aliases))[:MAX_ALIASES],
            description=entity.description.strip(),
        )
        return _new_record(
            scope,
            Kind.ENTITY,
            render_entity(clean),
            source,
            now,
            session_id,
            metadata,
            importance,
            key=name_key(name),
            entity=clean,
        )

    @staticmethod
    def _merged(existing: MemoryRecord, new: Entity, source: Source) -> Entity | None:
        """`existing` after learning `new` (its aliases, and a type or description it lacked,
        or any, unless an extracted entity would overwrite an explicit one); None when
        nothing changes."""
        old = existing.entity
        assert old is not None
        aliases = list(old.aliases)
        known = _names_of(existing)
        for name in (new.name, *new.aliases):
            if (key := name_key(name)) and key not in known:
                aliases.append(" ".join(name.split()))
                known.add(key)
        may_replace = source is Source.EXPLICIT or existing.source is not Source.EXPLICIT
        kind = new.type.strip() if new.type.strip() and (may_replace or not old.type) else old.type
        description = new.description.strip()
        if not description or not (may_replace or not old.description):
            description = old.description
        merged = Entity(old.name, kind, tuple(aliases[:MAX_ALIASES]), description)
        return None if merged == dataclasses.replace(old, relations=()) else merged

    def _point(self, record: MemoryRecord, scope: Scope) -> NewPoint:
        digest = content_hash(scope, Tier.ENTITY, record.key, record.content)
        payload = to_payload(record, scope, digest, self._compress_over_bytes)
        return NewPoint(record, payload, embed_text_of(payload))

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
        async with self._locked(scope):
            now = self._clock()
            found = await self._find(scope, (entity.name, *entity.aliases))
            existing = self._pick(found, entity.name) or (found[0] if found else None)
            if existing is not None:
                merged = self._merged(existing, entity, source)
                room = await self._room(scope, Kind.ENTITY)
                if merged is None:
                    return EntityChange(existing, Operation.DEDUPLICATED, max(0, room))
                record = dataclasses.replace(
                    existing,
                    entity=merged,
                    content=render_entity(merged),
                    updated_at=now,
                    source=Source.EXPLICIT if source is Source.EXPLICIT else existing.source,
                    score=0.0,
                )
                await self._memory.insert([self._point(record, scope)])
                return EntityChange(record, Operation.UPDATED, max(0, room))
            reserved: dict[Kind, int] = {}
            pruned = await self._reserve(scope, Kind.ENTITY, 1, auto_prune, (), reserved)
            record = self._new_entity(
                scope,
                entity,
                source,
                now,
                session_id=session_id,
                metadata=metadata,
                importance=importance,
            )
            try:
                await self._memory.insert([self._point(record, scope)])
            except BaseException:
                await self._release(scope, reserved)
                raise
            await self._settle(scope, reserved, [record])
            room = await self._room(scope, Kind.ENTITY)
        operation = Operation.ADD_WITH_PRUNE if pruned else Operation.ADD
        return EntityChange(record, operation, max(0, room))

    async def _new_relation(
        self,
        scope: Scope,
        relation: Relation,
        ends: dict[str, MemoryRecord | None],
        relations: Filter,
        source: Source,
        now: float,
        valid_from: float,
        *,
        session_id: str,
        metadata: Mapping[str, str] | None,
        importance: float | None,
    ) -> tuple[MemoryRecord, list[MemoryRecord], list[str]]:
        """The relation to write, the end entities to create with it, and the ids of the
        current relations it closes (see `add_relation`)."""
        predicate = predicate_key(relation.predicate)
        created: list[MemoryRecord] = []
        for name in (relation.subject, relation.object):
            if ends[name_key(name)] is None:
                record = self._new_entity(
                    scope, Entity(name=name), source, now, session_id=session_id
                )
                ends[name_key(name)] = record
                created.append(record)
        subject, obj = ends[name_key(relation.subject)], ends[name_key(relation.object)]
        assert subject is not None and obj is not None
        assert subject.entity is not None and obj.entity is not None
        closed: list[str] = []
        invalid_at = relation.invalid_at
        if invalid_at is None and predicate not in self._multi_valued:
            others = self._current(relations.and_(MatchValue(SUBJECT_KEY, subject.key)))
            for old in await self._memory.records(others, PAGE_SIZE):
                assert old.relation is not None
                started = old.relation.valid_from or old.created_at
                if started <= valid_from:
                    closed.append(old.id)
                else:  # the new relation is history: it ended when this one began
                    invalid_at = started if invalid_at is None else min(invalid_at, started)
        body = Relation(
            subject=subject.entity.name,
            predicate=" ".join(relation.predicate.split()),
            object=obj.entity.name,
            valid_from=valid_from,
            invalid_at=invalid_at,
        )
        record = _new_record(
            scope,
            Kind.RELATION,
            render_relation(body),
            source,
            now,
            session_id,
            metadata,
            importance,
            relation=body,
        )
        return record, created, closed

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
        async with self._locked(scope):
            now = self._clock()
            valid_from = relation.valid_from if relation.valid_from is not None else now
            predicate = predicate_key(relation.predicate)
            found = await self._find(scope, (relation.subject, relation.object))
            ends = {name_key(n): self._pick(found, n) for n in (relation.subject, relation.object)}
            relations = self._of_kind(scope, Kind.RELATION).and_(
                MatchValue(PREDICATE_KEY, predicate)
            )
            subject, obj = ends[name_key(relation.subject)], ends[name_key(relation.object)]
            if subject is not None and obj is not None:
                same = await self._memory.records(
                    self._current(
                        relations.and_(
                            MatchValue(SUBJECT_KEY, subject.key), MatchValue(OBJECT_KEY, obj.key)
                        )
                    ),
                    1,
                )
                if same:
                    room = await self._room(scope, Kind.RELATION)
                    return EntityChange(same[0], Operation.DEDUPLICATED, max(0, room))
            missing = [k for k, r in ends.items() if r is None]
            keep = [r.id for r in ends.values() if r is not None]
            reserved: dict[Kind, int] = {}
            try:
                pruned = await self._reserve(
                    scope, Kind.ENTITY, len(missing), auto_prune, keep, reserved
                )
                pruned |= await self._reserve(scope, Kind.RELATION, 1, auto_prune, (), reserved)
                record, created, closed = await self._new_relation(
                    scope,
                    relation,
                    ends,
                    relations,
                    source,
                    now,
                    valid_from,
                    session_id=session_id,
                    metadata=metadata,
                    importance=importance,
                )
                points = [self._point(r, scope) for r in (*created, record)]
                await self._memory.insert(points)
            except BaseException:
                await self._release(scope, reserved)
                raise
            await self._settle(scope, reserved, [*created, record])
            if closed:
                patch = {INVALID_AT: valid_from, "updated_at": now}
                await self._memory.call(self._memory.store.set_payload, closed, patch)
            room = await self._room(scope, Kind.RELATION)
        operation = Operation.ADD_WITH_PRUNE if pruned else Operation.ADD
        return EntityChange(record, operation, max(0, room), created, closed)

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

    async def _with_relations(
        self, scope: Scope, records: Sequence[MemoryRecord]
    ) -> list[MemoryRecord]:
        """Entities with their current one-hop relations (in `entity.relations`, and as
        lines after their content); relations as they are."""
        limit = self._settings.max_relations_per_entity

        async def attach(record: MemoryRecord) -> MemoryRecord:
            if record.entity is None or limit == 0:
                return record
            flt = self._current(self._relations_of(scope, [record.key]))
            found = await self._memory.records(flt, limit)
            links = tuple(r.relation for r in found if r.relation is not None)
            if not links:
                return record
            lines = "\n".join(render_relation(r) for r in links)
            return dataclasses.replace(
                record,
                entity=dataclasses.replace(record.entity, relations=links),
                content=f"{record.content}\n{lines}",
            )

        return list(await asyncio.gather(*(attach(r) for r in records)))

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
        hits.items = await self._with_relations(query.scope, hits.items)
        return hits

    async def _lookup(self, lookup: Lookup) -> tuple[list[MemoryRecord], list[str]]:
        live = self._memory.scope_filter(lookup.scope, Tier.ENTITY)
        found = await self._memory.by_ids(live, lookup.ids)
        by_name = await self._find(lookup.scope, lookup.keys)
        found_ids = {r.id for r in found}
        names = set().union(*(_names_of(r) for r in by_name)) if by_name else set()
        missing = [i for i in lookup.ids if i not in found_ids]
        missing += [k for k in lookup.keys if name_key(k) not in names]
        named = [r for r in by_name if any(name_key(k) in _names_of(r) for k in lookup.keys)]
        return list({r.id: r for r in (*found, *named)}.values()), missing

    async def get(self, lookup: Lookup) -> GetResult:
        found, missing = await self._lookup(lookup)
        return GetResult(items=await self._with_relations(lookup.scope, found), missing=missing)

    # ------------------------------------------------------------------ deletes

    async def _cascade(
        self, scope: Scope, records: Sequence[MemoryRecord]
    ) -> dict[str, MemoryRecord]:
        """`records` and every relation of the entities among them, by id."""
        going = {r.id: r for r in records}
        keys = [r.key for r in records if r.kind is Kind.ENTITY and r.key]
        for start in range(0, len(keys), PAGE_SIZE):
            flt = self._relations_of(scope, keys[start : start + PAGE_SIZE], live_only=False)
            async for page in self._memory.pages(flt):
                going.update((r.id, r) for r in page)
        return going

    async def _delete(self, scope: Scope, records: Sequence[MemoryRecord]) -> int:
        going = await self._cascade(scope, records)
        if going:
            await self._memory.call(self._memory.store.delete, sorted(going))
            await self._forget(scope, going.values())
        return len(going)

    async def _remove(self, scope: Scope, flt: Filter, dry_run: bool) -> int:
        """Delete what `flt` selects (on dry_run only count it), uncounting it."""
        memory = self._memory
        if dry_run:
            return await memory.remove(flt, dry_run)
        going = [r async for page in memory.pages(flt) for r in page]
        removed = await memory.call(memory.store.delete_where, flt)
        await self._forget(scope, going)
        return removed

    async def delete(self, lookup: Lookup) -> int:
        """Hard delete; an entity takes its relations with it. Returns every item deleted."""
        async with self._locked(lookup.scope):
            found, _ = await self._lookup(lookup)
            return await self._delete(lookup.scope, found)

    async def _oldest(self, flt: Filter, percent: float) -> list[MemoryRecord]:
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
                going: list[MemoryRecord] = []
                async for page in memory.pages(flt):
                    going += page
            else:  # OLDEST_PERCENT: of the entities (with their relations) and relations
                going = await self._oldest(self._of_kind(scope, Kind.ENTITY), cmd.percent)
                going += await self._oldest(self._of_kind(scope, Kind.RELATION), cmd.percent)
            if cmd.dry_run:
                return len(await self._cascade(scope, going))
            return await self._delete(scope, going)

    # ------------------------------------------------------------------ export / import

    async def export_count(self, scope: Scope) -> int:
        return await self._memory.export_count(scope, Tier.ENTITY)

    def export_pages(self, scope: Scope) -> AsyncIterator[list[MemoryRecord]]:
        return self._memory.export_pages(scope, Tier.ENTITY)

    def check_restore(self, record: MemoryRecord) -> list[FieldViolation]:
        limits = self._limits
        problems: list[FieldViolation] = []
        try:
            uuid.UUID(record.id)
        except ValueError:
            problems.append(FieldViolation("id", "must be a UUID for entity items"))
        if (record.entity is None) == (record.relation is None):
            problems.append(
                FieldViolation("entity", "an entity item holds exactly one of entity and relation")
            )
        elif record.entity is not None:
            problems += entity_problems(
                record.entity, limits.max_key_bytes, limits.max_content_bytes
            )
            if record.kind is not Kind.ENTITY:
                problems.append(FieldViolation("kind", "must be ENTITY for an entity"))
        elif record.relation is not None:
            problems += relation_problems(record.relation, limits.max_key_bytes)
            if record.kind is not Kind.RELATION:
                problems.append(FieldViolation("kind", "must be RELATION for a relation"))
        return problems

    async def check_room(
        self, scope: Scope, records: Sequence[MemoryRecord], auto_prune: bool
    ) -> None:
        """Refuse an import whose entities or relations would pass their quota (ids already
        stored count as nothing new). Entity imports do not auto-prune: `auto_prune` is
        accepted for the common signature, and the quota is still enforced."""
        plan = await self._memory.plan_restore(scope, records)
        for kind, new in self._counted(plan.new).items():
            if new > await self._room(scope, kind):
                raise self._full(scope, kind)

    def _counted(self, records: Iterable[MemoryRecord]) -> dict[Kind, int]:
        """How many of `records` each counter counts once written (what `recount` finds:
        not marked deleted, not expired)."""
        now = self._clock()
        held = [r for r in records if not r.deleted]
        held = [r for r in held if r.expires_at is None or r.expires_at > now]
        return {kind: sum(1 for r in held if r.kind is kind) for kind in self._ledgers}

    async def restore(
        self, scope: Scope, records: Sequence[MemoryRecord], auto_prune: bool = False
    ) -> ImportResult:
        """Content and name key derive from the body, as on Add. An entity whose name the
        user already has under another id is skipped: names stay unique."""
        derived: list[MemoryRecord] = []
        for r in records:
            if r.entity is not None:
                entity = dataclasses.replace(r.entity, relations=())
                derived.append(
                    dataclasses.replace(
                        r, entity=entity, content=render_entity(entity), key=name_key(entity.name)
                    )
                )
            elif r.relation is not None:
                derived.append(dataclasses.replace(r, content=render_relation(r.relation), key=""))
        async with self._locked(scope):
            names = [r.entity.name for r in derived if r.entity is not None]
            known = {
                key: str(uuid.UUID(r.id))
                for r in await self._find(scope, names)
                for key in _names_of(r)
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
            reserved: dict[Kind, int] = {}
            try:
                for kind, new in self._counted(plan.new).items():
                    await self._reserve(scope, kind, new, False, (), reserved)
                result = await self._memory.write_restore(scope, plan, self._compress_over_bytes)
            except BaseException:
                await self._release(scope, reserved)
                raise
            await self._settle(scope, reserved, plan.new)
        result.skipped_count += skipped
        return result

    async def usage(self, scope: Scope) -> TierUsage:
        """Entities against their quota; bytes of entities and relations; percent is that of
        the fuller of the two quotas."""
        _, entity_bytes = await self._memory.measure(self._of_kind(scope, Kind.ENTITY))
        _, relation_bytes = await self._memory.measure(self._of_kind(scope, Kind.RELATION))
        # The counts (what the quotas check) from the counters.
        entities = await self._held(scope, Kind.ENTITY)
        relations = await self._held(scope, Kind.RELATION)
        max_entities, profile = self._limit(scope, Kind.ENTITY)
        max_relations, _ = self._limit(scope, Kind.RELATION)
        return TierUsage(
            Tier.ENTITY,
            count=entities,
            bytes=entity_bytes + relation_bytes,
            max_count=max_entities,
            percent=max(
                quota_percent(entities, max_entities, 0, 0),
                quota_percent(relations, max_relations, 0, 0),
            ),
            quota_profile=profile,
        )
