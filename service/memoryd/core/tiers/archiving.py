"""What the long-term, episodic and structured tiers share: vector items that expire by
`expires_at` and age out into the cold archive.

Retrieve/Get/Delete/Prune/Import live here (export and removals in `VectorTier`); each
tier adds its own Add, Usage and checks (and long-term its soft Delete). Quotas: one
usage counter per user (per agent for episodes), held through `Ledger.hold`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext

from memoryd.core.errors import FieldViolation, QuotaExceeded, Unimplemented
from memoryd.core.lifecycle.cold_archive import ColdArchive
from memoryd.core.lifecycle.ledger import Hold, Ledger, size_of
from memoryd.core.locks import KeyedLocks
from memoryd.core.memory.vector_memory import (
    PAGE_SIZE,
    RestorePlan,
    VectorMemory,
    check_vector_restore,
)
from memoryd.core.models import (
    GetResult,
    ImportResult,
    Lookup,
    MemoryRecord,
    PruneCommand,
    PruneStrategy,
    RetrieveQuery,
    Scope,
)
from memoryd.core.tiers.base import TierHits
from memoryd.core.tiers.vector_tier import AUTO_PRUNE_SHARE, Room, VectorTier
from memoryd.stores.usage.port import Counted, UsageCounters
from memoryd.stores.vectors.port import Condition, Filter, HasId, MatchValue, Range, field_path

DAY_S = 86_400.0


class ArchivingVectorTier(VectorTier):
    # Whether items past their `expires_at` can still be archived (see `_archivable`).
    _archives_expired = False
    # Whether the quota (and so the usage counter) is per agent of the user (episodes).
    _per_agent = False

    def __init__(
        self,
        memory: VectorMemory,
        clock: Callable[[], float],
        archive: ColdArchive | None,
        compress_over_bytes: int,
        counters: UsageCounters,
        lead_chars: int = 0,
    ) -> None:
        super().__init__(memory, clock, compress_over_bytes)
        self._archive = archive
        # Characters of the previous turn a session's turn is embedded with (ADR 0400).
        self._lead_chars = lead_chars
        self._locks = KeyedLocks()
        # Quota checks (and Usage) read the usage counters: O(1), atomic across replicas.
        self._ledger = Ledger(
            counters,
            self.tier,
            lambda scope: self._memory.measure(self._held(scope)),
            per_agent=self._per_agent,
        )
        self._ledgers.append(self._ledger)

    # ------------------------------------------------------------------ hooks

    def _filter_conditions(self, filters: Mapping[str, str]) -> list[Condition]:
        """Retrieve/Prune `filters` as store conditions: metadata equality."""
        return [MatchValue(field_path("metadata", k), v) for k, v in filters.items()]

    def _query_conditions(self, scope: Scope) -> list[Condition]:
        """What narrows Retrieve beyond tenant + user (the episodic tier: the agent)."""
        return []

    def _rooms(
        self, scope: Scope, records: Sequence[MemoryRecord]
    ) -> list[tuple[Room, list[MemoryRecord]]]:
        """The quota scopes `records` fall in, each with its records; none: no quota."""
        return []

    def _archivable(self, record: MemoryRecord, now: float) -> bool:
        """Whether an old item goes to the archive; the rest is left to the EXPIRED purge.
        By default only live items do: what expired or was deleted is never archived."""
        return not record.deleted and (record.expires_at is None or record.expires_at > now)

    # ------------------------------------------------------------------ shared behaviour

    def _held(self, scope: Scope) -> Filter:
        """What the usage counters count: not deleted, expired items included (until the
        expiry purge removes them)."""
        extra = [MatchValue("agent_id", scope.agent_id)] if self._per_agent else []
        everything = self._memory.scope_filter(scope, self.tier, live_only=False, extra=extra)
        return Filter(must=[everything], must_not=[MatchValue("deleted", True)])

    async def _purge_expired(self, scope: Scope) -> int:
        """Delete the user's expired items (uncounted) and soft-deleted ones (uncounted
        when deleted); returns how many."""
        memory = self._memory
        everything = memory.scope_filter(scope, self.tier, live_only=False)
        dead = await self._count(everything) - await self._count(self._live(scope))
        if dead:
            expired = everything.and_(Range("expires_at", lte=self._clock()))
            await self._remove(scope, expired, dry_run=False)
            # Soft-deleted long-term items, or items imported with the mark.
            deleted = everything.and_(MatchValue("deleted", True))
            await memory.delete_matching(deleted)
        return dead

    async def _hold_one(
        self,
        room: Room,
        size: int,
        auto_prune: bool,
        flush: Callable[[], Awaitable[None]] | None = None,
        too_big: Callable[[int, int], QuotaExceeded] | None = None,
    ) -> Hold:
        """Add's quota check (`Ledger.hold`): one item of `size` bytes in `room`. With
        `auto_prune`, a full count drops the oldest tenth once (after `flush` wrote a
        batch's earlier items, as a run of single Adds would have). A size overflow is
        always refused (`too_big(size, used)`, by default the room's)."""

        async def prune(held: Counted, needed: int) -> int:
            if flush is not None:
                await flush()
            share = math.ceil(held.count * AUTO_PRUNE_SHARE)
            dropped = await self._drop_oldest(room.scope, room.live, share)
            self._memory.observer.deleted(self.tier, "quota", dropped)
            return dropped

        return await self._ledger.hold(
            room.scope,
            1,
            size,
            room,
            purge=lambda: self._purge_expired(room.scope),
            prune=prune if auto_prune else None,
            too_big=too_big,
        )

    async def _hold_restore(
        self, room: Room, new: Sequence[MemoryRecord], auto_prune: bool
    ) -> Hold:
        """An import's quota check: the `new` items in `room`; with `auto_prune`, exactly
        what is over goes, oldest first."""

        async def prune(held: Counted, needed: int) -> int:
            over = held.count + needed - room.max_count
            return await self._drop_oldest(room.scope, room.live, over)

        return await self._ledger.hold(
            room.scope,
            len(new),
            sum(size_of(r) for r in new),
            room,
            purge=lambda: self._purge_expired(room.scope),
            prune=prune if auto_prune else None,
            prune_again=True,
        )

    async def retrieve(self, query: RetrieveQuery, top_k: int) -> TierHits:
        """Hybrid search for the query; with no query, the newest matching items."""
        extra = [*self._query_conditions(query.scope), *self._filter_conditions(query.filters)]
        flt = self._memory.scope_filter(query.scope, self.tier, kinds=query.kinds, extra=extra)
        if not query.query.strip():
            items = await self._memory.records(flt, top_k)
            return TierHits(items=items, total=await self._count(flt))
        return await self._memory.search(
            flt,
            query.query,
            top_k,
            query.min_score,
            context_window=query.context_window,
            grounding=query.grounding,
        )

    async def get(self, lookup: Lookup) -> GetResult:
        found = await self._memory.by_ids(self._live(lookup.scope), lookup.ids)
        found_ids = {r.id for r in found}
        return GetResult(items=found, missing=[i for i in lookup.ids if i not in found_ids])

    async def delete(self, lookup: Lookup) -> int:
        """A hard delete: these tiers keep no tombstones."""
        found = await self._memory.by_ids(self._live(lookup.scope), lookup.ids)
        if found:
            await self._delete_records(lookup.scope, found)
        return len(found)

    async def _drop_oldest(self, scope: Scope, flt: Filter, n: int) -> int:
        if n <= 0:
            return 0  # (a store refuses to list "the 0 oldest")
        oldest = await self._memory.records(flt, n, newest_first=False)
        await self._delete_records(scope, oldest)
        return len(oldest)

    async def _archive_older_than(self, cmd: PruneCommand) -> int:
        """Move items created more than `older_than_days` ago to the cold archive (written
        durably first, then removed from the vector store and its index)."""
        memory, scope = self._memory, cmd.scope
        now = self._clock()
        cutoff = now - cmd.older_than_days * DAY_S
        old = memory.scope_filter(
            scope,
            self.tier,
            live_only=not self._archives_expired,
            extra=[Range("created_at", lt=cutoff)],
        )
        if cmd.dry_run:
            n = 0
            async for page in memory.pages(old):
                n += sum(1 for r in page if self._archivable(r, now))
            return n
        if self._archive is None:
            raise Unimplemented("archiving: this server has no cold archive")
        moved = 0
        left: list[str] = []  # old but not archivable: left for the EXPIRED purge
        async with self._locks((scope.tenant, scope.user_id)):
            while True:
                flt = Filter(must=[old], must_not=[HasId(left)]) if left else old
                batch = await memory.records(flt, PAGE_SIZE, newest_first=False)
                if not batch:
                    return moved
                going = [r for r in batch if self._archivable(r, now)]
                left += [r.id for r in batch if not self._archivable(r, now)]
                if going:
                    await self._archive.put(scope, self.tier, going)
                    await self._delete_records(scope, going)
                    moved += len(going)

    async def prune(self, cmd: PruneCommand) -> int:
        memory, scope = self._memory, cmd.scope
        if cmd.strategy is PruneStrategy.ARCHIVE_OLDER_THAN:
            return await self._archive_older_than(cmd)
        if cmd.strategy is PruneStrategy.ALL:
            # The user's whole tier, the cold archive included (erasure).
            archived = 0
            if self._archive is not None:
                if cmd.dry_run:
                    archived = await self._archive.count(scope, self.tier)
                else:
                    archived = await self._archive.erase(scope, self.tier)
            everything = memory.scope_filter(scope, self.tier, live_only=False)
            return archived + await self._remove(scope, everything, cmd.dry_run)
        if cmd.strategy is PruneStrategy.BY_FILTER:
            flt = memory.scope_filter(
                scope, self.tier, live_only=False, extra=self._filter_conditions(cmd.filters)
            )
            return await self._remove(scope, flt, cmd.dry_run)
        if cmd.strategy is PruneStrategy.EXPIRED:
            if cmd.dry_run:
                everything = memory.scope_filter(scope, self.tier, live_only=False)
                return await self._count(everything) - await self._count(self._live(scope))
            return await self._purge_expired(scope)
        if cmd.strategy is PruneStrategy.OLDEST_PERCENT:
            live = self._live(scope)
            n = math.ceil(await self._count(live) * cmd.percent / 100)
            if cmd.dry_run:
                return n
            return await self._drop_oldest(scope, live, n)
        raise Unimplemented(
            f"the {cmd.strategy.value} prune strategy on the {self.tier.value} tier"
        )

    def _check_vector_restore(self, record: MemoryRecord) -> list[FieldViolation]:
        problems = check_vector_restore(record)
        if problems:
            return [FieldViolation("id", f"must be a UUID for {self.tier.value} items")]
        return []

    def _content_of(self, record: MemoryRecord) -> str:
        """The text of the item's body (checked by `check_restore` before any restore)."""
        raise NotImplementedError

    def _restorable(self, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
        # The content is derived from the body, as on Add: an import cannot make them differ.
        return [dataclasses.replace(r, content=self._content_of(r)) for r in records]

    async def check_room(
        self, scope: Scope, records: Sequence[MemoryRecord], auto_prune: bool
    ) -> None:
        """Refuse (QuotaExceeded) an import of `records` that would pass a quota; writes
        nothing, so every tier is checked before any tier is written."""
        for room, items in self._rooms(scope, records):
            plan = await self._memory.plan_restore(scope, items)
            held = await self._ledger.held(room.scope)
            new = [r for r in plan.new if not r.deleted]
            size = sum(size_of(r) for r in new)
            if held.count + len(new) > room.max_count and (
                not auto_prune or len(new) > room.max_count
            ):
                raise room.count_full()
            if room.max_bytes and room.bytes_full and held.bytes + size > room.max_bytes:
                raise room.bytes_full(size, held.bytes)

    async def restore(
        self, scope: Scope, records: Sequence[MemoryRecord], auto_prune: bool = False
    ) -> ImportResult:
        result = ImportResult()
        restorable = self._restorable(records)
        groups: list[tuple[Room | None, list[MemoryRecord]]] = [
            *self._rooms(scope, restorable)
        ] or [(None, restorable)]
        for room, items in groups:
            guard: AbstractAsyncContextManager[object] = (
                self._locks(room.lock_key) if room is not None else nullcontext()
            )
            async with guard:
                plan = await self._memory.plan_restore(scope, items)
                done = await self._write_restore(scope, room, plan, auto_prune)
            result.imported_count += done.imported_count
            result.skipped_count += done.skipped_count
        return result

    async def _write_restore(
        self, scope: Scope, room: Room | None, plan: RestorePlan, auto_prune: bool
    ) -> ImportResult:
        """Fit the plan's new items in `room` (reserving them when counted), then write."""
        memory = self._memory

        async def write() -> ImportResult:
            return await memory.write_restore(
                scope, plan, self._compress_over_bytes, self._lead_chars
            )

        if room is None:
            return await write()
        held = self._ledger.counted(plan.new)
        hold = await self._hold_restore(room, held, auto_prune)
        return await hold.write([r.id for r in held], write)
