"""A vector tier's usage ledger: the usage counters (stores/usage) of one tier, kept on
every write path so that quota checks and Usage cost one counter step, never a scan.

The vector store stays the record: a counter missing (a new user, a restart of the
in-process adapter, a Redis that lost its data) is rebuilt from it on first use, and
maintenance recounts each user and corrects drift (`reconcile`).

What is counted is what the user *holds*: items not deleted, expired ones included until
the expiry purge removes them (a quota that looks full first purges the user's expired
items, so they never take room from a write).

Every vector tier checks its quotas the same way, through `Ledger.hold`: one rule (purge
the expired first, refuse a byte overflow, auto-prune only for count) and one way to end a
reservation (`Hold`, `Holds`: settled when the write lands, released when it fails).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from types import TracebackType
from typing import Protocol, TypeVar

from memoryd.core.errors import QuotaExceeded, StoreUnavailable
from memoryd.core.models import MemoryRecord, Scope, Tier
from memoryd.core.ratelimit_log import EveryFewSeconds
from memoryd.core.text import utf8_len
from memoryd.stores.usage.port import (
    Correction,
    Counted,
    CounterKey,
    CountersUnavailable,
    Outcome,
    Reservation,
    UsageCounters,
)

T = TypeVar("T")
log = logging.getLogger(__name__)
_down_log = EveryFewSeconds(log, interval_s=60.0)
# Recount attempts per user when the counter keeps moving under maintenance.
_CORRECT_TRIES = 3


def size_of(record: MemoryRecord) -> int:
    """The bytes an item counts for, as its payload `size`: a document's JSON bytes, else
    its content's."""
    return utf8_len(record.document_json or record.content)


class Limits(Protocol):
    """The limits of one quota scope, and how a full one is reported."""

    @property
    def max_count(self) -> int: ...

    @property
    def max_bytes(self) -> int:
        """0: no size limit."""
        ...

    @property
    def count_full(self) -> Callable[[], QuotaExceeded]: ...

    @property
    def bytes_full(self) -> Callable[[int, int], QuotaExceeded] | None:
        """(bytes being added, bytes used) -> the error; None when there is no size limit."""
        ...


class Pruner(Protocol):
    async def __call__(self, held: Counted, needed: int) -> int:
        """Auto-prune: make count room for `needed` more items when the user holds
        `held`; returns how many items went (0: none could, the quota is full)."""
        ...


def _everything(record: MemoryRecord) -> bool:
    return True


