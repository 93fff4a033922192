"""The user-lock port: a mutual exclusion per user and purpose, shared by every replica
when the adapter is shared (Redis), so that a find-then-write sequence (the entity tier's
merge by name) never interleaves with the same sequence of another replica.

A lock is held by a context manager. Taking it raises `LocksUnavailable` when the store
holding the locks cannot be reached or the lock stays taken past the adapter's wait bound
(`LockBusy`); the body's own exceptions pass through untouched.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol


class LocksUnavailable(Exception):
    """The lock cannot be taken now: its store is out of reach (or see `LockBusy`)."""


class LockBusy(LocksUnavailable):
    """Another holder kept the lock for longer than the adapter waits."""


class UserLocks(Protocol):
    def hold(self, tenant: str, user_id: str, purpose: str) -> AbstractAsyncContextManager[None]:
        """Hold the user's lock for `purpose` for the duration of the `async with`."""
        ...

    async def close(self) -> None: ...
