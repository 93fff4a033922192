"""Usage counters: the `UsageCounters` port (port.py) and one module per adapter.

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
    from memoryd.stores.usage.port import UsageCounters, UserDirectory

CountersFactory: TypeAlias = "Callable[[Settings], UsageCounters]"
DirectoryFactory: TypeAlias = "Callable[[Settings], UserDirectory]"


def _in_process() -> UsageCounters:
    from memoryd.stores.usage.memory_counters import InProcessCounters

    return InProcessCounters()


def _redis(url: str, cluster: bool, timeout_s: float) -> UsageCounters:
    from memoryd.stores.usage.redis_counters import RedisCounters

    return RedisCounters.from_url(url, cluster=cluster, timeout_s=timeout_s)


ADAPTERS: dict[str, CountersFactory] = family_adapters(_in_process, _redis, "usage counters")


def _in_process_directory() -> UserDirectory:
    from memoryd.stores.usage.memory_directory import InProcessDirectory

    return InProcessDirectory()


def _redis_directory(url: str, cluster: bool, timeout_s: float) -> UserDirectory:
    from memoryd.stores.usage.redis_directory import RedisDirectory

    return RedisDirectory.from_url(url, cluster=cluster, timeout_s=timeout_s)


# The user directory (ListUsers) lives where the counters do: `adapter_name` picks both.
DIRECTORY_ADAPTERS: dict[str, DirectoryFactory] = family_adapters(
    _in_process_directory, _redis_directory, "user directory"
)


def adapter_name(settings: Settings) -> str:
    """Redis (or a Redis Cluster) when a URL is configured, so that every replica counts
    in one place; else the server's own memory, rebuilt from the vector store on first use
    after each start."""
    return redis_adapter(settings) or "in_process"
