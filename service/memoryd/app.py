"""The composition root: builds stores and the core from settings. Only `main` and tests
call it; every other module receives what it needs as arguments."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from memoryd.core.engine import MemoryEngine
from memoryd.core.lifecycle.cold_archive import ColdArchive
from memoryd.core.lifecycle.erasure import Erasure
from memoryd.core.lifecycle.maintenance import Maintenance, MaintenanceLoop
from memoryd.core.lifecycle.quotas import QuotaProfiles
from memoryd.core.lifecycle.write_behind import ConversationCopier
from memoryd.core.memory.embedding_batcher import EmbeddingBatcher
from memoryd.core.memory.vector_memory import VectorMemory
from memoryd.core.models import MemoryRecord, Scope, Tier
from memoryd.core.retrieval import bm25
from memoryd.core.retrieval.token_budget import TokenCounter
from memoryd.core.tiers.long_term import LongTermTier
from memoryd.core.tiers.registry import TierDeps, build_tiers
from memoryd.settings import Settings
from memoryd.stores import embeddings as embedder_adapters
from memoryd.stores import hot as hot_adapters
from memoryd.stores import queue as queue_adapters
from memoryd.stores import vectors as vector_adapters
from memoryd.stores.archive.jsonl_store import JsonlArchiveStore
from memoryd.stores.audit.jsonl_log import JsonlAuditLog
from memoryd.stores.backup.file_store import FileBackupStore
from memoryd.stores.backup.port import BackupStore
from memoryd.stores.embeddings.cache import CachedEmbedder
from memoryd.stores.embeddings.port import Embedder, EmbedderUnavailable
from memoryd.stores.hot.port import HotStore
from memoryd.stores.queue.port import WriteBehindQueue
from memoryd.stores.vectors.port import IncompatibleStoreError, VectorStore

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
    embedding: EmbeddingBatcher | None = None

    async def start(self) -> None:
        self.copier.start()
        self.maintenance_loop.start()

    async def close(self) -> None:
        await self.maintenance_loop.stop()
        await self.copier.stop()
        for close in reversed(self.closers):
            log.debug("closing %s", close)
            await close()


# Each store comes from its port package's adapter registry, by the name the settings give.


def build_hot_store(settings: Settings) -> HotStore:
    return hot_adapters.ADAPTERS[hot_adapters.adapter_name(settings)](settings)


def build_embedder(settings: Settings) -> Embedder:
    cfg = settings.embedder
    return CachedEmbedder(
        embedder_adapters.ADAPTERS[embedder_adapters.adapter_name(settings)](settings),
        max_entries=cfg.cache_entries,
        redis_url=settings.redis_url,
        redis_ttl_s=cfg.cache_ttl_seconds,
    )


def build_batcher(settings: Settings, embedder: Embedder) -> EmbeddingBatcher:
    cfg = settings.embedder
    # A local model uses its threads' cores whole; a remote API hides its round trips best
    # with a few calls in flight.
    default_concurrency = 4 if cfg.provider == "openai" else 1
    return EmbeddingBatcher(
        embedder,
        max_batch=cfg.batch_max_size,
        max_wait_s=cfg.batch_max_wait_ms / 1000,
        concurrency=cfg.batch_concurrency or default_concurrency,
    )


def open_vector_store(settings: Settings, dim: int) -> VectorStore:
    try:
        return vector_adapters.ADAPTERS[vector_adapters.adapter_name(settings)](settings, dim)
    except IncompatibleStoreError as exc:
        raise StartupRefused(
            f"the vector store cannot be used with embedder dimension {dim}: {exc}. "
            "Run `memoryd reindex` to re-embed it with the configured embedder."
        ) from exc


def check_embedder_matches(store: VectorStore, embedder: Embedder) -> None:
    """Vectors of different embedders (or sparse encoders) must never be compared: refuse
    a store built with another one, and record ours in a new store."""
    meta = store.read_meta() or {}
    built_with = meta.get("embedder")
    ours = {"embedder": embedder.name, "dim": embedder.dim, "sparse": bm25.ENCODER_NAME}
    if built_with is None:
        store.write_meta({**meta, **ours})
        return
    if built_with != embedder.name or meta.get("dim") != embedder.dim:
        raise StartupRefused(
            f"the vector store was built with embedder {built_with!r} (dimension "
            f"{meta.get('dim')}), but the configured embedder is {embedder.name!r} (dimension "
            f"{embedder.dim}). Configure the original embedder, or run `memoryd reindex` to "
            "re-embed every memory with the new one."
        )
    if meta.get("sparse") != bm25.ENCODER_NAME:
        if store.count() == 0:  # nothing was encoded yet: just record our encoder
            store.write_meta({**meta, **ours})
            return
        # Stores written before the sparse encoder was recorded hashed their own terms.
        written_by = meta.get("sparse", "memoryd's earlier hand-written BM25 encoder")
        raise StartupRefused(
            f"the vector store's keyword (BM25) vectors were written by {written_by}, but "
            f"this memoryd encodes them with {bm25.ENCODER_NAME}: keyword search would miss "
            "every stored memory. Run `memoryd reindex` to re-encode them (a Qdrant server "
            "collection: export it with the memoryd that wrote it, import into a new one)."
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
    return queue_adapters.ADAPTERS[queue_adapters.adapter_name(settings)](settings)


async def build_app(
    settings: Settings,
    clock: Callable[[], float] = time.time,
    embedder: Embedder | None = None,
) -> App:
    """Open every store (off the event loop where it blocks) and wire the core."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    embedder = embedder or build_embedder(settings)
    vectors = await asyncio.to_thread(open_vectors, settings, embedder)
    hot = build_hot_store(settings)
    queue = build_queue(settings)
    batcher = build_batcher(settings, embedder)
    memory = VectorMemory(vectors, batcher, settings.retrieval, clock)
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
        probes={"memoryd.hot_store": hot.ping, "memoryd.vector_store": vectors_up},
        # Closed in reverse: the batcher last, once nothing can embed any more.
        closers=[batcher.close, close_vectors, hot.close, queue.close],
        memory=memory,
        backups=backups,
        embedding=batcher,
    )
