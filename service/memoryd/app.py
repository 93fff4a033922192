"""The composition root: builds stores and the core from settings. Only `main` and tests
call it; every other module receives what it needs as arguments."""

from __future__ import annotations

import asyncio
import fcntl
import functools
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from memoryd.core.credentials import ApiKeys, Authenticator, ClientCertificates, JwtVerifier
from memoryd.core.engine import MemoryEngine
from memoryd.core.lifecycle.browse import Browser, LiveTier
from memoryd.core.lifecycle.cold_archive import ColdArchive
from memoryd.core.lifecycle.erasure import Erasure
from memoryd.core.lifecycle.maintenance import Lease, Maintenance, MaintenanceLoop
from memoryd.core.lifecycle.quotas import QuotaProfiles
from memoryd.core.lifecycle.write_behind import ConversationCopier
from memoryd.core.memory import term_space
from memoryd.core.memory.embedding_batcher import EmbeddingBatcher
from memoryd.core.memory.layout import upgrade_layout
from memoryd.core.memory.vector_memory import VectorMemory
from memoryd.core.models import MemoryRecord, Scope, Tier
from memoryd.core.observe import observed
from memoryd.core.rate_limits import RateLimits
from memoryd.core.retrieval import bm25
from memoryd.core.retrieval.temporal import TimeResolver
from memoryd.core.retrieval.token_budget import TokenCounter
from memoryd.core.sessions.extraction import ReplyLimits, SessionExtractor
from memoryd.core.sessions.sessions import Sessions
from memoryd.core.startup import StartupRefused
from memoryd.core.tiers.base import TierHandler
from memoryd.core.tiers.long_term import LongTermTier
from memoryd.core.tiers.registry import StoreFamily, TierDeps, build_tiers, served
from memoryd.settings import Settings
from memoryd.stores import embeddings as embedder_adapters
from memoryd.stores import hot as hot_adapters
from memoryd.stores import locks as lock_adapters
from memoryd.stores import queue as queue_adapters
from memoryd.stores import ratelimit as bucket_adapters
from memoryd.stores import usage as usage_adapters
from memoryd.stores import vectors as vector_adapters
from memoryd.stores.archive.jsonl_store import JsonlArchiveStore
from memoryd.stores.audit.jsonl_log import JsonlAuditLog
from memoryd.stores.audit.port import AuditLog
from memoryd.stores.backup.file_store import FileBackupStore
from memoryd.stores.backup.port import BackupStore
from memoryd.stores.embeddings.cache import CachedEmbedder
from memoryd.stores.embeddings.port import Embedder, EmbedderUnavailable
from memoryd.stores.extractor.port import StructuredChat
from memoryd.stores.hot.port import HotStore
from memoryd.stores.keys.file import KeysFile
from memoryd.stores.keys.port import KeysFileError
from memoryd.stores.queue.port import WriteBehindQueue
from memoryd.stores.ratelimit.port import TokenBuckets
from memoryd.stores.usage.port import UsageCounters
from memoryd.stores.vectors.port import IncompatibleStoreError, VectorStore, VectorStoreError
from memoryd.telemetry import Telemetry
from memoryd.telemetry.metrics import StorageGauge
from memoryd.telemetry.tracing import TracingUnavailable

log = logging.getLogger(__name__)

Probe = Callable[[], Awaitable[bool]]
Closer = Callable[[], Awaitable[None]]

# Health probe of each store family; a tier's health service follows its store's.
HOT_PROBE, VECTOR_PROBE = "memoryd.hot_store", "memoryd.vector_store"
_PROBE_OF = {StoreFamily.HOT: HOT_PROBE, StoreFamily.VECTORS: VECTOR_PROBE}


@dataclass
class App:
    """What a server serves, built from settings: the transport takes it as its
    `transport.server.Served` and never builds any of it."""

    engine: MemoryEngine
    copier: ConversationCopier
    vectors: VectorStore
    maintenance: Maintenance
    maintenance_loop: MaintenanceLoop
    # For `memoryd backup`/`restore`: who has memories, and where backups go.
    memory: VectorMemory
    backups: BackupStore
    # For the transport's identity and rate-limit concerns.
    authenticator: Authenticator
    rate_limits: RateLimits
    access_audit: AuditLog
    # Per user and tier usage (operations and tests read them; tiers keep them).
    counters: UsageCounters
    embedding: EmbeddingBatcher
    probes: dict[str, Probe] = field(default_factory=dict)
    closers: list[Closer] = field(default_factory=list)
    telemetry: Telemetry = field(default_factory=Telemetry)
    # The store each probe checks, as metrics name it (memoryd_store_up{store}).
    probe_stores: dict[str, str] = field(default_factory=dict)
    # Health services that follow probes: "memoryd.tier.<tier>" -> its store's probe.
    health_services: dict[str, list[str]] = field(default_factory=dict)
    clock: Callable[[], float] = time.time
    # At close, how long the write-behind copy may take to flush what is queued.
    flush_timeout_s: float = 5.0

    async def start(self) -> None:
        self.copier.start()
        self.maintenance_loop.start()

    def serving(self) -> None:
        """Work that waits until the server answers: the collection's keyword statistics
        (ADR 0601), counted in a background thread whose engine calls hold the GIL (at
        1M memories, started at the store's open it delayed SERVING by seconds)."""
        if isinstance(self.vectors, term_space.UserTermSpace):
            self.vectors.terms.start()

    async def close(self) -> None:
        await self.maintenance_loop.stop()
        await self.copier.stop()
        await self.copier.flush(self.flush_timeout_s)
        for close in reversed(self.closers):
            log.debug("closing %s", close)
            await close()


