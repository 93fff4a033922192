"""Token buckets in this process: for one replica without Redis."""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from memoryd.stores.ratelimit.port import EPSILON, BucketKey, Rate, Taken, refill


class InProcessBuckets:
    def __init__(self, max_buckets: int = 100_000) -> None:
        # key -> (tokens, time of the last refill); least recently used first.
        self._buckets: OrderedDict[BucketKey, tuple[float, float]] = OrderedDict()
        self._max = max_buckets
        self._lock = asyncio.Lock()

    async def take(self, key: BucketKey, rate: Rate, now: float, cost: float = 1.0) -> Taken:
        async with self._lock:
            tokens, last = self._buckets.pop(key, (rate.capacity, now))
            tokens, last = refill(tokens, last, rate, now)
            if tokens + EPSILON >= cost:
                tokens = max(0.0, tokens - cost)
                taken = Taken(True, tokens, 0.0)
            else:
                taken = Taken(False, tokens, (cost - tokens) / rate.refill_per_s)
            self._buckets[key] = (tokens, last)
            if len(self._buckets) > self._max:
                # Forgetting the idlest bucket refills it: lenient, never stricter.
                self._buckets.popitem(last=False)
            return taken

    async def give_back(self, key: BucketKey, rate: Rate, now: float, amount: float) -> None:
        async with self._lock:
            tokens, last = self._buckets.pop(key, (rate.capacity, now))
            tokens, last = refill(tokens, last, rate, now)
            self._buckets[key] = (min(rate.capacity, tokens + amount), last)

    async def close(self) -> None:
        self._buckets.clear()
