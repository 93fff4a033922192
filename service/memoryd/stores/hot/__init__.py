"""Hot store: the `HotStore` port (port.py) and one module per adapter.

`ADAPTERS` names every adapter; `adapter_name` reads which one the settings choose. Each
factory imports its module when called, so importing the port loads no client library.
A new adapter is its module plus one line in `ADAPTERS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from memoryd.stores.redis_family import redis_adapter, redis_url

if TYPE_CHECKING:
    from memoryd.settings import Settings
    from memoryd.stores.hot.port import HotStore

HotStoreFactory: TypeAlias = "Callable[[Settings], HotStore]"


def _in_process(settings: Settings) -> HotStore:
    from memoryd.stores.hot.memory_store import InProcessHotStore

    return InProcessHotStore()


def _redis(settings: Settings) -> HotStore:
    from memoryd.stores.hot.redis_store import RedisHotStore

    return RedisHotStore(redis_url(settings, "hot store"), settings.redis_timeout_seconds)


def _redis_cluster(settings: Settings) -> HotStore:
    from memoryd.stores.hot.redis_store import RedisHotStore

    url = redis_url(settings, "hot store", cluster=True)
    return RedisHotStore(url, settings.redis_timeout_seconds, cluster=True)


ADAPTERS: dict[str, HotStoreFactory] = {
    "in_process": _in_process,
    "redis": _redis,
    "redis_cluster": _redis_cluster,
}


def adapter_name(settings: Settings) -> str:
    """Redis (or a Redis Cluster) when a URL is configured, else the server's own memory."""
    return redis_adapter(settings) or "in_process"