def store_names(settings: Settings) -> tuple[str, str, str]:
    """How metrics name the hot store, the vector store and the write-behind queue."""
    vectors = "qdrant" if settings.vectors.backend == "qdrant" else "qdrant_edge"
    if settings.redis_url:
        return "redis", vectors, "redis_stream"
    return "in_process", vectors, "file_queue"


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
        redis_cluster=settings.redis_cluster,
    )


def build_batcher(settings: Settings, embedder: Embedder) -> EmbeddingBatcher:
    cfg = settings.embedder  # its batching follows the provider (settings.EMBEDDER_DEFAULTS)
    return EmbeddingBatcher(
        embedder,
        max_batch=cfg.batch_max_size,
        max_wait_s=cfg.batch_max_wait_ms / 1000,
        concurrency=cfg.batch_concurrency,
        parallel_backlog=cfg.batch_parallel_backlog,
        background_nice=cfg.background_nice,
    )


def open_vector_store(settings: Settings, dim: int) -> VectorStore:
    try:
        return vector_adapters.ADAPTERS[vector_adapters.adapter_name(settings)](settings, dim)
    except IncompatibleStoreError as exc:
        raise StartupRefused(
            f"the vector store cannot be used with embedder dimension {dim}: {exc}. "
            "Run `memoryd reindex` to re-embed it with the configured embedder."
        ) from exc
    except VectorStoreError as exc:
        raise StartupRefused(f"the vector store cannot be opened: {exc}") from exc


def check_embedder_matches(
    store: VectorStore, embedder: Embedder, space: str = term_space.SHARED
) -> None:
    """Vectors of different embedders (or sparse encoders) must never be compared: refuse
    a store built with another one, and record ours in a new store (its term ids in
    `space`, ADR 0601)."""
    meta = store.read_meta() or {}
    built_with = meta.get("embedder")
    ours = {"embedder": embedder.name, "dim": embedder.dim, "sparse": bm25.ENCODER_NAME}
    if built_with is None:
        # A store written before stores recorded anything stays in the shared space.
        chosen = space if store.count() == 0 else term_space.SHARED
        store.write_meta({**meta, **ours, term_space.TERM_SPACE_KEY: chosen})
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
            store.write_meta({**meta, **ours, term_space.TERM_SPACE_KEY: space})
            return
        # Stores written before the sparse encoder was recorded hashed their own terms.
        written_by = meta.get("sparse", "memoryd's earlier hand-written BM25 encoder")
        raise StartupRefused(
            f"the vector store's keyword (BM25) vectors were written by {written_by}, but "
            f"this memoryd encodes them with {bm25.ENCODER_NAME}: keyword search would miss "
            "every stored memory. Run `memoryd reindex` to re-encode them (a Qdrant server "
            "collection: export it with the memoryd that wrote it, import into a new one)."
        )


def warm_up(embedder: Embedder) -> None:
    """Load the embedding model and dateparser's data now, so that no request pays for
    them (blocking; `memoryd serve` runs it while its start-up health process starts)."""
    try:
        embedder.warm()
    except EmbedderUnavailable as exc:
        raise StartupRefused(f"the embedder cannot be reached: {exc}") from exc
    TimeResolver().warm()  # dateparser's data is shared: the first timed query is quick


def open_vectors(settings: Settings, embedder: Embedder, warmed: bool = False) -> VectorStore:
    if not warmed:
        warm_up(embedder)
    started = time.monotonic()
    store = open_vector_store(settings, embedder.dim)
    # Most of a large store's start-up (8-10 s at 1M memories, ADR 0600): worth a line.
    log.info("vector store opened in %.1f s", time.monotonic() - started)
    try:
        check_embedder_matches(store, embedder, settings.vectors.term_space)
        upgrade_layout(store)
    except BaseException:
        store.close()
        raise
    return term_space.in_term_space(store, store.read_meta() or {})


