"""Write-behind queue: the `WriteBehindQueue` port (port.py) and one module per adapter.

`ADAPTERS` names every adapter; `adapter_name` reads which one the settings choose. Each
factory imports its module when called. A new adapter is its module plus one line in
`ADAPTERS`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from memoryd.stores.redis_family import redis_adapter, redis_url

if TYPE_CHECKING:
    from memoryd.settings import Settings
    from memoryd.stores.queue.port import WriteBehindQueue

QueueFactory: TypeAlias = "Callable[[Settings], WriteBehindQueue]"


def _file(settings: Settings) -> WriteBehindQueue:
    from memoryd.stores.queue.file_queue import FileQueue

    return FileQueue(settings.data_dir / "queue")


def _redis(settings: Settings) -> WriteBehindQueue:
    from memoryd.stores.queue.redis_stream import RedisStreamQueue

    url = redis_url(settings, "write-behind queue")
    # A stable consumer name: after a restart the replica first gets back what it had taken.
    consumer = settings.instance_id or socket.gethostname()
    return RedisStreamQueue.from_url(
        url,
        consumer,
        claim_idle_s=settings.write_behind.claim_after_seconds,
        timeout_s=settings.redis_timeout_seconds,
    )


def _redis_cluster(settings: Settings) -> WriteBehindQueue:
    from memoryd.stores.queue.redis_stream import CLUSTER_STREAM, RedisStreamQueue

    url = redis_url(settings, "write-behind queue", cluster=True)
    consumer = settings.instance_id or socket.gethostname()
    return RedisStreamQueue.from_url(
        url,
        consumer,
        cluster=True,
        stream=CLUSTER_STREAM,
        claim_idle_s=settings.write_behind.claim_after_seconds,
        timeout_s=settings.redis_timeout_seconds,
    )


ADAPTERS: dict[str, QueueFactory] = {
    "file": _file,
    "redis": _redis,
    "redis_cluster": _redis_cluster,
}


def adapter_name(settings: Settings) -> str:
    """The Redis stream (on one Redis or a Redis Cluster) when a URL is configured, else a
    journal under the data directory."""
    return redis_adapter(settings) or "file"
