"""Which Redis an adapter registry picks, read from the settings in one place: the stores
that live in Redis (hot tiers, write-behind queue, rate-limit buckets, usage counters) all
go to one Redis or one Redis Cluster when `redis_url` is set, and to their own fallback
otherwise. No Redis import here: a registry loads its adapter module only when chosen."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from memoryd.settings import Settings

T = TypeVar("T")


def redis_adapter(settings: Settings) -> str | None:
    """`redis_cluster` or `redis` when a URL is configured, else None (the fallback)."""
    if not settings.redis_url:
        return None
    return "redis_cluster" if settings.redis_cluster else "redis"


def redis_url(settings: Settings, store: str, *, cluster: bool = False) -> str:
    """The configured URL; a Redis adapter chosen without one is a configuration error."""
    if not settings.redis_url:
        where = "redis cluster" if cluster else "redis"
        hint = " (any node of it)" if cluster else ""
        raise ValueError(f"the {where} {store} needs redis_url{hint}")
    return settings.redis_url


def family_adapters(
    in_process: Callable[[], T], redis: Callable[[str, bool, float], T], store: str
) -> dict[str, Callable[[Settings], T]]:
    """The adapter registry of a store kept in Redis when one is configured (`store` names
    it in errors): `in_process()` builds the fallback, `redis(url, cluster, timeout_s)` the
    Redis or Redis Cluster adapter; each imports its module when called."""
    return {
        "in_process": lambda settings: in_process(),
        "redis": lambda settings: redis(
            redis_url(settings, store), False, settings.redis_timeout_seconds
        ),
        "redis_cluster": lambda settings: redis(
            redis_url(settings, store, cluster=True), True, settings.redis_timeout_seconds
        ),
    }