def build_extractor(settings: Settings) -> StructuredChat | None:
    cfg = settings.extraction
    if not cfg.configured:
        return None
    from memoryd.stores.extractor.openai_chat import OpenAIChatExtractor

    return OpenAIChatExtractor(
        model=cfg.model,
        base_url=cfg.base_url,
        api_key=cfg.api_key.get_secret_value() if cfg.api_key is not None else None,
        timeout_s=cfg.timeout_seconds,
        max_retries=cfg.max_retries,
        max_concurrency=cfg.max_concurrency,
        temperature=cfg.temperature,
    )


def build_sessions(
    settings: Settings, tiers: dict[Tier, TierHandler], chat: StructuredChat | None
) -> Sessions | None:
    """Commands and EndSession, over the tiers the registry gives a session part (they
    need short-term and persona memory); the extractor is used when configured."""
    cfg = settings.extraction
    extractor = None
    if chat is not None:
        limits = ReplyLimits(
            min_confidence=cfg.min_confidence,
            max_key_bytes=settings.limits.max_key_bytes,
            max_content_bytes=settings.limits.max_content_bytes,
        )
        extractor = SessionExtractor(chat, limits, cfg.max_input_chars)
    return Sessions.wire(tiers, settings.sessions, settings.limits, extractor=extractor)


def build_buckets(settings: Settings) -> TokenBuckets:
    """Rate-limit buckets: in Redis (or a Redis Cluster) when configured, so every replica
    shares them."""
    return bucket_adapters.ADAPTERS[bucket_adapters.adapter_name(settings)](settings)


def build_lease(settings: Settings) -> tuple[Lease, Callable[[], Awaitable[None]]] | None:
    """The maintenance lease replicas on one Redis share, and how to close its client;
    None without Redis (a replica alone)."""
    if not settings.redis_url:
        return None
    import uuid

    from memoryd.stores.lease.redis_lease import RedisLease
    from memoryd.stores.redis_clients import open_async

    client = open_async(settings.redis_url, cluster=settings.redis_cluster)
    # Unique per process: two replicas with one instance_id must still not share it.
    holder = f"{settings.instance_id or socket.gethostname()}:{uuid.uuid4().hex[:12]}"
    lease = RedisLease(client, holder, ttl_s=settings.retention.maintenance_lease_seconds)
    return lease, client.aclose


def build_authenticator(settings: Settings) -> Authenticator:
    """The configured credentials; refuses to start on a missing or malformed one."""
    keys = tokens = certs = None
    try:
        if settings.auth.keys_file is not None:
            keys = ApiKeys(KeysFile(settings.auth.keys_file))
            keys.check_readable()
        if settings.auth.jwt.enabled:
            tokens = JwtVerifier(settings.auth.jwt)
        if settings.tls.client_ca_file is not None:
            certs = ClientCertificates(settings.tls)
    except KeysFileError as exc:
        raise StartupRefused(
            f"the API keys file cannot be used: {exc} (create one with `memoryd keys create`)"
        ) from exc
    except (OSError, ValueError) as exc:
        raise StartupRefused(f"the credential settings cannot be used: {exc}") from exc
    return Authenticator(
        default_tenant=settings.auth.default_tenant, keys=keys, tokens=tokens, certs=certs
    )


def build_queue(settings: Settings) -> WriteBehindQueue:
    return queue_adapters.ADAPTERS[queue_adapters.adapter_name(settings)](settings)


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
    telemetry: Telemetry | None = None,
    warmed: bool = False,
) -> App:
    """Open every store (off the event loop where it blocks) and wire the core.
    `warmed`: `warm_up(embedder)` was done already."""
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        lock = DataDirLock(settings.data_dir) if uses_embedded_stores(settings) else None
    except OSError as exc:
        raise StartupRefused(
            f"the data directory {settings.data_dir} (MEMORYD_DATA_DIR) cannot be used: "
            f"{exc.strerror or exc}"
        ) from exc
    try:
        app = await _build_app(settings, clock, embedder, telemetry, warmed)
    except BaseException:
        if lock is not None:
            await lock.release()
        raise
    if lock is not None:
        app.closers.insert(0, lock.release)  # closers run in reverse: the lock goes last
    return app


