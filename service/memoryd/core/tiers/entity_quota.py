"""The entity tier's two quotas (RT-006, from the quota profile): entities and relations
per user, each on its own usage counter (`entity/entities`, `entity/relations`; items
only, no bytes), held through `Ledger.hold` like every vector tier's quota.

Auto-prune drops the oldest tenth of the kind (at least what is over), never the entities
a relation is being linked to, and deleting an entity takes its relations along.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Sequence

from memoryd.core.errors import QuotaExceeded
from memoryd.core.lifecycle.ledger import Holds, Ledger
from memoryd.core.lifecycle.quotas import QuotaProfiles, quota_full, quota_percent
from memoryd.core.memory.vector_memory import VectorMemory
from memoryd.core.models import Kind, MemoryRecord, Scope, Tier
from memoryd.core.tiers.entity_graph import EntityGraph
from memoryd.core.tiers.vector_tier import AUTO_PRUNE_SHARE, Room
from memoryd.stores.usage.port import Counted, UsageCounters
from memoryd.stores.vectors.port import Filter, HasId

# The usage counters of the two quotas.
_COUNTERS = {Kind.ENTITY: "entity/entities", Kind.RELATION: "entity/relations"}
_WHAT = {Kind.ENTITY: "entities", Kind.RELATION: "relations"}


def _of(kind: Kind) -> Callable[[MemoryRecord], bool]:
    return lambda record: record.kind is kind


class EntityQuotas:
    def __init__(
        self,
        memory: VectorMemory,
        graph: EntityGraph,
        quotas: QuotaProfiles,
        counters: UsageCounters,
        clock: Callable[[], float],
    ) -> None:
        self._memory = memory
        self._graph = graph
        self._quotas = quotas
        self._clock = clock
        self.ledgers = {
            kind: Ledger(
                counters,
                Tier.ENTITY,
                self._recounter(kind),
                counter=name,
                sized=False,
                counts=_of(kind),
            )
            for kind, name in _COUNTERS.items()
        }

    def _recounter(self, kind: Kind) -> Callable[[Scope], Awaitable[tuple[int, int]]]:
        async def recount(scope: Scope) -> tuple[int, int]:
            return await self._memory.count(self._graph.of_kind(scope, kind)), 0

        return recount

    def limit(self, scope: Scope, kind: Kind) -> tuple[int, str]:
        """The user's limit of `kind`, and the quota profile it comes from."""
        profile = self._quotas.profile_for(scope)
        if kind is Kind.ENTITY:
            return profile.limits.entity_max_entities, profile.name
        return profile.limits.entity_max_relations, profile.name

    def full(self, scope: Scope, kind: Kind) -> QuotaExceeded:
        limit, profile = self.limit(scope, kind)
        what = _WHAT[kind]
        return quota_full(
            f"entity:{scope.user_id}",
            f"entity.max_{what}",
            limit,
            f"entity memory is full (max: {limit:,} {what}, quota profile {profile!r}); "
            f"delete old {what} or upgrade your plan",
        )

    async def held(self, scope: Scope, kind: Kind) -> int:
        """How many of `kind` the user holds (pending reservations included): the counter."""
        return (await self.ledgers[kind].held(scope)).count

    async def room(self, scope: Scope, kind: Kind) -> int:
        """How many more of `kind` fit."""
        limit, _ = self.limit(scope, kind)
        return max(0, limit - await self.held(scope, kind))

    async def hold(
        self,
        holds: Holds,
        scope: Scope,
        kind: Kind,
        needed: int,
        *,
        auto_prune: bool = False,
        keep: Sequence[str] = (),
        delete: Callable[[Scope, Sequence[MemoryRecord]], Awaitable[object]] | None = None,
    ) -> None:
        """Reserve room for `needed` more of `kind` in `holds` (settled with the write,
        released if it fails). When full, with `auto_prune` the oldest tenth of the kind
        (never the entities in `keep`) goes through `delete` first; without, refused."""
        if needed <= 0:
            return
        limit, _ = self.limit(scope, kind)
        live = self._graph.of_kind(scope, kind)
        room = Room(
            (scope.tenant, scope.user_id), live, limit, lambda: self.full(scope, kind), scope
        )

        async def prune(held: Counted, needed: int) -> int:
            assert delete is not None
            short = held.count + needed - limit
            flt = Filter(must=[live], must_not=[HasId(list(keep))]) if keep else live
            share = max(math.ceil(held.count * AUTO_PRUNE_SHARE), short)
            oldest = await self._memory.records(flt, share, newest_first=False)
            if len(oldest) < short:
                return 0
            await delete(scope, oldest)
            return len(oldest)

        ledger = self.ledgers[kind]
        pruner = prune if auto_prune and delete is not None else None
        holds.add(await ledger.hold(scope, needed, 0, room, prune=pruner))

    def counted(self, records: Iterable[MemoryRecord]) -> dict[Kind, int]:
        """How many of `records` each counter counts once written (what a recount finds:
        not marked deleted, not expired)."""
        now = self._clock()
        held = [r for r in records if not r.deleted]
        held = [r for r in held if r.expires_at is None or r.expires_at > now]
        return {kind: sum(1 for r in held if r.kind is kind) for kind in self.ledgers}

    def percent(self, scope: Scope, entities: int, relations: int) -> float:
        """The fuller of the two quotas, in percent."""
        max_entities, _ = self.limit(scope, Kind.ENTITY)
        max_relations, _ = self.limit(scope, Kind.RELATION)
        return max(
            quota_percent(entities, max_entities, 0, 0),
            quota_percent(relations, max_relations, 0, 0),
        )
