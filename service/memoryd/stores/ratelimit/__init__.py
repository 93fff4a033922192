"""Rate-limit token buckets: the `TokenBuckets` port (port.py) and one module per adapter.

`ADAPTERS` names every adapter; `adapter_name` reads which one the settings choose. Each
factory imports its module when called. A new adapter is its module plus one line in
`ADAPTERS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from memoryd.stores.redis_family import family_adapters, redis_adapter

if TYPE_CHECKING:
    from memoryd.settings import Settings
    from memoryd.stores.ratelimit.port import TokenBuckets

BucketsFactory: TypeAlias = "Callable[[Settings], TokenBuckets]"


def _in_process() -> TokenBuckets:
    from memoryd.stores.ratelimit.memory_buckets import InProcessBuckets

    return InProcessBuckets()


def _redis(url: str, cluster: bool, timeout_s: float) -> TokenBuckets:
    from memoryd.stores.ratelimit.redis_buckets import RedisBuckets

    return RedisBuckets(url, timeout_s, cluster=cluster)


ADAPTERS: dict[str, BucketsFactory] = family_adapters(_in_process, _redis, "rate-limit buckets")


def adapter_name(settings: Settings) -> str:
    """Redis (or a Redis Cluster) when a URL is configured, so that every replica shares
    the buckets; else this process's own."""
    return redis_adapter(settings) or "in_process"