async def _build_app(
    settings: Settings,
    clock: Callable[[], float],
    embedder: Embedder | None,
    telemetry: Telemetry | None,
    warmed: bool,
) -> App:
    authenticator = build_authenticator(settings)  # a bad credential file refuses first
    if telemetry is None:
        try:
            telemetry = Telemetry.from_settings(settings)
        except TracingUnavailable as exc:
            raise StartupRefused(str(exc)) from exc
    observer = telemetry.observer
    embedder = embedder or build_embedder(settings)
    if isinstance(embedder, CachedEmbedder):
        telemetry.metrics.watch_embedding_cache(embedder.stats)
    vectors = await asyncio.to_thread(open_vectors, settings, embedder, warmed)
    hot_name, vectors_name, queue_name = store_names(settings)
    # Only the calls made for requests and background work are timed, not the probes.
    hot = observed(build_hot_store(settings), hot_name, observer, skip=("ping", "close"))
    queue = observed(
        build_queue(settings),
        queue_name,
        observer,
        skip=("take", "pending", "oldest_put_at", "newest_id", "pending_through", "close"),
    )
    batcher = build_batcher(settings, embedder)
    memory = VectorMemory(
        observed(vectors, vectors_name, observer, skip=("healthy", "close", "generation")),
        batcher,
        settings.retrieval,
        clock,
        observer,
    )
    archive = ColdArchive(JsonlArchiveStore(settings.data_dir / "archive"), clock, observer)

    async def copy_message(scope: Scope, message: MemoryRecord) -> None:
        await copier.enqueue(scope, message)

    quotas = QuotaProfiles.of(settings)
    buckets = build_buckets(settings)
    counters = StorageGauge(
        usage_adapters.ADAPTERS[usage_adapters.adapter_name(settings)](settings),
        telemetry.metrics,  # memory_storage_bytes moves with the counters between surveys
    )
    locks = lock_adapters.ADAPTERS[lock_adapters.adapter_name(settings)](settings)
    deps = TierDeps(
        settings=settings,
        clock=clock,
        hot=hot,
        memory=memory,
        archive=archive,
        quotas=quotas,
        counters=counters,
        locks=locks,
        on_message=copy_message,
    )
    tiers = build_tiers(deps)
    long_term = tiers[Tier.LONG_TERM]
    assert isinstance(long_term, LongTermTier)  # the durable copies go there
    copier = ConversationCopier(queue, long_term, settings.write_behind, observer)
    backups = FileBackupStore(settings.data_dir / "backups")
    erasure = Erasure(
        tiers,
        JsonlAuditLog(settings.data_dir / "audit" / "erasures.jsonl"),
        clock,
        backups=backups,
        # Only what was queued before the erasure: other users' Adds keep coming.
        flush=copier.copy_queued,
        observer=observer,
        # The journal without the copies just made; deletes persisted (docs/operations.md).
        compactions=(queue.compact, functools.partial(asyncio.to_thread, vectors.flush)),
    )
    chat = build_extractor(settings)
    directory = usage_adapters.DIRECTORY_ADAPTERS[usage_adapters.adapter_name(settings)](settings)
    # ListUsers reads each listed user's usage through the engine's own Usage (`engine` is
    # bound below, before any call).
    browser = Browser(
        directory,
        memory,
        lambda scope: engine.usage(scope, alerting=False),
        clock,
        list(tiers),
        backfill=usage_adapters.adapter_name(settings) == "in_process",
        live={t: h for t, h in tiers.items() if isinstance(h, LiveTier)},
    )
    engine = MemoryEngine(
        tiers,
        settings.limits,
        settings.retrieval,
        TokenCounter(),
        settings.usage,
        archive,
        erasure,
        sessions=build_sessions(settings, tiers, chat),
        observer=observer,
        browser=browser,
    )
    maintenance = Maintenance(memory, tiers, settings.retention)
    lease = build_lease(settings)

    async def maintain() -> None:
        await maintenance.run_once()
        await maintenance.survey()

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
            maintain,
            settings.retention.maintenance_interval_seconds,
            first=maintenance.survey,  # the storage metrics, without waiting an interval
            lease=lease[0] if lease else None,
        ),
        probes={
            HOT_PROBE: hot.ping,
            VECTOR_PROBE: vectors_up,
            "memoryd.write_behind": copier.healthy,
        },
        closers=[
            telemetry.close,
            batcher.close,  # closed in reverse: once nothing can embed any more
            close_vectors,
            hot.close,
            queue.close,
            *([lease[1]] if lease else []),
            *([chat.close] if chat else []),
            buckets.close,
            counters.close,
            directory.close,
            locks.close,
        ],
        memory=memory,
        backups=backups,
        flush_timeout_s=settings.grace_period_seconds,
        telemetry=telemetry,
        probe_stores={HOT_PROBE: hot_name, VECTOR_PROBE: vectors_name},
        health_services={f"memoryd.tier.{s.tier.value}": [_PROBE_OF[s.store]] for s in served()},
        authenticator=authenticator,
        rate_limits=RateLimits(buckets, quotas, clock),
        access_audit=JsonlAuditLog(settings.data_dir / "audit" / "access.jsonl"),
        counters=counters,
        clock=clock,
        embedding=batcher,
    )
