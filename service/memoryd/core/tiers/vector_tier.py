"""What every vector-backed tier shares: its items in `VectorMemory` under the user's
filter, the usage ledgers its quotas read (none for a tier without quotas), and removals
that uncount what they removed.

Long-term, episodic and structured memory extend it through `ArchivingVectorTier`
(expiry and the cold archive); persona and entity memory extend it directly. Quotas are
checked with `Ledger.hold`, the one reservation rule of every tier (core/lifecycle/ledger.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass

from memoryd.core.errors import QuotaExceeded
from memoryd.core.lifecycle.ledger import Ledger
from memoryd.core.memory.payload import content_hash, embed_text_of, to_payload
from memoryd.core.memory.vector_memory import NewPoint, VectorMemory
from memoryd.core.models import MemoryRecord, Scope, Tier
from memoryd.stores.usage.port import Correction
from memoryd.stores.vectors.port import Filter

# Auto-prune at a full count quota drops this share of the oldest items (RT-006: 10%).
AUTO_PRUNE_SHARE = 0.10


@dataclass(frozen=True)
class Room:
    """One quota scope of a tier (a user; for episodes a user's agent; for entities a
    user's entities or relations): the live items its limits count, the limits (the
    `ledger.Limits` a hold checks), and how a full quota is reported."""

    lock_key: tuple[str, ...]
    live: Filter
    max_count: int
    count_full: Callable[[], QuotaExceeded]
    # Whose counter the limits read (for episodes, with the agent).
    scope: Scope
    # The size limit (bytes as `ledger.size_of`); 0 means none.
    max_bytes: int = 0
    # (bytes being added, bytes used) -> the error.
    bytes_full: Callable[[int, int], QuotaExceeded] | None = None


class VectorTier:
    tier: Tier

    def __init__(
        self, memory: VectorMemory, clock: Callable[[], float], compress_over_bytes: int
    ) -> None:
        self._memory = memory
        self._clock = clock
        self._compress_over_bytes = compress_over_bytes
        # The usage counters of the tier's quotas (one per quota; none: no quota). Every
        # removal uncounts what each counts.
        self._ledgers: list[Ledger] = []

    @property
    def counted(self) -> bool:
        """Whether the tier keeps usage counters (it has quotas)."""
        return bool(self._ledgers)

    def can_retrieve(self, scope: Scope) -> bool:
        return True

    def _live(self, scope: Scope) -> Filter:
        return self._memory.scope_filter(scope, self.tier)

    async def _count(self, flt: Filter) -> int:
        return await self._memory.count(flt)

    def _point(self, record: MemoryRecord, scope: Scope) -> NewPoint:
        """The point a keyed item (persona fact, entity, relation) is written as."""
        digest = content_hash(scope, self.tier, record.key, record.content)
        payload = to_payload(record, scope, digest, self._compress_over_bytes)
        return NewPoint(record, payload, embed_text_of(payload))

    # ------------------------------------------------------------------ removals

    async def _forget(self, scope: Scope, removed: Iterable[MemoryRecord]) -> None:
        """Uncount removed items on every counter that counted them."""
        gone = list(removed)
        for ledger in self._ledgers:
            await ledger.forget(scope, ledger.counted(gone))

    async def _delete_records(self, scope: Scope, records: Sequence[MemoryRecord]) -> None:
        """Remove these stored items and uncount them."""
        if records:
            await self._memory.delete_ids([r.id for r in records])
            await self._forget(scope, records)

    async def _remove(self, scope: Scope, flt: Filter, dry_run: bool) -> int:
        """Delete what `flt` selects (on dry_run only count it), uncounting what was held."""
        memory = self._memory
        if dry_run or not self._ledgers:
            return await memory.remove(flt, dry_run)
        held = [r async for page in memory.pages(flt) for r in page]
        removed = await memory.delete_matching(flt)
        await self._forget(scope, held)
        return removed

    async def reconcile(self, scope: Scope) -> Correction | None:
        """Maintenance: recount the user's usage from the store and correct each counter.
        Returns the correction of the one that was off, if any (None when none could be
        checked: each kept moving, or the tier counts nothing)."""
        fixed = [await ledger.reconcile(scope) for ledger in self._ledgers]
        done = [f for f in fixed if f is not None]
        changed = [f for f in done if f.before != f.after]
        return (changed or done)[0] if done else None

    # ------------------------------------------------------------------ export

    async def export_count(self, scope: Scope) -> int:
        return await self._memory.export_count(scope, self.tier)

    def export_pages(self, scope: Scope) -> AsyncIterator[list[MemoryRecord]]:
        return self._memory.export_pages(scope, self.tier)
