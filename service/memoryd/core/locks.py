"""Per-key asyncio locks, so check-then-write sequences (quota, de-duplication) of one user
never interleave within this process."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Hashable


class KeyedLocks:
    def __init__(self) -> None:
        # Weak values: a lock disappears once no request holds or waits on it.
        self._locks: weakref.WeakValueDictionary[Hashable, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    def __call__(self, key: Hashable) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock
