"""Redis hot store (redis.asyncio + hiredis).

Keys are `memoryd:{<tenant>:<user>}:...`: the hash tag keeps one user's keys in one
Redis Cluster slot, so the Lua scripts below (which touch several keys) stay legal there.
Each multi-step change runs as one Lua script, so concurrent writers never pass a limit.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any, TypeVar
from urllib.parse import quote, unquote

from redis.exceptions import ResponseError

from memoryd.stores.hot.port import (
    AppendOutcome,
    EntryLimitReached,
    HotStoreDown,
    PutOutcome,
    SessionKey,
    SessionMessage,
    TaskKey,
    WorkingEntry,
)
from memoryd.stores.redis_clients import (
    DEFAULT_TIMEOUT_S,
    DOWN,
    AsyncClient,
    FirstUse,
    open_async,
    run,
)
from memoryd.stores.redis_errors import redis_unavailable

T = TypeVar("T")

# KEYS: data hash (key -> json), sizes hash (key -> bytes), lru zset (key -> seq), seq counter
# ARGV: key, json, size, max_entries, max_bytes
# Returns {-1} when the entry limit is reached, else {replaced(0|1), count, evicted...}.
_PUT_ENTRY = """
local data, sizes, lru, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local key, doc, size = ARGV[1], ARGV[2], tonumber(ARGV[3])
local max_entries, max_bytes = tonumber(ARGV[4]), tonumber(ARGV[5])
local old = redis.call('HGET', data, key)
if not old and redis.call('HLEN', data) >= max_entries then return {-1} end
local total = 0
local all = redis.call('HGETALL', sizes)
for i = 1, #all, 2 do
  if all[i] ~= key then total = total + tonumber(all[i + 1]) end
end
local result = {old and 1 or 0, 0}
if total + size > max_bytes then
  local order = redis.call('ZRANGE', lru, 0, -1)
  for _, victim in ipairs(order) do
    if total + size <= max_bytes then break end
    if victim ~= key then
      total = total - tonumber(redis.call('HGET', sizes, victim) or '0')
      redis.call('HDEL', data, victim)
      redis.call('HDEL', sizes, victim)
      redis.call('ZREM', lru, victim)
      table.insert(result, victim)
    end
  end
end
if old then
  local entry = cjson.decode(doc)
  entry['created_at'] = cjson.decode(old)['created_at']
  doc = cjson.encode(entry)
end
redis.call('HSET', data, key, doc)
redis.call('HSET', sizes, key, size)
redis.call('ZADD', lru, redis.call('INCR', seq), key)
result[2] = redis.call('HLEN', data)
return result
"""

# KEYS: data, lru, seq. ARGV: keys. Returns the docs (false where missing); touches found ones.
_GET_ENTRIES = """
local docs = redis.call('HMGET', KEYS[1], unpack(ARGV))
for i, doc in ipairs(docs) do
  if doc then redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), ARGV[i]) end
end
return docs
"""

# KEYS: messages list, sizes list, total counter
# ARGV: doc, size, max_messages, max_bytes, ttl. Returns {count, dropped}.
_APPEND_MESSAGE = """
local msgs, sizes, total_key = KEYS[1], KEYS[2], KEYS[3]
local size, max_messages, max_bytes = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local n = redis.call('RPUSH', msgs, ARGV[1])
redis.call('RPUSH', sizes, size)
local total = redis.call('INCRBY', total_key, size)
local drop = 0
if n > max_messages then drop = n - max_messages end
local all = redis.call('LRANGE', sizes, 0, -1)
local removed = 0
for i = 1, drop do removed = removed + tonumber(all[i]) end
while total - removed > max_bytes and drop < n - 1 do
  drop = drop + 1
  removed = removed + tonumber(all[drop])
end
if drop > 0 then
  redis.call('LTRIM', msgs, drop, -1)
  redis.call('LTRIM', sizes, drop, -1)
  redis.call('DECRBY', total_key, removed)
end
local ttl = tonumber(ARGV[5])
redis.call('EXPIRE', msgs, ttl)
redis.call('EXPIRE', sizes, ttl)
redis.call('EXPIRE', total_key, ttl)
return {n - drop, drop}
"""

# KEYS: messages list, sizes list, total counter. ARGV: ids. Returns how many went.
_DELETE_MESSAGES = """
local wanted = {}
for _, id in ipairs(ARGV) do wanted[id] = true end
local docs = redis.call('LRANGE', KEYS[1], 0, -1)
local removed, deleted = 0, 0
for i, doc in ipairs(docs) do
  if wanted[cjson.decode(doc)['id']] then
    local size = redis.call('LINDEX', KEYS[2], i - 1)
    removed = removed + tonumber(size)
    deleted = deleted + 1
    redis.call('LSET', KEYS[1], i - 1, '__deleted__')
    redis.call('LSET', KEYS[2], i - 1, '__deleted__')
  end
