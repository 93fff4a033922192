"""User locks: the `UserLocks` port (port.py) and one module per adapter, chosen as the
other Redis-family stores are (stores/redis_family.py): Redis (or a Redis Cluster) when a
URL is configured, so that every replica takes the same lock; else this process's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from memoryd.stores.redis_family import family_adapters, redis_adapter

if TYPE_CHECKING:
    from memoryd.settings import Settings
    from memoryd.stores.locks.port import UserLocks

LocksFactory: TypeAlias = "Callable[[Settings], UserLocks]"


def _in_process() -> UserLocks:
    from memoryd.stores.locks.memory_locks import InProcessLocks

    return InProcessLocks()


def _redis(url: str, cluster: bool, timeout_s: float) -> UserLocks:
    from memoryd.stores.locks.redis_locks import RedisLocks

    return RedisLocks.from_url(url, cluster=cluster, timeout_s=timeout_s)


ADAPTERS: dict[str, LocksFactory] = family_adapters(_in_process, _redis, "user locks")


def adapter_name(settings: Settings) -> str:
    return redis_adapter(settings) or "in_process"
