"""The usage-counter port: how much each user holds per tier (count and content bytes),
kept on every write path so that quota checks and Usage never read the user's memories.

A counter is created from the store on first use (`init`, when `reserve` or `get` finds
none: a new user, a restart of the in-process adapter, a Redis that lost its data) and
then moved by four steps, each atomic:

- `reserve` checks the limits and counts a write about to happen, in one step; the
  reservation stays *pending* until the write lands (`settle`) or fails (`release`);
- `forget` uncounts removed items by id: removing an id twice (two replicas deleting the
  same memory, or pruning the same oldest ones) uncounts it once.

`snapshot` and `correct` let maintenance recount a user from the store and fix any drift
without losing a concurrent reservation: `correct` applies only if nothing moved since the
snapshot, and keeps pending reservations on top of the recount.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

# How long a removed id is remembered, so that a second removal does not uncount it again.
GONE_TTL_S = 86_400


class CountersUnavailable(Exception):
    """The store holding the counters cannot be reached."""


@dataclass(frozen=True)
class CounterKey:
    tenant: str
    user_id: str
    tier: str


@dataclass(frozen=True)
class Counted:
    count: int
    bytes: int


class Outcome(enum.Enum):
    GRANTED = "granted"
    COUNT_FULL = "count"
    BYTES_FULL = "bytes"
    # No counter yet: build it from the store (`init`) and reserve again.
    MISSING = "missing"


@dataclass(frozen=True)
class Reservation:
    outcome: Outcome
    # What the user held before this reservation (pending ones included).
    held: Counted

    @property
    def granted(self) -> bool:
        return self.outcome is Outcome.GRANTED


@dataclass(frozen=True)
class Snapshot:
    held: Counted
    pending: Counted
    # Moves with every step; `correct` applies only if it has not moved.
    version: int


@dataclass(frozen=True)
class Correction:
    before: Counted
    after: Counted


class UsageCounters(Protocol):
    async def get(self, key: CounterKey) -> Counted | None:
        """What the user holds (pending reservations included); None: no counter yet."""
        ...

    async def init(self, key: CounterKey, held: Counted) -> bool:
        """Create the counter with `held` unless one exists; True if this call created it."""
        ...

    async def reserve(
        self, key: CounterKey, count: int, size: int, max_count: int, max_bytes: int
    ) -> Reservation:
        """Count `count` items of `size` bytes if they fit (a limit of 0 is no limit)."""
        ...

    async def settle(self, key: CounterKey, count: int, size: int, ids: Sequence[str]) -> None:
        """The reserved write of `ids` landed: no longer pending (and no longer 'gone')."""
        ...

    async def release(self, key: CounterKey, count: int, size: int) -> None:
        """The reserved write failed: uncount it."""
        ...

    async def forget(self, key: CounterKey, removed: Mapping[str, int]) -> Counted:
        """Uncount removed items (id -> bytes), each id once; returns what was uncounted."""
        ...

    async def snapshot(self, key: CounterKey) -> Snapshot | None: ...

    async def correct(self, key: CounterKey, version: int, held: Counted) -> Correction | None:
        """Set the counter to `held` (the store's recount) plus what is pending, if its
        version is still `version`; None if it moved meanwhile (try again later).
        Reservations left pending since the previous correction (a replica that died
        between reserve and settle) are dropped."""
        ...

    async def drop(self, key: CounterKey) -> None:
        """Forget the counter: the next use rebuilds it from the store."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class SeenUser:
    user_id: str
    # Unix seconds of the user's latest write this directory was told of.
    last_active: float


class UserDirectory(Protocol):
    """A tenant's users, in user-id order, with their last activity: written on every write
    path (throttled by the caller), read page by page by ListUsers. Kept beside the usage
    counters (same store family) because it answers the same question: who holds what."""

    async def note(self, tenant: str, user_id: str, at: float) -> None:
        """Record the user (a write at `at`); the last activity only moves forward."""
        ...

    async def remove(self, tenant: str, user_id: str) -> None:
        """Forget the user (its data was erased)."""
        ...

    async def page(
        self, tenant: str, *, prefix: str = "", after: str = "", limit: int
    ) -> list[SeenUser]:
        """Up to `limit` users of `tenant` whose id starts with `prefix`, in id order, each
        after `after` (the last id of the previous page; empty: from the first)."""
        ...

    async def close(self) -> None: ...