end
if deleted > 0 then
  redis.call('LREM', KEYS[1], 0, '__deleted__')
  redis.call('LREM', KEYS[2], 0, '__deleted__')
  redis.call('DECRBY', KEYS[3], removed)
end
return deleted
"""


def _part(value: str) -> str:
    # Escape the separators so that ids can never collide across key parts.
    return quote(value, safe="")


def user_prefix(tenant: str, user_id: str) -> str:
    return f"memoryd:{{{_part(tenant)}:{_part(user_id)}}}"


def task_keys(task: TaskKey) -> tuple[str, str, str, str]:
    base = (
        f"{user_prefix(task.tenant, task.user_id)}:wm:{_part(task.agent_id)}:{_part(task.task_id)}"
    )
    return f"{base}:data", f"{base}:sizes", f"{base}:lru", f"{base}:seq"


def session_keys(session: SessionKey) -> tuple[str, str, str]:
    base = f"{user_prefix(session.tenant, session.user_id)}:st:{_part(session.session_id)}"
    return f"{base}:msgs", f"{base}:sizes", f"{base}:bytes"


# Keys SCAN asks for per round trip when listing a user's tasks and sessions.
_SCAN_COUNT = 500


def _key_parts(key: bytes | str, prefix: str, suffix: str) -> list[str] | None:
    """The escaped parts between `prefix` and `suffix` of a key, unescaped."""
    text = key.decode() if isinstance(key, bytes) else key
    if not (text.startswith(prefix) and text.endswith(suffix)):
        return None
    return [unquote(p) for p in text[len(prefix) : len(text) - len(suffix)].split(":")]


def _entry_from(doc: bytes | str) -> WorkingEntry:
    return WorkingEntry(**json.loads(doc))


def _message_from(doc: bytes | str) -> SessionMessage:
    return SessionMessage(**json.loads(doc))


class RedisHotStore:
    def __init__(
        self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S, *, cluster: bool = False
    ) -> None:
        self._url = url
        self._redis: AsyncClient = open_async(
            url, cluster=cluster, timeout_s=timeout_s, health_check_interval=30
        )
        self._first_use = FirstUse(self._redis)
        self._put = self._redis.register_script(_PUT_ENTRY)
        self._get = self._redis.register_script(_GET_ENTRIES)
        self._append = self._redis.register_script(_APPEND_MESSAGE)
        self._delete_msgs = self._redis.register_script(_DELETE_MESSAGES)

    @property
    def client(self) -> AsyncClient:
        return self._redis

    async def _call(self, op: Callable[[], Awaitable[T]], *, retry: bool) -> T:
        """`retry`: see redis_clients.run; every call decides."""
        try:
            await self._first_use()
            return await run(op, retry=retry)
        except DOWN as exc:
            raise HotStoreDown(f"redis at {self._safe_url()}: {exc}") from exc
        except ResponseError as exc:
            if redis_unavailable(exc):
                raise HotStoreDown(f"redis at {self._safe_url()}: {exc}") from exc
            raise

    def _safe_url(self) -> str:
        # Never echo a password back to callers.
        return self._url.split("@")[-1]

    async def put_entry(
        self, task: TaskKey, entry: WorkingEntry, max_entries: int, max_bytes: int
    ) -> PutOutcome:
        doc = json.dumps(asdict(entry), separators=(",", ":"))
        args: list[str | int] = [entry.key, doc, entry.size, max_entries, max_bytes]
        result: list[Any] = await self._call(
            # Idempotent: the same key and value again (a replay may report it replaced).
            lambda: self._put(keys=task_keys(task), args=args),
            retry=True,
        )
        if result[0] == -1:
            raise EntryLimitReached(entry.key)
        evicted = [k.decode() if isinstance(k, bytes) else str(k) for k in result[2:]]
        return PutOutcome(replaced=result[0] == 1, evicted_keys=evicted, count=int(result[1]))

    async def get_entries(self, task: TaskKey, keys: list[str]) -> list[WorkingEntry]:
        if not keys:
            return []
        data, _, lru, seq = task_keys(task)
        docs: list[Any] = await self._call(
            lambda: self._get(keys=[data, lru, seq], args=keys), retry=True
        )
        return [_entry_from(d) for d in docs if d]

    async def list_entries(self, task: TaskKey) -> list[WorkingEntry]:
        data, _, lru, _ = task_keys(task)

        async def read() -> tuple[dict[bytes, bytes], list[bytes]]:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hgetall(data)
                pipe.zrevrange(lru, 0, -1)
                docs, order = await pipe.execute()
            return docs, order

        docs, order = await self._call(read, retry=True)
        return [_entry_from(docs[k]) for k in order if k in docs]

    async def delete_entries(self, task: TaskKey, keys: list[str]) -> int:
        if not keys:
            return 0
        data, sizes, lru, _ = task_keys(task)

        async def delete() -> int:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hdel(data, *keys)
                pipe.hdel(sizes, *keys)
                pipe.zrem(lru, *keys)
                deleted, _, _ = await pipe.execute()
            return int(deleted)

        # A replay deletes nothing more (and may count 0 deleted).
        return await self._call(delete, retry=True)

    async def clear_task(self, task: TaskKey) -> int:
        keys = task_keys(task)

        async def clear() -> int:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hlen(keys[0])
                pipe.delete(*keys)
                count, _ = await pipe.execute()
            return int(count)

        return await self._call(clear, retry=True)

    async def append_message(
        self,
        session: SessionKey,
        message: SessionMessage,
        max_messages: int,
        max_bytes: int,
        ttl_seconds: int,
    ) -> AppendOutcome:
        doc = json.dumps(asdict(message), separators=(",", ":"))
        args: list[str | int] = [doc, message.size, max_messages, max_bytes, ttl_seconds]
        keys = session_keys(session)
        # Not idempotent: a replay would append the message twice.
        count, dropped = await self._call(lambda: self._append(keys=keys, args=args), retry=False)
        return AppendOutcome(count=int(count), dropped=int(dropped))

    async def list_messages(self, session: SessionKey) -> list[SessionMessage]:
        msgs = session_keys(session)[0]
        docs: list[bytes] = await self._call(
            lambda: self._redis.lrange(msgs, 0, -1),  # type: ignore[arg-type,return-value]
            retry=True,
        )
        return [_message_from(d) for d in docs]

    async def delete_messages(self, session: SessionKey, ids: list[str]) -> int:
        if not ids:
            return 0
        keys = session_keys(session)
        return int(await self._call(lambda: self._delete_msgs(keys=keys, args=ids), retry=True))

    async def clear_session(self, session: SessionKey) -> int:
        keys = session_keys(session)

        async def clear() -> int:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.llen(keys[0])
                pipe.delete(*keys)
                count, _ = await pipe.execute()
            return int(count)

        return await self._call(clear, retry=True)

    async def _scan(self, pattern: str) -> list[bytes]:
        async def scan() -> list[bytes]:
            return [k async for k in self._redis.scan_iter(match=pattern, count=_SCAN_COUNT)]

        return await self._call(scan, retry=True)

    async def list_tasks(self, tenant: str, user_id: str) -> list[TaskKey]:
        # Ids are %-escaped in keys, so the user's prefix holds no glob characters.
        prefix = f"{user_prefix(tenant, user_id)}:wm:"
        tasks = set()
        for key in await self._scan(f"{prefix}*:data"):
            parts = _key_parts(key, prefix, ":data")
            if parts is not None and len(parts) == 2:
                tasks.add(TaskKey(tenant, user_id, parts[0], parts[1]))
        return sorted(tasks, key=lambda t: (t.agent_id, t.task_id))

    async def list_sessions(self, tenant: str, user_id: str) -> list[SessionKey]:
        prefix = f"{user_prefix(tenant, user_id)}:st:"
        sessions = set()
        for key in await self._scan(f"{prefix}*:msgs"):
            parts = _key_parts(key, prefix, ":msgs")
            if parts is not None and len(parts) == 1:
                sessions.add(SessionKey(tenant, user_id, parts[0]))
        return sorted(sessions, key=lambda s: s.session_id)

    async def ping(self) -> bool:
        try:
            await self._first_use()
            return bool(await self._redis.ping())  # type: ignore[misc]
        except DOWN:
            return False

    async def close(self) -> None:
        await self._redis.aclose()
