"""The user directory in Redis, shared by every replica: per tenant, a sorted set of user
ids (all of score 0, so that ZRANGEBYLEX pages them by id and prefix) and a hash of each
id's last activity. Both keys carry the tenant's hash tag: one script on a Redis Cluster.
Ids compare byte-wise; a prefix's range ends at prefix + 0xff, a byte UTF-8 never uses."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from redis.exceptions import RedisError

from memoryd.stores.redis_clients import (
    DEFAULT_TIMEOUT_S,
    DOWN,
    AsyncClient,
    FirstUse,
    open_async,
    run,
)
from memoryd.stores.usage.port import CountersUnavailable, SeenUser

# KEYS: ids, seen. ARGV: user id, at.
_NOTE = """
redis.call('ZADD', KEYS[1], 0, ARGV[1])
local was = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tonumber(ARGV[2]) > was then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
return 1
"""

# KEYS: ids, seen. ARGV: min, max, limit. Returns id, at, id, at, ...
_PAGE = """
local ids = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[2], id) or '0'
end
return out
"""

_FAILURES: tuple[type[BaseException], ...] = (RedisError, *DOWN)


def directory_keys(tenant: str) -> list[str]:
    base = f"memoryd:{{{quote(tenant, safe='')}}}:users"
    return [base, f"{base}:seen"]


class RedisDirectory:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._first_use = FirstUse(client)
        self._note = client.register_script(_NOTE)
        self._page = client.register_script(_PAGE)

    @classmethod
    def from_url(
        cls, url: str, *, cluster: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> RedisDirectory:
        return cls(open_async(url, cluster=cluster, timeout_s=timeout_s))

    async def _run(self, script: Any, keys: list[str], args: list[object]) -> Any:
        # Every call here sets or reads (a note writes the same score again): retried once
        # on a fresh connection after a broken one (redis_clients.run).
        try:
            await self._first_use()
            return await run(lambda: script(keys=keys, args=args), retry=True)
        except _FAILURES as exc:
            raise CountersUnavailable(f"redis: {exc}") from exc

    async def note(self, tenant: str, user_id: str, at: float) -> None:
        await self._run(self._note, directory_keys(tenant), [user_id, repr(at)])

    async def remove(self, tenant: str, user_id: str) -> None:
        ids, seen = directory_keys(tenant)
        try:
            await self._first_use()
            await run(lambda: self._client.zrem(ids, user_id), retry=True)
            await run(lambda: self._client.hdel(seen, user_id), retry=True)
        except _FAILURES as exc:
            raise CountersUnavailable(f"redis: {exc}") from exc

    async def page(
        self, tenant: str, *, prefix: str = "", after: str = "", limit: int
    ) -> list[SeenUser]:
        low = f"({after}" if after and after >= prefix else (f"[{prefix}" if prefix else "-")
        high = f"[{prefix}\xff" if prefix else "+"
        got = await self._run(self._page, directory_keys(tenant), [low, high, limit])
        pairs = [_text(x) for x in got]
        return [SeenUser(pairs[i], float(pairs[i + 1])) for i in range(0, len(pairs), 2)]

    async def close(self) -> None:
        await self._client.aclose()


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)
