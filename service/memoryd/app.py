"""The composition root: builds stores and the core from settings. Only `main` and tests
call it; every other module receives what it needs as arguments."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import redis.asyncio as aioredis

from memoryd.core.engine import MemoryEngine
from memoryd.core.lifecycle.cold_archive import ColdArchive
from memoryd.core.lifecycle.erasure import Erasure
from memoryd.core.lifecycle.maintenance import Maintenance, MaintenanceLoop
from memoryd.core.lifecycle.quotas import QuotaProfiles
from memoryd.core.lifecycle.write_behind import ConversationCopier
from memoryd.core.memory.vector_memory import VectorMemory
from memoryd.core.models import MemoryRecord, Scope, Tier
from memoryd.core.retrieval.token_budget import TokenCounter
from memoryd.core.tiers.long_term import LongTermTier
from memoryd.core.tiers.registry import TierDeps, build_tiers
from memoryd.settings import Settings
from memoryd.stores.archive.jsonl_store import JsonlArchiveStore
from memoryd.stores.audit.jsonl_log import JsonlAuditLog
from memoryd.stores.backup.file_store import FileBackupStore
from memoryd.stores.backup.port import BackupStore
from memoryd.stores.embeddings.cache import CachedEmbedder
from memoryd.stores.embeddings.port import Embedder, EmbedderUnavailable
from memoryd.stores.hot.memory_store import InProcessHotStore
from memoryd.stores.hot.port import HotStore
from memoryd.stores.hot.redis_store import RedisHotStore
from memoryd.stores.queue.file_queue import FileQueue
from memoryd.stores.queue.port import WriteBehindQueue
from memoryd.stores.queue.redis_stream import RedisStreamQueue
from memoryd.stores.vectors.port import IncompatibleStoreError, VectorStore, VectorStoreError

log = logging.getLogger(__name__)

Probe = Callable[[], Awaitable[bool]]
Closer = Callable[[], Awaitable[None]]


class StartupRefused(Exception):
    """The server must not start, for the reason given (shown to the operator as is)."""


@dataclass
class App:
    engine: MemoryEngine
    copier: ConversationCopier
    vectors: VectorStore
    maintenance: Maintenance
    maintenance_loop: MaintenanceLoop
    probes: dict[str, Probe] = field(default_factory=dict)
    closers: list[Closer] = field(default_factory=list)
    # For `memoryd backup`/`restore`: who has memories, and where backups go.
    memory: VectorMemory | None = None
    backups: BackupStore | None = None

    async def start(self) -> None:
        self.copier.start()
        self.maintenance_loop.start()

    async def close(self) -> None:
        await self.maintenance_loop.stop()
        await self.copier.stop()
        for close in reversed(self.closers):
            log.debug("closing %s", close)
            await close()


def build_hot_store(settings: Settings) -> HotStore:
    if settings.redis_url:
        return RedisHotStore(settings.redis_url)
    return InProcessHotStore()


def build_embedder(settings: Settings) -> Embedder:
    cfg = settings.embedder
    inner: Embedder
    if cfg.provider == "openai":
        from memoryd.stores.embeddings.openai_embedder import OpenAIEmbedder

        inner = OpenAIEmbedder(
            api_key=cfg.openai_api_key,
            model=cfg.openai_model,
            base_url=cfg.openai_base_url,
            dimensions=cfg.openai_dimensions,
            timeout_s=cfg.openai_timeout_seconds,
        )
    else:
        from memoryd.stores.embeddings.minilm import MiniLMEmbedder

        inner = MiniLMEmbedder()
    return CachedEmbedder(
        inner,
        max_entries=cfg.cache_entries,
        redis_url=settings.redis_url,
        redis_ttl_s=cfg.cache_ttl_seconds,
    )


def open_vector_store(settings: Settings, dim: int) -> VectorStore:
    cfg = settings.vectors
    try:
        if cfg.backend == "qdrant":
            from memoryd.stores.vectors.qdrant_server_store import QdrantServerVectorStore

            return QdrantServerVectorStore(
                url=cfg.qdrant_url,
                api_key=cfg.qdrant_api_key,
                prefer_grpc=cfg.qdrant_prefer_grpc,
                collection=cfg.collection,
                dim=dim,
                location=cfg.qdrant_location,
            )
        from memoryd.stores.vectors.edge_store import EdgeVectorStore

        return EdgeVectorStore(settings.data_dir / "vectors", dim=dim, collection=cfg.collection)
    except IncompatibleStoreError as exc:
        raise StartupRefused(
            f"the vector store cannot be used with embedder dimension {dim}: {exc}. "
            "Run `memoryd reindex` to re-embed it with the configured embedder."
        ) from exc
    except VectorStoreError as exc:
        raise StartupRefused(f"the vector store cannot be opened: {exc}") from exc


def check_embedder_matches(store: VectorStore, embedder: Embedder) -> None:
    """Vectors of different embedders must never be compared: refuse a store built with
    another one, and record ours in a new store."""
    meta = store.read_meta() or {}
    built_with = meta.get("embedder")
    if built_with is None:
        store.write_meta({**meta, "embedder": embedder.name, "dim": embedder.dim})
        return
    if built_with != embedder.name or meta.get("dim") != embedder.dim:
        raise StartupRefused(
            f"the vector store was built with embedder {built_with!r} (dimension "
            f"{meta.get('dim')}), but the configured embedder is {embedder.name!r} (dimension "
            f"{embedder.dim}). Configure the original embedder, or run `memoryd reindex` to "
            "re-embed every memory with the new one."
        )


def open_vectors(settings: Settings, embedder: Embedder) -> VectorStore:
    try:
        embedder.warm()  # loads the model now, so no request pays for it
    except EmbedderUnavailable as exc:
        raise StartupRefused(f"the embedder cannot be reached: {exc}") from exc
    store = open_vector_store(settings, embedder.dim)
    try:
        check_embedder_matches(store, embedder)
    except StartupRefused:
        store.close()
        raise
    return store


def build_queue(settings: Settings) -> WriteBehindQueue:
    if settings.redis_url:
        consumer = settings.instance_id or socket.gethostname()
        return RedisStreamQueue(aioredis.Redis.from_url(settings.redis_url), consumer)
    return FileQueue(settings.data_dir / "queue")


class DataDirLock:
    """The embedded stores (qdrant-edge, the journal queue) are one process's: a second
    memoryd on the same data directory is refused at once, in one line, before it loads
    anything. An advisory lock (flock) on `<data_dir>/memoryd.lock`, dropped by the kernel
    when the process ends however it ends."""

    def __init__(self, data_dir: Path) -> None:
        path = data_dir / "memoryd.lock"
        self._file: IO[str] | None = path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip()
            self._file.close()
            self._file = None
            raise StartupRefused(
                f"the data directory {data_dir} is in use by another memoryd"
                f"{f' (pid {holder})' if holder else ''}: stop it first, or give this one "
                "its own MEMORYD_DATA_DIR"
            ) from None
        self._file.truncate(0)
        self._file.write(f"{os.getpid()}\n")
        self._file.flush()

    async def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the file drops the lock
            self._file = None


def uses_embedded_stores(settings: Settings) -> bool:
    return settings.vectors.backend == "edge" or not settings.redis_url


async def build_app(
    settings: Settings,
    clock: Callable[[], float] = time.time,
    embedder: Embedder | None = None,
) -> App:
    """Open every store (off the event loop where it blocks) and wire the core."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    lock = DataDirLock(settings.data_dir) if uses_embedded_stores(settings) else None
    try:
        app = await _build_app(settings, clock, embedder)
    except BaseException:
        if lock is not None:
            await lock.release()
        raise
    if lock is not None:
        app.closers.append(lock.release)
    return app


