"""A caching ``Embedder`` decorator: in-process LRU, optionally backed by Redis.

Keys are (embedder name and runtime variant, SHA-256 of the UTF-8 text), so vectors of
different models or runtimes never mix. Vectors are kept as float32 (4 bytes per
component) both in memory and in Redis, and every vector returned (fresh, from memory or
from Redis) is rounded to float32 the same way, so a text embeds identically whatever the
cache state.

Redis is an optimisation shared by replicas, never a dependency: any Redis error is
logged, Redis is skipped for ``redis_retry_after_s``, and embedding goes on in-process.
On a Redis Cluster the keys carry no hash tag on purpose: vectors spread over every
master, and a batch is read per slot (MGET across slots is not allowed there).
"""

from __future__ import annotations

import hashlib
import logging
import sys
import threading
import time
from array import array
from collections.abc import Sequence
from typing import cast

import redis
from cachetools import LRUCache
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from memoryd.stores.embeddings.port import CacheStats, Embedder, RuntimeVariant
from memoryd.stores.redis_clients import SyncClient, open_sync

__all__ = ["DEFAULT_REDIS_TTL_S", "REDIS_KEY_PREFIX", "CacheStats", "CachedEmbedder"]

REDIS_KEY_PREFIX = "memoryd:emb:"
DEFAULT_REDIS_TTL_S = 7 * 24 * 3600
# A cluster with no reachable node raises RedisClusterException, which is no RedisError.
_REDIS_ERRORS = (redis.RedisError, RedisClusterException, OSError)
# Redis values are little-endian float32 whatever the host, so replicas can share them.
_BYTESWAP = sys.byteorder == "big"

_log = logging.getLogger(__name__)


