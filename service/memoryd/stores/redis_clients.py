"""Redis clients for the adapters: one Redis, or a Redis Cluster (`redis_cluster`).

The cluster client routes each command by its keys' hash slot, so every adapter keeps the
keys one script or transaction touches under one hash tag (`{...}`).

Every command of an adapter goes through `run`: bounded by the client's timeout
(`redis_timeout_seconds`, per command and per connect) and by the request's deadline
(stores/call_budget.py). After Redis restarts, the pool replaces the connections Redis
closed before it hands them out again (a connection at end-of-file is reconnected), so no
command is sent on a dead one; a command that still meets a broken connection is sent
once more on a fresh one only when the adapter says it is idempotent (`retry=True`):
running it twice must leave what running it once leaves. Which calls are: docs/operations.md,
"A Redis that hangs, and Redis restarts".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.exceptions import ClusterDownError, RedisClusterException, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.maint_notifications import MaintNotificationsConfig

from memoryd.stores import call_budget

T = TypeVar("T")
log = logging.getLogger(__name__)

AsyncClient: TypeAlias = aioredis.Redis | AsyncRedisCluster
SyncClient: TypeAlias = redis.Redis | SyncRedisCluster

# What a Redis that cannot be reached raises. A cluster adds its own: no reachable node at
# start (RedisClusterException) and a slot without a master (ClusterDownError).
DOWN: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ClusterDownError,
    RedisClusterException,
    OSError,
)


# The longest wait for one command or connect, unless the settings say otherwise.
DEFAULT_TIMEOUT_S = 2.0


def open_async(
    url: str, *, cluster: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S, **options: Any
) -> AsyncClient:
    """An asyncio client; `from_url` does not connect, so a bad URL fails here."""
    options.setdefault("socket_timeout", timeout_s)
    options.setdefault("socket_connect_timeout", timeout_s)
    if cluster:
        return AsyncRedisCluster.from_url(url, **options)
    # redis-py's pool checks a connection before handing it out (and reconnects one the
    # server closed: Redis restarted) only when maintenance notifications are off; their
    # default, "auto", skips the check. They are a feature of managed Redis services.
    options.setdefault("maint_notifications_config", MaintNotificationsConfig(enabled=False))
    return aioredis.Redis.from_url(url, **options)


async def run(op: Callable[[], Awaitable[T]], *, retry: bool) -> T:
    """One command (or script, or pipeline) of an adapter, within the request's budget.
    `retry`: it is idempotent, so after a broken connection it is sent once more on a
    fresh one (the pool reconnects the broken one); a non-idempotent call is not, as the
    first attempt may have run before the connection broke."""
    try:
        return await call_budget.bounded(op, (RedisTimeoutError,))
    except RedisConnectionError as exc:
        if not retry:
            raise
        log.debug("redis connection broken (%s); sending the command again", exc)
        return await call_budget.bounded(op, (RedisTimeoutError,))


def open_sync(url: str, *, cluster: bool = False, **options: Any) -> SyncClient:
    if cluster:
        return SyncRedisCluster.from_url(url, **options)
    options.setdefault("maint_notifications_config", MaintNotificationsConfig(enabled=False))
    return redis.Redis.from_url(url, **options)


# How long `rewrite_persistence` waits for a rewrite or snapshot that had already begun.
_BUSY_WAIT_S = 10.0


async def rewrite_persistence(client: AsyncClient) -> list[str]:
    """Have Redis rewrite its files from what it holds now, so that deleted keys leave the
    disk: `BGREWRITEAOF` when the append-only file is on, `BGSAVE` when RDB snapshots are.
    Both fork and return at once; Redis then replaces the old files (in seconds for a
    few hundred MB). A rewrite already running began before the caller's deletes, so it
    is waited for and a new one started. Returns the commands started. One Redis only: a
    Redis Cluster raises `NotImplementedError` (docs/operations.md, "Erasure")."""
    if isinstance(client, AsyncRedisCluster):
        raise NotImplementedError("rewrite each primary's files (BGREWRITEAOF, BGSAVE)")
    config = await run(lambda: client.config_get("appendonly"), retry=True)
    save = await run(lambda: client.config_get("save"), retry=True)
    started = []
    if str(config.get("appendonly", "no")).lower() == "yes":
        await _when_idle(client, "aof_rewrite_in_progress", client.bgrewriteaof)
        started.append("BGREWRITEAOF")
    if str(save.get("save", "")).strip():
        # SCHEDULE: started once the AOF rewrite just asked for is done, not refused.
        await _when_idle(client, "rdb_bgsave_in_progress", lambda: client.bgsave(schedule=True))
        started.append("BGSAVE")
    return started


async def _when_idle(
    client: aioredis.Redis, busy_field: str, start: Callable[[], Awaitable[Any]]
) -> None:
    """Start a background rewrite once the one of its kind running now (if any) ended.
    Redis refuses a second concurrent one, and schedules an AOF rewrite asked for during a
    snapshot (which counts as started)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + _BUSY_WAIT_S
    while True:
        info = await run(lambda: client.info("persistence"), retry=True)
        if not int(info.get(busy_field, 0)):
            try:
                await run(start, retry=False)
                return
            except ResponseError as exc:
                if "in progress" not in str(exc):
                    raise
        if loop.time() >= give_up:
            raise RedisTimeoutError(f"{busy_field} for more than {_BUSY_WAIT_S:g}s")
        await asyncio.sleep(0.05)


class FirstUse:
    """Discovers a cluster's nodes once, before the client's first command.

    redis-py's asyncio cluster client breaks ('NoneType' has no attribute 'writelines') when
    its very first commands run concurrently, so the adapters await this first. A failed
    discovery (cluster down) raises and is tried again on the next call. For one Redis it
    does nothing.
    """

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._done = not isinstance(client, AsyncRedisCluster)
        self._lock = asyncio.Lock()

    async def __call__(self) -> None:
        if self._done:
            return
        async with self._lock:
            if not self._done and isinstance(self._client, AsyncRedisCluster):
                await self._client.initialize()
                self._done = True
