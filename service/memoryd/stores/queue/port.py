"""The write-behind queue port: work acknowledged to a caller now, done by a worker later.

An entry stays pending until the worker acks it, so a crash or restart between `put` and
`ack` replays it; consumers must therefore be idempotent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class QueueEntry:
    id: str
    body: dict[str, Any]


class QueueDown(Exception):
    """The queue's store cannot be reached."""


class WriteBehindQueue(Protocol):
    async def put(self, body: dict[str, Any]) -> str:
        """Durably enqueue (survives a process restart once this returns); returns the id."""
        ...

    async def take(self, max_items: int, wait_s: float) -> list[QueueEntry]:
        """Up to max_items pending entries, waiting up to wait_s for the first one.

        Entries taken but never acked (e.g. before a restart) are handed out again first.
        """
        ...

    async def ack(self, ids: list[str]) -> None: ...

    async def release(self, ids: list[str]) -> None:
        """Hand taken entries out again on the next `take`: their work failed (a store was
        down) and must be retried now, not after a restart."""
        ...

    async def pending(self) -> int:
        """Entries put and not yet acked."""
        ...

    async def oldest_put_at(self) -> float | None:
        """When (epoch seconds, wall clock) the oldest entry not yet acked was put; None
        when there is none."""
        ...

    async def newest_id(self) -> str | None:
        """The id of the newest entry not yet acked, a mark of "now" for `pending_through`;
        None when every entry is acked. Ids grow with each `put`, also across restarts."""
        ...

    async def pending_through(self, mark: str) -> bool:
        """Whether an entry put at or before `mark` (an id from `newest_id`) is not yet
        acked, taken or not. Entries put after `mark` do not count, so a caller can wait
        for what was queued before it began while others keep putting."""
        ...

    async def compact(self) -> None:
        """Remove what is acked from the queue's files on disk, so that no copy of an
        erased user's messages stays there (called after an erasure, which first has every
        earlier entry copied and acked). Entries still pending stay."""
        ...

    async def close(self) -> None: ...
