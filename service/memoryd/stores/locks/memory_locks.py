"""User locks in this process: right for one replica (no Redis), where every writer of a
user is in the same event loop."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator


class InProcessLocks:
    def __init__(self) -> None:
        # Weak values: a lock disappears once no request holds or waits on it.
        self._locks: weakref.WeakValueDictionary[tuple[str, str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    def _lock(self, key: tuple[str, str, str]) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    @contextlib.asynccontextmanager
    async def hold(self, tenant: str, user_id: str, purpose: str) -> AsyncIterator[None]:
        async with self._lock((tenant, user_id, purpose)):
            yield

    async def close(self) -> None:
        return None