class Ledger:
    def __init__(
        self,
        counters: UsageCounters,
        tier: Tier,
        recount: Callable[[Scope], Awaitable[tuple[int, int]]],
        *,
        per_agent: bool = False,
        counter: str = "",
        sized: bool = True,
        counts: Callable[[MemoryRecord], bool] = _everything,
    ) -> None:
        """`recount(scope)`: what the store holds for the user (count, bytes as `size_of`);
        `per_agent`: one counter per agent of the user (`scope.agent_id`), as episodes';
        `counter`: the counter's name when the tier keeps several (else the tier's);
        `sized`: whether bytes are counted (else only items: `recount` then gives 0 bytes);
        `counts`: which of the tier's items this counter counts (when it keeps several)."""
        self._counters = counters
        self._tier = tier
        self._recount = recount
        self._per_agent = per_agent
        self._counter = counter or tier.value
        self._sized = sized
        self._counts = counts

    def counted(self, records: Iterable[MemoryRecord]) -> list[MemoryRecord]:
        """Those of `records` this counter counts while they are stored: not marked
        deleted, and of its kind."""
        return [r for r in records if not r.deleted and self._counts(r)]

    def _key(self, scope: Scope) -> CounterKey:
        name = self._counter
        return CounterKey(
            scope.tenant, scope.user_id, f"{name}/{scope.agent_id}" if self._per_agent else name
        )

    def _size(self, record: MemoryRecord) -> int:
        return size_of(record) if self._sized else 0

    async def _step(self, step: Awaitable[T]) -> T:
        try:
            return await step
        except CountersUnavailable as exc:
            raise StoreUnavailable("usage counters", str(exc)) from exc

    async def _after(self, step: Awaitable[object]) -> None:
        """A step after the store changed (settle, release, forget): if the counters are
        out of reach, the write stands and the counter is left high (a quota refuses a
        little early, never late) until maintenance recounts the user."""
        try:
            await step
        except CountersUnavailable as exc:
            _down_log.warning("usage counters unreachable (%s); maintenance will recount", exc)

    async def _rebuild(self, scope: Scope) -> None:
        count, size = await self._recount(scope)
        await self._step(self._counters.init(self._key(scope), Counted(count, size)))

    async def held(self, scope: Scope) -> Counted:
        """What the user holds; while the counters are out of reach, recounted from the
        store (Usage keeps answering; writes, which need a reservation, do not)."""
        try:
            while True:
                got = await self._counters.get(self._key(scope))
                if got is not None:
                    return got
                count, size = await self._recount(scope)
                await self._counters.init(self._key(scope), Counted(count, size))
        except CountersUnavailable:
            count, size = await self._recount(scope)
            return Counted(count, size)

    async def reserve(
        self, scope: Scope, count: int, size: int, max_count: int, max_bytes: int
    ) -> Reservation:
        """Count a write of `count` items and `size` bytes if it fits the limits (0: none):
        a granted reservation must then be `settle`d or `release`d (see `write`)."""
        while True:
            got = await self._step(
                self._counters.reserve(self._key(scope), count, size, max_count, max_bytes)
            )
            if got.outcome is not Outcome.MISSING:
                return got
            await self._rebuild(scope)

    async def hold(
        self,
        scope: Scope,
        count: int,
        size: int,
        limits: Limits,
        *,
        purge: Callable[[], Awaitable[int]] | None = None,
        prune: Pruner | None = None,
        prune_again: bool = False,
        too_big: Callable[[int, int], QuotaExceeded] | None = None,
    ) -> Hold:
        """The quota check of every vector tier's write: reserve `count` items of `size`
        bytes within `limits`, to be settled or released through the returned `Hold`.

        When the quota looks full, `purge` (the user's expired items) runs first, once;
        then a count overflow is refused, unless `prune` (auto-prune) frees room: once, or
        with `prune_again` as long as it frees some (an import's exact "drop what is
        over", which a concurrent write may have taken). A byte overflow is always refused
        (`too_big(size, used)`, by default `limits.bytes_full`)."""
        purged = pruned = False
        while True:
            got = await self.reserve(scope, count, size, limits.max_count, limits.max_bytes)
            if got.granted:
                return Hold(self, scope, count, size, got.held, pruned)
            if purge is not None and not purged:
                purged = True
                if await purge():
                    continue
            if got.outcome is Outcome.BYTES_FULL:
                full = too_big or limits.bytes_full
                assert full is not None  # a size limit comes with its error
                raise full(size, got.held.bytes)
            if prune is None or (pruned and not prune_again) or count > limits.max_count:
                raise limits.count_full()
            if not await prune(got.held, count):
                raise limits.count_full()
            pruned = True

    async def write(
        self, scope: Scope, records: Sequence[MemoryRecord], write: Callable[[], Awaitable[T]]
    ) -> T:
        """Run the `write` of `records` reserved before: settled if it lands, released if
        it fails (or is cancelled), so a failed write never keeps its room."""
        count, size = len(records), sum(self._size(r) for r in records)
        hold = Hold(self, scope, count, size, Counted(0, 0), False)
        return await hold.write([r.id for r in records], write)

    async def settle(self, scope: Scope, count: int, size: int, ids: Sequence[str]) -> None:
        """A reserved write of `count` items, `size` bytes (`ids`) landed."""
        if count or size:
            await self._after(self._counters.settle(self._key(scope), count, size, ids))

    async def release(self, scope: Scope, count: int, size: int) -> None:
        if count or size:
            await self._after(self._counters.release(self._key(scope), count, size))

    async def forget(self, scope: Scope, removed: Sequence[MemoryRecord]) -> None:
        """Uncount items just removed (deleted, pruned, purged, archived); an id removed
        twice (by two replicas at once) is uncounted once."""
        by_agent: dict[str, dict[str, int]] = {}
        for r in removed:
            by_agent.setdefault(r.agent_id if self._per_agent else "", {})[r.id] = self._size(r)
        for agent, items in by_agent.items():
            of = dataclasses.replace(scope, agent_id=agent) if self._per_agent else scope
            await self._after(self._counters.forget(self._key(of), items))

    async def reconcile(self, scope: Scope) -> Correction | None:
        """Recount the user from the store and correct the counter; None when it kept
        moving (writes of this user during each recount: the next run tries again)."""
        key = self._key(scope)
        for _ in range(_CORRECT_TRIES):
            snap = await self._step(self._counters.snapshot(key))
            count, size = await self._recount(scope)
            version = snap.version if snap is not None else 0
            done = await self._step(self._counters.correct(key, version, Counted(count, size)))
            if done is not None:
                return done
        return None


class Hold:
    """Room reserved on one counter for one write (`Ledger.hold`): `settle` it once the
    write lands, `release` it if the write fails, so a failed write never keeps room."""

    def __init__(
        self, ledger: Ledger, scope: Scope, count: int, size: int, held: Counted, pruned: bool
    ) -> None:
        self.ledger = ledger
        self.scope = scope
        self.count = count
        self.size = size
        # What the user held before this reservation (pending ones included).
        self.held = held
        # Whether auto-prune dropped items to make the room.
        self.pruned = pruned
        self._open = True

    async def settle(self, ids: Sequence[str]) -> None:
        if self._open:
            self._open = False
            await self.ledger.settle(self.scope, self.count, self.size, ids)

    async def release(self) -> None:
        """Give the room back (shielded: a cancelled write still releases it)."""
        if self._open:
            self._open = False
            await asyncio.shield(self.ledger.release(self.scope, self.count, self.size))

    async def write(self, ids: Sequence[str], write: Callable[[], Awaitable[T]]) -> T:
        """Run the reserved `write` of `ids`: settled if it lands, released if it fails
        (or is cancelled)."""
        try:
            result = await write()
        except BaseException:
            await self.release()
            raise
        await self.settle(ids)
        return result


class Holds:
    """The holds one write takes on several counters (an entity relation: its ends and
    itself). Used as `async with`: whatever is not settled when the block ends (an error,
    a cancellation, a refusal after another hold was granted) is released."""

    def __init__(self) -> None:
        self._holds: list[Hold] = []

    def add(self, hold: Hold) -> Hold:
        self._holds.append(hold)
        return hold

    @property
    def pruned(self) -> bool:
        return any(h.pruned for h in self._holds)

    async def write(self, records: Sequence[MemoryRecord], write: Callable[[], Awaitable[T]]) -> T:
        """Run the `write` of `records`; once it lands each hold is settled with the ids
        its counter counts."""
        try:
            result = await write()
        except BaseException:
            await self.release()
            raise
        for hold in self._holds:
            await hold.settle([r.id for r in hold.ledger.counted(records)])
        return result

    async def release(self) -> None:
        for hold in self._holds:
            await hold.release()

    async def __aenter__(self) -> Holds:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()
