"""Prometheus metrics: their one list of definitions (docs/reference/metrics.md is made
from it, see `reference`), the core's `Observer` reporting into them, and the /metrics
HTTP listener.

Every metric lives in the `CollectorRegistry` a `Metrics` is given, never in the
library's global one, so each server (and each test) has its own. Label values come from
closed sets (method names, status codes, tiers, store and operation names, reasons): no
label ever carries a user id, a key or content.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Literal
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from memoryd.core.models import Tier
from memoryd.stores.embeddings.port import CacheStats
from memoryd.stores.usage.port import (
    Correction,
    Counted,
    CounterKey,
    Reservation,
    Snapshot,
    UsageCounters,
)

Kind = Literal["counter", "gauge", "histogram"]

# 100 µs .. 10 s: an in-process hot store answers in microseconds, a cold embedding in
# seconds.
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
BATCH_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0)
# RT-005's retention ages: a day, a week, a month, the 90/180/365-day archive ages, more.
AGE_DAYS_BUCKETS = (1.0, 7.0, 30.0, 90.0, 180.0, 365.0, 730.0, 1825.0)


@dataclass(frozen=True)
class MetricSpec:
    name: str  # as exported; counters end in _total
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    # How the value is produced, for the reference page.
    notes: str = ""


RPC_REQUESTS = MetricSpec(
    "memoryd_rpc_requests_total",
    "counter",
    "MemoryService calls finished, by method and gRPC status code.",
    ("method", "code"),
)
RPC_DURATION = MetricSpec(
    "memoryd_rpc_duration_seconds",
    "histogram",
    "Time to serve a MemoryService call (a streaming call: its whole stream).",
    ("method",),
    LATENCY_BUCKETS,
)
RPC_IN_FLIGHT = MetricSpec(
    "memoryd_rpc_in_flight",
    "gauge",
    "MemoryService calls being served now.",
    ("method",),
)
EMBEDDING_DURATION = MetricSpec(
    "memoryd_embedding_duration_seconds",
    "histogram",
    "Time of one embedding call, cache lookups included.",
    (),
    LATENCY_BUCKETS,
)
EMBEDDING_BATCH = MetricSpec(
    "memoryd_embedding_batch_size",
    "histogram",
    "Texts per embedding call.",
    (),
    BATCH_BUCKETS,
)
EMBEDDING_CACHE_HITS = MetricSpec(
    "memoryd_embedding_cache_hits_total",
    "counter",
    "Texts whose embedding came from the cache, by cache layer (memory, redis).",
    ("layer",),
    notes="Read from the embedding cache's own counters at scrape time.",
)
EMBEDDING_CACHE_MISSES = MetricSpec(
    "memoryd_embedding_cache_misses_total",
    "counter",
    "Texts the embedding model had to embed (in no cache layer).",
    notes="Read from the embedding cache's own counters at scrape time.",
)
EMBEDDING_CACHE_ENTRIES = MetricSpec(
    "memoryd_embedding_cache_entries",
    "gauge",
    "Embeddings held in the in-process cache.",
    notes="Read at scrape time.",
)
STORE_CALL_DURATION = MetricSpec(
    "memoryd_store_call_duration_seconds",
    "histogram",
    "Time of one call of a store adapter, by store and operation (the adapter's method).",
    ("store", "operation"),
    LATENCY_BUCKETS,
    notes="store: redis or in_process (hot tiers), qdrant_edge or qdrant (vector tiers), "
    "redis_stream or file_queue (write-behind queue; put and ack only).",
)
STORE_CALL_ERRORS = MetricSpec(
    "memoryd_store_call_errors_total",
    "counter",
    "Store adapter calls that raised, by store and operation.",
    ("store", "operation"),
)
STORE_UP = MetricSpec(
    "memoryd_store_up",
    "gauge",
    "1 when the store answered its last health probe, else 0.",
    ("store",),
    notes="Set by the health monitor, which probes every store every 2 s.",
)
QUEUE_BACKLOG = MetricSpec(
    "memoryd_queue_backlog",
    "gauge",
    "Entries of a queue not yet done (write_behind: conversation messages waiting for "
    "their long-term copy).",
    ("queue",),
    notes="Sampled by the queue's worker about once a second.",
)
QUEUE_OLDEST_AGE = MetricSpec(
    "memoryd_queue_oldest_age_seconds",
    "gauge",
    "How long the oldest entry not yet done has waited (0 when the queue is empty).",
    ("queue",),
    notes="Sampled with memoryd_queue_backlog.",
)
QUOTA_ALERTS = MetricSpec(
    "memoryd_quota_alerts_total",
    "counter",
    "Quota alerts raised, by tier and level: warning and critical when a Usage report "
    "finds a user past usage.warning_percent / usage.critical_percent (95 % by default); "
    "exceeded when a write is refused with RESOURCE_EXHAUSTED.",
    ("tier", "level"),
)
MEMORY_ARCHIVED = MetricSpec(
    "memory_archived_total",
    "counter",
    "Memories moved to the cold archive (RT-005), by memory type (tier).",
    ("memory_type",),
    notes='Named as in RT-005 "Monitoring". Counts maintenance runs and Prune '
    "ARCHIVE_OLDER_THAN alike.",
)
MEMORY_DELETED = MetricSpec(
    "memory_deleted_total",
    "counter",
    "Memories removed (RT-005), by memory type (tier) and reason.",
    ("memory_type", "reason"),
    notes="Named as in RT-005. reason: delete (Delete RPC; long-term deletes are soft and "
    "counted again as purge when maintenance removes them), purge (maintenance: expired or "
    "soft-deleted), erasure (a user erased), quota (auto-prune at a full quota), evicted "
    "(working memory LRU), prune_<strategy> (Prune RPC: prune_expired, prune_oldest_percent, "
    "prune_by_filter, prune_all).",
)
MEMORY_STORAGE = MetricSpec(
    "memory_storage_bytes",
    "gauge",
    "Content bytes stored, over all users, by memory type (vector tiers).",
    ("memory_type",),
    notes="Named as in RT-005. Set by a storage survey at server start and after each "
    "maintenance run, and moved between surveys by every change the usage counters count "
    "on this replica (a write that lands, a removal, a maintenance correction), so a bulk "
    "import shows at once; a deletion counts when it is made, before maintenance purges "
    "it. With several replicas each one's figure holds its own changes since its last "
    "survey (the maintenance lease holder surveys every run). Hot tiers are bounded per "
    "scope and not surveyed.",
)
MEMORY_AGE = MetricSpec(
    "memory_age_days",
    "histogram",
    "Ages in days of stored memories, by memory type (vector tiers).",
    ("memory_type",),
    AGE_DAYS_BUCKETS,
    notes="Named as in RT-005. Each storage survey observes every stored memory once, so "
    "increase(memory_age_days_bucket[w]) over a window holding one survey is the age "
    "distribution at that survey.",
)

SPECS: tuple[MetricSpec, ...] = (
    RPC_REQUESTS,
    RPC_DURATION,
    RPC_IN_FLIGHT,
    EMBEDDING_DURATION,
    EMBEDDING_BATCH,
    EMBEDDING_CACHE_HITS,
    EMBEDDING_CACHE_MISSES,
    EMBEDDING_CACHE_ENTRIES,
    STORE_CALL_DURATION,
    STORE_CALL_ERRORS,
    STORE_UP,
    QUEUE_BACKLOG,
    QUEUE_OLDEST_AGE,
    QUOTA_ALERTS,
    MEMORY_ARCHIVED,
    MEMORY_DELETED,
    MEMORY_STORAGE,
    MEMORY_AGE,
)

# Label names any metric may have: none of them names a user, a key or content.
ALLOWED_LABELS = frozenset(
    {"method", "code", "layer", "store", "operation", "queue", "tier", "level"}
    | {"memory_type", "reason"}
)


def _counter(spec: MetricSpec, registry: CollectorRegistry) -> Counter:
    return Counter(spec.name, spec.help, spec.labels, registry=registry)


def _gauge(spec: MetricSpec, registry: CollectorRegistry) -> Gauge:
    return Gauge(spec.name, spec.help, spec.labels, registry=registry)


def _histogram(spec: MetricSpec, registry: CollectorRegistry) -> Histogram:
    return Histogram(spec.name, spec.help, spec.labels, registry=registry, buckets=spec.buckets)


class _EmbeddingCacheCollector(Collector):
    """The embedding cache counts its hits itself; they are read when scraped."""

    def __init__(self) -> None:
        self.stats: Callable[[], CacheStats] | None = None

    def collect(self) -> Iterable[Metric]:
        hits = CounterMetricFamily(
            _family(EMBEDDING_CACHE_HITS), EMBEDDING_CACHE_HITS.help, labels=["layer"]
        )
        misses = CounterMetricFamily(_family(EMBEDDING_CACHE_MISSES), EMBEDDING_CACHE_MISSES.help)
        entries = GaugeMetricFamily(EMBEDDING_CACHE_ENTRIES.name, EMBEDDING_CACHE_ENTRIES.help)
        if self.stats is not None:
            stats = self.stats()
            hits.add_metric(["memory"], stats.hits)
            hits.add_metric(["redis"], stats.redis_hits)
            misses.add_metric([], stats.misses)
            entries.add_metric([], stats.entries)
        return [hits, misses, entries]


def _family(spec: MetricSpec) -> str:
    return spec.name.removesuffix("_total")


class Metrics:
    """Every memoryd metric, registered in `registry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.rpc_requests = _counter(RPC_REQUESTS, r)
        self.rpc_duration = _histogram(RPC_DURATION, r)
        self.rpc_in_flight = _gauge(RPC_IN_FLIGHT, r)
        self.embedding_duration = _histogram(EMBEDDING_DURATION, r)
        self.embedding_batch = _histogram(EMBEDDING_BATCH, r)
        self.store_call_duration = _histogram(STORE_CALL_DURATION, r)
        self.store_call_errors = _counter(STORE_CALL_ERRORS, r)
        self.store_up = _gauge(STORE_UP, r)
        self.queue_backlog = _gauge(QUEUE_BACKLOG, r)
        self.queue_oldest_age = _gauge(QUEUE_OLDEST_AGE, r)
        self.quota_alerts = _counter(QUOTA_ALERTS, r)
        self.memory_archived = _counter(MEMORY_ARCHIVED, r)
        self.memory_deleted = _counter(MEMORY_DELETED, r)
        self.memory_storage = _gauge(MEMORY_STORAGE, r)
        self.memory_age = _histogram(MEMORY_AGE, r)
        self._cache = _EmbeddingCacheCollector()
        r.register(self._cache)

    def watch_embedding_cache(self, stats: Callable[[], CacheStats]) -> None:
        """Export the hits and misses the embedding cache counts (read when scraped)."""
        self._cache.stats = stats

    def set_store_up(self, store: str, up: bool) -> None:
        self.store_up.labels(store).set(1 if up else 0)


class StorageGauge:
    """The usage counters (a `UsageCounters` adapter), also moving `memory_storage_bytes`
    by every byte they count as landed or removed, so the gauge is live between storage
    surveys instead of holding the last survey's figure for an hour."""

    def __init__(self, counters: UsageCounters, metrics: Metrics) -> None:
        self.counters = counters
        self._gauge = metrics.memory_storage

    def _move(self, key: CounterKey, size: int) -> None:
        if size:  # counters of items alone (the entity tier's) move no bytes
            # Per-agent counters are named "<tier>/<agent_id>".
            self._gauge.labels(key.tier.partition("/")[0]).inc(size)

    async def get(self, key: CounterKey) -> Counted | None:
        return await self.counters.get(key)

    async def init(self, key: CounterKey, held: Counted) -> bool:
        # A counter rebuilt from the store: what it holds is stored already (surveyed).
        return await self.counters.init(key, held)

    async def reserve(
        self, key: CounterKey, count: int, size: int, max_count: int, max_bytes: int
    ) -> Reservation:
        return await self.counters.reserve(key, count, size, max_count, max_bytes)

    async def settle(self, key: CounterKey, count: int, size: int, ids: Sequence[str]) -> None:
        await self.counters.settle(key, count, size, ids)
        self._move(key, size)

    async def release(self, key: CounterKey, count: int, size: int) -> None:
        await self.counters.release(key, count, size)  # never landed: never added

    async def forget(self, key: CounterKey, removed: Mapping[str, int]) -> Counted:
        uncounted = await self.counters.forget(key, removed)
        self._move(key, -uncounted.bytes)
        return uncounted

    async def snapshot(self, key: CounterKey) -> Snapshot | None:
        return await self.counters.snapshot(key)

    async def correct(self, key: CounterKey, version: int, held: Counted) -> Correction | None:
        done = await self.counters.correct(key, version, held)
        if done is not None:
            self._move(key, done.after.bytes - done.before.bytes)
        return done

    async def drop(self, key: CounterKey) -> None:
        await self.counters.drop(key)

    async def close(self) -> None:
        await self.counters.close()


class _StoreCall:
    """Times one store call (a plain class: cheaper than a generator context manager on
    every hot-store call)."""

    __slots__ = ("_duration", "_errors", "_labels", "_started")

    def __init__(self, duration: Histogram, errors: Counter, labels: tuple[str, str]) -> None:
        self._duration = duration
        self._errors = errors  # labelled only on an error: no zero series per operation
        self._labels = labels
        self._started = 0.0

    def __enter__(self) -> None:
        self._started = time.perf_counter()

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is not None:
            self._errors.labels(*self._labels).inc()
        self._duration.observe(time.perf_counter() - self._started)


class PrometheusObserver:
    """The core's reports, as metrics."""

    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics
        self._store_durations: dict[tuple[str, str], Histogram] = {}

    @contextmanager
    def embedding(self, batch_size: int) -> Iterator[None]:
        self._m.embedding_batch.observe(batch_size)
        with self._m.embedding_duration.time():
            yield

    def store_call(self, store: str, operation: str) -> AbstractContextManager[None]:
        key = (store, operation)
        duration = self._store_durations.get(key)
        if duration is None:  # `labels` validates and locks: once per store operation
            duration = self._store_durations[key] = self._m.store_call_duration.labels(*key)
        return _StoreCall(duration, self._m.store_call_errors, key)

    def fusion(self, stage: str) -> AbstractContextManager[None]:
        return nullcontext()  # traced only: it is part of the RPC's time

    def quota_alert(self, tier: Tier, level: str) -> None:
        self._m.quota_alerts.labels(tier.value, level).inc()

    def archived(self, tier: Tier, count: int) -> None:
        if count:
            self._m.memory_archived.labels(tier.value).inc(count)

    def deleted(self, tier: Tier, reason: str, count: int) -> None:
        if count:
            self._m.memory_deleted.labels(tier.value, reason).inc(count)

    def stored_bytes(self, tier: Tier, size: int) -> None:
        self._m.memory_storage.labels(tier.value).set(size)

    def ages(self, tier: Tier, days: Sequence[float]) -> None:
        histogram = self._m.memory_age.labels(tier.value)
        for d in days:
            histogram.observe(d)

    def backlog(self, queue: str, pending: int, oldest_age_s: float) -> None:
        self._m.queue_backlog.labels(queue).set(pending)
        self._m.queue_oldest_age.labels(queue).set(oldest_age_s)


def split_listen(listen: str) -> tuple[str, int]:
    """'host:port' (or '[v6]:port') as (host, port)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"metrics.listen must be host:port, not {listen!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


class MetricsListener:
    """Serves /metrics of a registry over HTTP, in a thread of its own."""

    def __init__(self, registry: CollectorRegistry, listen: str) -> None:
        self._registry = registry
        self._host, self._port = split_listen(listen)
        self._server: WSGIServer | None = None
        self.port = 0

    def start(self) -> int:
        self._server, _ = start_http_server(self._port, addr=self._host, registry=self._registry)
        self.port = int(self._server.server_port)
        return self.port

    def stop(self) -> None:
        """Stops serving without waiting: the serving thread notices a shutdown at its next
        poll, up to half a second later, a wait that would block the event loop (and that
        every test's server paid, ~6 minutes of a suite run). A thread of its own shuts it
        down and closes the socket."""
        server, self._server = self._server, None
        if server is None:
            return

        def close() -> None:
            server.shutdown()
            server.server_close()

        threading.Thread(target=close, name="metrics-stop", daemon=True).start()


def reference() -> str:
    """docs/reference/metrics.md, made from SPECS (tests/unit/test_metrics_reference.py
    keeps the committed page in step)."""
    lines = [
        "# Metrics reference",
        "",
        "<!-- Generated from service/memoryd/telemetry/metrics.py by",
        "     `make docs` (scripts/gen_docs.py). Do not edit. -->",
        "",
        "memoryd serves these on `http://<metrics.listen>/metrics` in the Prometheus text",
        "format (`MEMORYD_METRICS__LISTEN`, default `127.0.0.1:9464`; empty turns it off).",
        "No label carries a user id, a key or content: every label value comes from a",
        "closed set (method names, status codes, tiers, store and operation names, reasons).",
        "",
        "| Metric | Type | Labels | Meaning |",
        "| --- | --- | --- | --- |",
    ]
    for spec in SPECS:
        labels = ", ".join(f"`{label}`" for label in spec.labels) or "—"
        meaning = spec.help
        if spec.buckets:
            meaning += " Buckets: " + ", ".join(f"{b:g}" for b in spec.buckets) + "."
        if spec.notes:
            meaning += " " + spec.notes
        lines.append(f"| `{spec.name}` | {spec.kind} | {labels} | {meaning} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(reference(), end="")
