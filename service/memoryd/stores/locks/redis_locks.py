"""User locks in Redis, shared by every replica: SET NX PX with a random token to take,
a Lua compare-and-delete to release, a Lua compare-and-PEXPIRE every third of the time
to live to renew while the body runs. A holder that dies stops renewing and its lock
lapses after `ttl_s`; a release or renewal never touches a lock another holder took.

The key is `memoryd:{<tenant>:<user>}:lock:<purpose>`: the user's hash tag, so on a Redis
Cluster it sits in the slot of the user's other keys. Waiters of one process queue on a
local lock first, so only one of them polls Redis at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
import weakref
from collections.abc import AsyncIterator
from urllib.parse import quote

from redis.exceptions import RedisError

from memoryd.stores import call_budget
from memoryd.stores.hot.redis_store import user_prefix
from memoryd.stores.locks.port import LockBusy, LocksUnavailable
from memoryd.stores.redis_clients import (
    DEFAULT_TIMEOUT_S,
    DOWN,
    AsyncClient,
    FirstUse,
    open_async,
    run,
)

log = logging.getLogger(__name__)

# KEYS: the lock. ARGV: token, ttl ms. Returns 1 if still held by this token (renewed).
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

# KEYS: the lock. ARGV: token.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

_FAILURES: tuple[type[BaseException], ...] = (RedisError, *DOWN)
# Polling a taken lock: the first retry soon (a merge takes milliseconds), then slower.
_FIRST_RETRY_S = 0.005
_MAX_RETRY_S = 0.1


def lock_key(tenant: str, user_id: str, purpose: str) -> str:
    return f"{user_prefix(tenant, user_id)}:lock:{quote(purpose, safe='')}"


class RedisLocks:
    def __init__(self, client: AsyncClient, *, ttl_s: float = 10.0, wait_s: float = 30.0) -> None:
        """`ttl_s`: how long a dead holder keeps the others waiting; `wait_s`: how long a
        taker waits for a held lock before giving up (`LockBusy`)."""
        self._client = client
        self._first_use = FirstUse(client)
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._wait_s = wait_s
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._local: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    @classmethod
    def from_url(
        cls, url: str, *, cluster: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> RedisLocks:
        return cls(open_async(url, cluster=cluster, timeout_s=timeout_s))

    def _local_lock(self, key: str) -> asyncio.Lock:
        lock = self._local.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._local[key] = lock
        return lock

    async def _take(self, key: str, token: str) -> None:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._wait_s
        pause = _FIRST_RETRY_S
        while True:
            try:
                await self._first_use()
                # Not retried: after a lost reply a replay would find our own lock and
                # wait for it to lapse.
                taken = await run(
                    lambda: self._client.set(key, token, nx=True, px=self._ttl_ms), retry=False
                )
                if taken:
                    return
            except _FAILURES as exc:
                raise LocksUnavailable(f"redis: {exc}") from exc
            if loop.time() >= give_up:
                raise LockBusy(f"{key} held for more than {self._wait_s:g}s")
            await asyncio.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, _MAX_RETRY_S)

    async def _keep(self, key: str, token: str) -> None:
        """Renew the lock every third of its time to live while the body runs."""
        # The holder's request may run out of time; the lock must not lapse before the
        # body is done.
        call_budget.detach()
        while True:
            await asyncio.sleep(self._ttl_ms / 3000)
            try:
                renewed = await run(
                    lambda: self._renew(keys=[key], args=[token, self._ttl_ms]), retry=True
                )
                if not int(renewed):
                    log.warning("lock %s lapsed before its holder was done", key)
                    return
            except _FAILURES as exc:
                log.warning("cannot renew lock %s (%s); it lapses on its own", key, exc)

    async def _free(self, key: str, token: str) -> None:
        """Release the lock if this token still holds it."""
        try:
            # Idempotent: compare-and-delete. Not bound by the request's deadline (a held
            # lock would keep the others waiting out its ttl).
            await asyncio.shield(self._release(keys=[key], args=[token]))
        except _FAILURES as exc:
            log.warning("cannot release lock %s (%s); it lapses on its own", key, exc)

    @contextlib.asynccontextmanager
    async def hold(self, tenant: str, user_id: str, purpose: str) -> AsyncIterator[None]:
        key = lock_key(tenant, user_id, purpose)
        token = uuid.uuid4().hex
        async with self._local_lock(key):
            try:
                await self._take(key, token)
            except asyncio.CancelledError:
                # Cancelled (a deadline) maybe after Redis set the key: free it now rather
                # than leave the others waiting out its ttl.
                await self._free(key, token)
                raise
            keeper = asyncio.create_task(self._keep(key, token), name=f"memoryd-lock:{key}")
            try:
                yield
            finally:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper
                await self._free(key, token)

    async def holder(self, tenant: str, user_id: str, purpose: str) -> str | None:
        """The token holding the lock now (None when free)."""
        value = await self._client.get(lock_key(tenant, user_id, purpose))
        return value.decode() if isinstance(value, bytes) else value

    async def close(self) -> None:
        await self._client.aclose()
