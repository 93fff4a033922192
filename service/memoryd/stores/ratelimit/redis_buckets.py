"""Token buckets in Redis, shared by every replica: one Lua script refills and takes
atomically, so concurrent calls on several replicas never overspend a bucket.

A bucket is a hash `memoryd:{<tenant>:<user>}:rl:<name>` (the user's hash tag, as in the
hot store) with `tokens` and `ts`; it expires once it would be full again. The script
touches that one key, so on a Redis Cluster (`cluster=True`, the cluster client) it runs on
the master holding the user's slot.
"""

from __future__ import annotations

from redis.exceptions import RedisError

from memoryd.stores.hot.redis_store import user_prefix
from memoryd.stores.ratelimit.port import BucketKey, BucketsUnavailable, Rate, Taken
from memoryd.stores.redis_clients import (
    DEFAULT_TIMEOUT_S,
    DOWN,
    AsyncClient,
    FirstUse,
    open_async,
    run,
)

# A Redis (or cluster node) that cannot be reached, and any error reply.
_UNAVAILABLE: tuple[type[BaseException], ...] = (RedisError, *DOWN)

# KEYS[1] bucket; ARGV capacity, refill per second, now (s), cost. A negative cost gives
# tokens back (a refused call returns what it took for its other users), never past
# the capacity. Numbers go back as strings: Redis would truncate Lua floats to integers.
_TAKE = """
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local last = tonumber(state[2])
if tokens == nil or last == nil then
  tokens = capacity
  last = now
end
local elapsed = now - last
if elapsed < 0 then elapsed = 0 end
tokens = math.min(capacity, tokens + elapsed * rate)
if now > last then last = now end
local allowed = 0
local retry = 0
if tokens + 1e-9 >= cost then
  tokens = math.min(capacity, math.max(0, tokens - cost))
  allowed = 1
else
  retry = (cost - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens),
           'ts', string.format('%.17g', last))
redis.call('PEXPIRE', KEYS[1], math.ceil((capacity - tokens) / rate * 1000) + 1000)
return {allowed, string.format('%.17g', tokens), string.format('%.17g', retry)}
"""


def bucket_key(key: BucketKey) -> str:
    return f"{user_prefix(key.tenant, key.user_id)}:rl:{key.name}"


class RedisBuckets:
    def __init__(
        self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S, *, cluster: bool = False
    ) -> None:
        self._redis: AsyncClient = open_async(url, cluster=cluster, timeout_s=timeout_s)
        self._first_use = FirstUse(self._redis)
        self._take = self._redis.register_script(_TAKE)

    async def take(self, key: BucketKey, rate: Rate, now: float, cost: float = 1.0) -> Taken:
        try:
            await self._first_use()
            allowed, remaining, retry = await run(
                lambda: self._take(
                    keys=[bucket_key(key)],
                    args=[repr(rate.capacity), repr(rate.refill_per_s), repr(now), repr(cost)],
                ),
                # Not idempotent: a replay would spend the tokens twice.
                retry=False,
            )
        except _UNAVAILABLE as exc:
            raise BucketsUnavailable(str(exc)) from exc
        return Taken(bool(int(allowed)), float(remaining), float(retry))

    async def give_back(self, key: BucketKey, rate: Rate, now: float, amount: float) -> None:
        await self.take(key, rate, now, -amount)

    async def close(self) -> None:
        await self._redis.aclose()
