"""Redis clients for the adapters: one Redis, or a Redis Cluster (`redis_cluster`).

The cluster client routes each command by its keys' hash slot, so every adapter keeps the
keys one script or transaction touches under one hash tag (`{...}`).
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeAlias

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.exceptions import ClusterDownError, RedisClusterException
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

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


def open_async(url: str, *, cluster: bool = False, **options: Any) -> AsyncClient:
    """An asyncio client; `from_url` does not connect, so a bad URL fails here."""
    if cluster:
        return AsyncRedisCluster.from_url(url, **options)
    return aioredis.Redis.from_url(url, **options)


def open_sync(url: str, *, cluster: bool = False, **options: Any) -> SyncClient:
    if cluster:
        return SyncRedisCluster.from_url(url, **options)
    return redis.Redis.from_url(url, **options)


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
