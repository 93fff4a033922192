"""Queries over a user's entity graph: entities by name or alias, the relations of an
entity (those that hold now, or all of them), and what deleting entities takes along.

Relations point at their entities' name keys (`bodies.name_key`), never at ids, so the
graph survives an export imported under another user.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Sequence

from memoryd.core.memory.vector_memory import PAGE_SIZE, VectorMemory
from memoryd.core.models import Kind, Lookup, MemoryRecord, Scope, Tier
from memoryd.core.tiers.bodies import (
    INVALID_AT,
    NAMES_FIELD,
    OBJECT_KEY,
    SUBJECT_KEY,
    name_key,
    render_relation,
)
from memoryd.stores.vectors.port import Filter, IsEmpty, MatchAny, Range

# Times closer than this are one instant (epoch seconds; see `EntityGraph.current`).
_TIME_STEP = 1e-6


def names_of(record: MemoryRecord) -> set[str]:
    """The name keys an entity answers to: its name and aliases."""
    entity = record.entity
    if entity is None:
        return set()
    return {name_key(n) for n in (entity.name, *entity.aliases)}


def pick(found: Sequence[MemoryRecord], name: str) -> MemoryRecord | None:
    """The entity `name` means among `found`: the one so named, else the oldest with it
    as an alias."""
    key = name_key(name)
    for record in found:
        if record.entity is not None and name_key(record.entity.name) == key:
            return record
    return next((r for r in found if key in names_of(r)), None)


class EntityGraph:
    def __init__(
        self, memory: VectorMemory, clock: Callable[[], float], relations_per_entity: int
    ) -> None:
        self._memory = memory
        self._clock = clock
        # How many current relations a read attaches to each entity (0: none).
        self._relations_per_entity = relations_per_entity

    # ------------------------------------------------------------------ filters

    def of_kind(self, scope: Scope, kind: Kind, *, live_only: bool = True) -> Filter:
        return self._memory.scope_filter(scope, Tier.ENTITY, kinds=[kind], live_only=live_only)

    def current(self, flt: Filter) -> Filter:
        """Relations that hold now: never closed, or closed in the future."""
        # A relation closed "now" is closed. The store keeps times as JSON numbers, whose
        # parse may land one float step away (about 0.2 µs): a microsecond's margin keeps
        # that step from reopening it.
        later = self._clock() + _TIME_STEP
        return flt.and_(Filter(should=[IsEmpty(INVALID_AT), Range(INVALID_AT, gt=later)]))

    def relations_of(self, scope: Scope, keys: Sequence[str], *, live_only: bool = True) -> Filter:
        ends = Filter(should=[MatchAny(SUBJECT_KEY, list(keys)), MatchAny(OBJECT_KEY, list(keys))])
        return self.of_kind(scope, Kind.RELATION, live_only=live_only).and_(ends)

    # ------------------------------------------------------------------ reads

    async def find(self, scope: Scope, names: Iterable[str]) -> list[MemoryRecord]:
        """Entities known by any of `names` (as name or alias), oldest first."""
        keys = list(dict.fromkeys(k for n in names if (k := name_key(n))))
        if not keys:
            return []
        flt = self.of_kind(scope, Kind.ENTITY).and_(MatchAny(NAMES_FIELD, keys))
        return await self._memory.records(flt, 4 * len(keys) + 4, newest_first=False)

    async def lookup(self, lookup: Lookup) -> tuple[list[MemoryRecord], list[str]]:
        """The items a Get or Delete names, by id or by entity name; and what it named that
        the user does not have."""
        live = self._memory.scope_filter(lookup.scope, Tier.ENTITY)
        found = await self._memory.by_ids(live, lookup.ids)
        by_name = await self.find(lookup.scope, lookup.keys)
        found_ids = {r.id for r in found}
        names = set().union(*(names_of(r) for r in by_name)) if by_name else set()
        missing = [i for i in lookup.ids if i not in found_ids]
        missing += [k for k in lookup.keys if name_key(k) not in names]
        named = [r for r in by_name if any(name_key(k) in names_of(r) for k in lookup.keys)]
        return list({r.id: r for r in (*found, *named)}.values()), missing

    async def with_relations(
        self, scope: Scope, records: Sequence[MemoryRecord]
    ) -> list[MemoryRecord]:
        """Entities with their current one-hop relations (in `entity.relations`, and as
        lines after their content); relations as they are."""
        limit = self._relations_per_entity

        async def attach(record: MemoryRecord) -> MemoryRecord:
            if record.entity is None or limit == 0:
                return record
            flt = self.current(self.relations_of(scope, [record.key]))
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

    async def cascade(
        self, scope: Scope, records: Sequence[MemoryRecord]
    ) -> dict[str, MemoryRecord]:
        """`records` and every relation of the entities among them, by id: what deleting
        them deletes."""
        going = {r.id: r for r in records}
        keys = [r.key for r in records if r.kind is Kind.ENTITY and r.key]
        for start in range(0, len(keys), PAGE_SIZE):
            flt = self.relations_of(scope, keys[start : start + PAGE_SIZE], live_only=False)
            async for page in self._memory.pages(flt):
                going.update((r.id, r) for r in page)
        return going

    async def superseded(
        self, same_predicate: Filter, valid_from: float, invalid_at: float | None
    ) -> tuple[list[str], float | None]:
        """For a new relation of a single-valued predicate starting at `valid_from`, among
        the current relations `same_predicate` selects (its subject's, of its predicate):
        the ids of those it closes (they started before it), and when the new one ends
        (`invalid_at`, or sooner: one that started later makes the new one history)."""
        closed: list[str] = []
        for old in await self._memory.records(self.current(same_predicate), PAGE_SIZE):
            assert old.relation is not None
            started = old.relation.valid_from or old.created_at
            if started <= valid_from:
                closed.append(old.id)
            else:
                invalid_at = started if invalid_at is None else min(invalid_at, started)
        return closed, invalid_at
