"""A lease on one Redis key: SET NX PX to take it, PEXPIRE by its holder to renew it.

Each step is one Lua script, so checking the holder and renewing (or deleting) are one
atomic step: a replica never renews or releases a lease another one took after its own
lapsed. The key has a hash tag so that it is a legal single-slot key on a Redis Cluster.
"""

from __future__ import annotations

from memoryd.stores.redis_clients import AsyncClient, FirstUse

MAINTENANCE_KEY = "memoryd:{lease}:maintenance"

# KEYS: the lease. ARGV: holder, ttl ms. Returns 1 when held by this holder now.
_HOLD = """
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not current then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""

# KEYS: the lease. ARGV: holder.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisLease:
    def __init__(
        self, client: AsyncClient, holder: str, key: str = MAINTENANCE_KEY, ttl_s: float = 30.0
    ) -> None:
        """`holder` must be unique per replica process; `ttl_s` is how long a dead holder
        keeps the others waiting. It is renewed every third of it."""
        self._client = client
        self._first_use = FirstUse(client)
        self._holder = holder
        self._key = key
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._hold = client.register_script(_HOLD)
        self._release = client.register_script(_RELEASE)

    @property
    def renew_every_s(self) -> float:
        return self._ttl_ms / 3000

    async def hold(self) -> bool:
        await self._first_use()
        return int(await self._hold(keys=[self._key], args=[self._holder, self._ttl_ms])) == 1

    async def release(self) -> None:
        await self._first_use()
        await self._release(keys=[self._key], args=[self._holder])

    async def holder(self) -> str | None:
        """Who holds it now (None when free)."""
        await self._first_use()
        value = await self._client.get(self._key)
        return value.decode() if isinstance(value, bytes) else value
