"""Usage counters in Redis, shared by every replica: each step is one Lua script, so a
reservation checks the limits and counts in one atomic step across replicas.

A counter is a hash `memoryd:{<tenant>:<user>}:usage:<tier>` with the held count `n` and
bytes `b`, the pending (reserved, not yet written) `pn` and `pb`, a version `v` that every
step moves, and `rv`, the version of the last correction. Removed ids go in the set
`...:usage:<tier>:gone` (expiring), so an id is uncounted once. Both keys carry the
user's hash tag (as the hot store's do): legal in one script on a Redis Cluster.

Decrements are written `0 - x`, never `-x`: Lua turns `-0` into the argument "-0", which
HINCRBY refuses, and counters that count no bytes (the entity tier's) move by 0 bytes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

from redis.exceptions import RedisError

from memoryd.stores.hot.redis_store import user_prefix
from memoryd.stores.redis_clients import (
    DEFAULT_TIMEOUT_S,
    DOWN,
    AsyncClient,
    FirstUse,
    open_async,
    run,
)
from memoryd.stores.usage.port import (
    GONE_TTL_S,
    Correction,
    Counted,
    CounterKey,
    CountersUnavailable,
    Outcome,
    Reservation,
    Snapshot,
)

T = TypeVar("T")

# KEYS: counter. ARGV: count, bytes, max count, max bytes (0: none).
# Returns {outcome (0 granted, 1 count full, 2 bytes full, -1 missing), held n, held b}.
_RESERVE = """
local s = redis.call('HMGET', KEYS[1], 'n', 'b')
if not s[1] then return {-1, 0, 0} end
local n, b = tonumber(s[1]), tonumber(s[2])
local dn, db = tonumber(ARGV[1]), tonumber(ARGV[2])
local mn, mb = tonumber(ARGV[3]), tonumber(ARGV[4])
if mn > 0 and n + dn > mn then return {1, n, b} end
if mb > 0 and b + db > mb then return {2, n, b} end
redis.call('HINCRBY', KEYS[1], 'n', dn)
redis.call('HINCRBY', KEYS[1], 'b', db)
redis.call('HINCRBY', KEYS[1], 'pn', dn)
redis.call('HINCRBY', KEYS[1], 'pb', db)
redis.call('HINCRBY', KEYS[1], 'v', 1)
return {0, n, b}
"""

# KEYS: counter, gone set. ARGV: count, bytes, then the ids written.
_SETTLE = """
if #ARGV > 2 then redis.call('SREM', KEYS[2], unpack(ARGV, 3)) end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'pn', 0 - tonumber(ARGV[1]))
redis.call('HINCRBY', KEYS[1], 'pb', 0 - tonumber(ARGV[2]))
redis.call('HINCRBY', KEYS[1], 'v', 1)
return 1
"""

# KEYS: counter. ARGV: count, bytes.
_RELEASE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local dn, db = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('HINCRBY', KEYS[1], 'n', 0 - dn)
redis.call('HINCRBY', KEYS[1], 'b', 0 - db)
redis.call('HINCRBY', KEYS[1], 'pn', 0 - dn)
redis.call('HINCRBY', KEYS[1], 'pb', 0 - db)
redis.call('HINCRBY', KEYS[1], 'v', 1)
return 1
"""

# KEYS: counter, gone set. ARGV: gone ttl s, then id, bytes pairs. Returns {count, bytes}
# uncounted: ids already in the gone set are not uncounted again.
_FORGET = """
local dn, db = 0, 0
for i = 2, #ARGV, 2 do
  if redis.call('SADD', KEYS[2], ARGV[i]) == 1 then
    dn = dn + 1
    db = db + tonumber(ARGV[i + 1])
  end
end
redis.call('EXPIRE', KEYS[2], ARGV[1])
if dn > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'n', 0 - dn)
  redis.call('HINCRBY', KEYS[1], 'b', 0 - db)
  redis.call('HINCRBY', KEYS[1], 'v', 1)
end
return {dn, db}
"""

# KEYS: counter. ARGV: n, b. Returns 1 if created.
_INIT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'n', ARGV[1], 'b', ARGV[2], 'pn', 0, 'pb', 0, 'v', 1, 'rv', 0)
return 1
"""

# KEYS: counter. ARGV: version seen, recounted n, recounted b.
# Returns {-1} if it moved, else {n before, b before, n after, b after}.
_CORRECT = """
local s = redis.call('HMGET', KEYS[1], 'n', 'b', 'pn', 'pb', 'v', 'rv')
if not s[1] then
  redis.call('HSET', KEYS[1], 'n', ARGV[2], 'b', ARGV[3], 'pn', 0, 'pb', 0, 'v', 1, 'rv', 1)
  return {0, 0, tonumber(ARGV[2]), tonumber(ARGV[3])}