async def _build_app(
    settings: Settings, clock: Callable[[], float], embedder: Embedder | None
) -> App:
    embedder = embedder or build_embedder(settings)
    vectors = await asyncio.to_thread(open_vectors, settings, embedder)
    hot = build_hot_store(settings)
    queue = build_queue(settings)
    memory = VectorMemory(vectors, embedder, settings.retrieval, clock)
    archive = ColdArchive(JsonlArchiveStore(settings.data_dir / "archive"), clock)

    async def copy_message(scope: Scope, message: MemoryRecord) -> None:
        await copier.enqueue(scope, message)

    deps = TierDeps(
        settings=settings,
        clock=clock,
        hot=hot,
        memory=memory,
        archive=archive,
        quotas=QuotaProfiles(settings.quotas, settings.long_term),
        on_message=copy_message,
    )
    tiers = build_tiers(deps)
    long_term = tiers[Tier.LONG_TERM]
    assert isinstance(long_term, LongTermTier)  # the durable copies go there
    copier = ConversationCopier(queue, long_term, settings.write_behind)
    backups = FileBackupStore(settings.data_dir / "backups")
    erasure = Erasure(
        tiers,
        JsonlAuditLog(settings.data_dir / "audit" / "erasures.jsonl"),
        clock,
        backups=backups,
        flush=copier.drain,
    )
    engine = MemoryEngine(
        tiers,
        settings.limits,
        settings.retrieval,
        TokenCounter(),
        settings.usage,
        archive,
        erasure,
    )
    maintenance = Maintenance(memory, tiers, settings.retention)

    async def vectors_up() -> bool:
        return await asyncio.to_thread(vectors.healthy)

    async def close_vectors() -> None:
        await asyncio.to_thread(vectors.close)

    return App(
        engine=engine,
        copier=copier,
        vectors=vectors,
        maintenance=maintenance,
        maintenance_loop=MaintenanceLoop(
            maintenance.run_once, settings.retention.maintenance_interval_seconds
        ),
        probes={
            "memoryd.hot_store": hot.ping,
            "memoryd.vector_store": vectors_up,
            "memoryd.write_behind": copier.healthy,
        },
        closers=[close_vectors, hot.close, queue.close],
        memory=memory,
        backups=backups,
    )