class CachedEmbedder:
    """Implements the ``Embedder`` port around ``inner``; only cache misses are embedded.

    Thread-safe: one lock guards the LRU and the counters; it is never held while the
    inner embedder or Redis is called, so slow misses do not block hits. Two threads
    missing the same text at once may both embed it (harmless, same result).
    """

    def __init__(
        self,
        inner: Embedder,
        max_entries: int = 10_000,
        redis_url: str | None = None,
        redis_ttl_s: int = DEFAULT_REDIS_TTL_S,
        *,
        redis_timeout_s: float = 0.5,
        redis_retry_after_s: float = 5.0,
        redis_cluster: bool = False,
    ) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be >= 0")
        if redis_ttl_s < 1:
            raise ValueError("redis_ttl_s must be >= 1")
        self._inner = inner
        # Vectors of one space from two runtimes (torch, ONNX int8) differ slightly: each
        # keeps its own entries, so a text embeds identically whatever the cache state.
        self._key_name = (
            f"{inner.name}@{inner.variant}" if isinstance(inner, RuntimeVariant) else inner.name
        )
        self._max_entries = max_entries
        self._ttl_s = redis_ttl_s
        self._retry_after_s = redis_retry_after_s
        self._lock = threading.Lock()
        self._lru: LRUCache[tuple[str, str], array[float]] = LRUCache(maxsize=max_entries)
        self._hits = 0
        self._redis_hits = 0
        self._misses = 0
        self._redis_down_until = 0.0
        self._redis_ok = True
        self._redis_url = redis_url
        self._redis_cluster = redis_cluster
        self._redis_timeout_s = redis_timeout_s
        self._open_lock = threading.Lock()
        # One Redis: from_url does not connect, so a bad URL fails here, at configuration
        # time. The cluster client connects when made, so it is made on first use.
        self._redis: SyncClient | None = (
            self._open_redis() if redis_url and not redis_cluster else None
        )

    def _open_redis(self) -> SyncClient:
        assert self._redis_url is not None
        return open_sync(
            self._redis_url,
            cluster=self._redis_cluster,
            socket_timeout=self._redis_timeout_s,
            socket_connect_timeout=self._redis_timeout_s,
        )

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def dim(self) -> int:
        return self._inner.dim

    @property
    def inner(self) -> Embedder:
        return self._inner

    def warm(self) -> None:
        self._inner.warm()
        if self._redis_url is not None:
            try:
                client = self._redis or self._open_redis()
                self._redis = client
                client.ping()
            except _REDIS_ERRORS as exc:
                self._redis_failed(exc)

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._redis_hits, self._misses, len(self._lru))

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()

    def lookup(self, texts: Sequence[str]) -> list[list[float] | None]:
        """Implements ``CacheLookup``: in-memory hits only, never Redis or the model."""
        keys = [(self._key_name, _digest(text)) for text in texts]
        with self._lock:
            vectors = [self._lru.get(key) for key in keys]
            self._hits += sum(v is not None for v in vectors)
        return [None if v is None else v.tolist() for v in vectors]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        name = self._inner.name
        keys = [(self._key_name, _digest(text)) for text in texts]
        found: dict[tuple[str, str], array[float]] = {}
        with self._lock:
            for key in keys:
                if key in found:
                    continue
                vector = self._lru.get(key)  # a hit becomes the most recently used
                if vector is not None:
                    found[key] = vector
            self._hits += len(found)

        # Unique missing keys, each with the first text that produced it.
        missing: dict[tuple[str, str], str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in found and key not in missing:
                missing[key] = text

        if missing:
            from_redis = self._redis_get(list(missing))
            if from_redis:
                found.update(from_redis)
                for key in from_redis:
                    del missing[key]
                # Remembered before embedding the rest, so they survive an embedder failure.
                with self._lock:
                    self._redis_hits += len(from_redis)
                    self._remember(from_redis)
        if missing:
            vectors = self._inner.embed(list(missing.values()))
            if len(vectors) != len(missing):
                raise RuntimeError(
                    f"{name}: embedder returned {len(vectors)} vectors for {len(missing)} texts"
                )
            fresh = {key: array("f", vector) for key, vector in zip(missing, vectors, strict=True)}
            found.update(fresh)
            self._redis_set(fresh)
            with self._lock:
                self._misses += len(fresh)
                self._remember(fresh)
        return [found[key].tolist() for key in keys]

    # --- in-process LRU (call with the lock held) ---

    def _remember(self, entries: dict[tuple[str, str], array[float]]) -> None:
        if self._max_entries == 0:
            return  # cachetools raises on inserting into a cache of size 0
        self._lru.update(entries)  # evicts the least recently used beyond max_entries

    # --- Redis ---

    def _redis_client(self) -> SyncClient | None:
        if self._redis_url is None or time.monotonic() < self._redis_down_until:
            return None
        if self._redis is None:
            try:
                with self._open_lock:  # one client, whichever thread gets here first
                    self._redis = self._redis or self._open_redis()
            except _REDIS_ERRORS as exc:
                self._redis_failed(exc)
                return None
        return self._redis

    def _redis_get(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], array[float]]:
        client = self._redis_client()
        if client is None:
            return {}
        try:
            names = [_redis_key(key) for key in keys]
            many = client.mget_nonatomic if isinstance(client, RedisCluster) else client.mget
            values = cast(list[bytes | None], many(names))
        except _REDIS_ERRORS as exc:
            self._redis_failed(exc)
            return {}
        self._redis_succeeded()
        expected = self._expected_dim()
        found: dict[tuple[str, str], array[float]] = {}
        for key, value in zip(keys, values, strict=True):
            vector = _decode(value, expected)
            if vector is not None:
                found[key] = vector
        return found

    def _redis_set(self, entries: dict[tuple[str, str], array[float]]) -> None:
        client = self._redis_client()
        if client is None or not entries:
            return
        try:
            with client.pipeline(transaction=False) as pipe:
                for key, vector in entries.items():
                    pipe.set(_redis_key(key), _encode(vector), ex=self._ttl_s)
                pipe.execute()
        except _REDIS_ERRORS as exc:
            self._redis_failed(exc)
            return
        self._redis_succeeded()

    def _redis_failed(self, exc: BaseException) -> None:
        with self._lock:
            self._redis_down_until = time.monotonic() + self._retry_after_s
            was_ok, self._redis_ok = self._redis_ok, False
        # One warning per outage, not one per request.
        if was_ok:
            _log.warning(
                "embedding cache: Redis unavailable (%s); using the in-process cache only, "
                "retrying in %.0f s",
                exc,
                self._retry_after_s,
            )

    def _redis_succeeded(self) -> None:
        if self._redis_ok:
            return
        with self._lock:
            was_ok, self._redis_ok = self._redis_ok, True
        if not was_ok:
            _log.info("embedding cache: Redis available again")

    def _expected_dim(self) -> int | None:
        try:
            return self._inner.dim
        except RuntimeError:  # a remote embedder that has not seen an answer yet
            return None


def _digest(text: str) -> str:
    # surrogatepass: a lone surrogate (possible in text decoded from JSON) must not crash.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _redis_key(key: tuple[str, str]) -> str:
    name, digest = key
    return f"{REDIS_KEY_PREFIX}{name}:{digest}"


def _encode(vector: array[float]) -> bytes:
    if _BYTESWAP:
        vector = array("f", vector)
        vector.byteswap()
    return vector.tobytes()


def _decode(value: bytes | None, expected_dim: int | None) -> array[float] | None:
    """A cached vector, or None for a miss or an unusable value (then re-embedded)."""
    if not value or len(value) % 4:
        return None
    if expected_dim is not None and len(value) != 4 * expected_dim:
        return None
    vector = array("f")
    vector.frombytes(value)
    if _BYTESWAP:
        vector.byteswap()
    return vector