end
local v = tonumber(s[5])
if v ~= tonumber(ARGV[1]) then return {-1} end
local pn, pb = tonumber(s[3]), tonumber(s[4])
if tonumber(s[6]) == v then pn, pb = 0, 0 end
local n, b = tonumber(ARGV[2]) + pn, tonumber(ARGV[3]) + pb
redis.call('HSET', KEYS[1], 'n', n, 'b', b, 'pn', pn, 'pb', pb, 'rv', v)
return {tonumber(s[1]), tonumber(s[2]), n, b}
"""

# What a failed step raises: a Redis error, or Redis out of reach.
_FAILURES: tuple[type[BaseException], ...] = (RedisError, *DOWN)
_OUTCOMES = {0: Outcome.GRANTED, 1: Outcome.COUNT_FULL, 2: Outcome.BYTES_FULL, -1: Outcome.MISSING}
# Removed ids per FORGET script call.
_FORGET_CHUNK = 1000


def counter_keys(key: CounterKey) -> tuple[str, str]:
    base = f"{user_prefix(key.tenant, key.user_id)}:usage:{quote(key.tier, safe='')}"
    return base, f"{base}:gone"


class RedisCounters:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._first_use = FirstUse(client)
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)
        self._release = client.register_script(_RELEASE)
        self._forget = client.register_script(_FORGET)
        self._init = client.register_script(_INIT)
        self._correct = client.register_script(_CORRECT)

    @classmethod
    def from_url(
        cls, url: str, *, cluster: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> RedisCounters:
        return cls(open_async(url, cluster=cluster, timeout_s=timeout_s))

    async def _call(self, step: Callable[[], Awaitable[T]], *, retry: bool) -> T:
        """`retry`: see redis_clients.run; every call decides."""
        try:
            await self._first_use()
            return await run(step, retry=retry)
        except _FAILURES as exc:
            raise CountersUnavailable(f"redis: {exc}") from exc

    async def _script(
        self, script: Any, keys: Sequence[str], args: Sequence[object], *, retry: bool
    ) -> Any:
        return await self._call(lambda: script(keys=list(keys), args=list(args)), retry=retry)

    async def get(self, key: CounterKey) -> Counted | None:
        counter, _ = counter_keys(key)
        n, b = await self._call(
            lambda: self._client.hmget(counter, ["n", "b"]),  # type: ignore[arg-type]
            retry=True,
        )
        return None if n is None or b is None else Counted(int(n), int(b))

    async def init(self, key: CounterKey, held: Counted) -> bool:
        counter, _ = counter_keys(key)
        # Idempotent: it creates the counter only where there is none.
        created = await self._script(self._init, [counter], [held.count, held.bytes], retry=True)
        return int(created) == 1

    async def reserve(
        self, key: CounterKey, count: int, size: int, max_count: int, max_bytes: int
    ) -> Reservation:
        counter, _ = counter_keys(key)
        # Not idempotent (nor settle, release, correct): a replay would count twice.
        outcome, n, b = await self._script(
            self._reserve, [counter], [count, size, max_count, max_bytes], retry=False
        )
        return Reservation(_OUTCOMES[int(outcome)], Counted(int(n), int(b)))

    async def settle(self, key: CounterKey, count: int, size: int, ids: Sequence[str]) -> None:
        await self._script(self._settle, counter_keys(key), [count, size, *ids], retry=False)

    async def release(self, key: CounterKey, count: int, size: int) -> None:
        counter, _ = counter_keys(key)
        await self._script(self._release, [counter], [count, size], retry=False)

    async def forget(self, key: CounterKey, removed: Mapping[str, int]) -> Counted:
        items = list(removed.items())
        count = size = 0
        for start in range(0, len(items), _FORGET_CHUNK):
            args: list[object] = [GONE_TTL_S]
            for i, n in items[start : start + _FORGET_CHUNK]:
                args += [i, n]
            # Idempotent: an id already in the gone set is not uncounted again.
            dn, db = await self._script(self._forget, counter_keys(key), args, retry=True)
            count, size = count + int(dn), size + int(db)
        return Counted(count, size)

    async def snapshot(self, key: CounterKey) -> Snapshot | None:
        counter, _ = counter_keys(key)
        fields = ["n", "b", "pn", "pb", "v"]
        n, b, pn, pb, v = await self._call(
            lambda: self._client.hmget(counter, fields),  # type: ignore[arg-type]
            retry=True,
        )
        if n is None or b is None or pn is None or pb is None or v is None:
            return None
        return Snapshot(Counted(int(n), int(b)), Counted(int(pn), int(pb)), int(v))

    async def correct(self, key: CounterKey, version: int, held: Counted) -> Correction | None:
        counter, _ = counter_keys(key)
        got = await self._script(
            self._correct, [counter], [version, held.count, held.bytes], retry=False
        )
        if int(got[0]) == -1 and len(got) == 1:
            return None
        n0, b0, n1, b1 = (int(x) for x in got)
        return Correction(Counted(n0, b0), Counted(n1, b1))

    async def drop(self, key: CounterKey) -> None:
        counter, _ = counter_keys(key)
        await self._call(lambda: self._client.delete(counter), retry=True)

    async def close(self) -> None:
        await self._client.aclose()
