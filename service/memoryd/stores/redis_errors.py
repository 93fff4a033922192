"""Which Redis error replies mean "Redis cannot serve this now" (the caller may retry
later: UNAVAILABLE), as opposed to a command that is wrong (a bug)."""

from __future__ import annotations

from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)

# A full Redis under `maxmemory-policy noeviction`, a replica after a fail-over, a
# primary without its replicas, a Redis that cannot persist (MISCONF), a cluster moving.
_UNAVAILABLE = (ClusterDownError, MasterDownError, OutOfMemoryError, ReadOnlyError, TryAgainError)
_UNAVAILABLE_PREFIXES = ("MISCONF", "NOREPLICAS", "OOM", "READONLY")


def redis_unavailable(exc: ResponseError) -> bool:
    return isinstance(exc, _UNAVAILABLE) or str(exc).startswith(_UNAVAILABLE_PREFIXES)
