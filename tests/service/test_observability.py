"""What an operator sees: /metrics, request ids, one JSON log line per call, the retrieval
log, retention and queue metrics, store health, traces."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memoryd.core.observe import text_sha256
from memoryd.settings import MetricsSettings
from memoryd.telemetry.metrics import ALLOWED_LABELS, LATENCY_BUCKETS
from memoryd.transport.logs import LogFormat, configure_logging
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.redis_server import RedisServer
from tests.support.rpc import rpc_error, scope
from tests.support.scrape import Scrape, scrape

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class LogLines:
    """Everything logged while the fixture is active, as written (JSON lines)."""

    def __init__(self, stream: io.StringIO) -> None:
        self._stream = stream

    @property
    def text(self) -> str:
        return self._stream.getvalue()

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text.splitlines() if line.strip()]

    def events(self, event: str) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("event") == event]


@pytest.fixture
def logs() -> Iterator[LogLines]:
    """The server's log configuration at INFO, writing JSON into a buffer."""
    root = logging.getLogger()
    level = root.level
    stream = io.StringIO()
    handler = configure_logging("INFO", "json", stream)
    yield LogLines(stream)
    root.removeHandler(handler)
    root.setLevel(level)


async def metrics_of(s: RunningServer) -> Scrape:
    return await scrape(s.server.metrics_port)


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float = 20.0) -> bool:
    """Polls `check` until it holds or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.05)
    return False


async def _counted(s: RunningServer, method: str, code: str) -> bool:
    m = await metrics_of(s)
    return m.value("memoryd_rpc_requests_total", method=method, code=code) > 0


async def _logged(logs: LogLines, event: str, rid: str) -> bool:
    return any(r.get("request_id") == rid for r in logs.events(event))


def request_id_of(call_metadata: Any) -> str:
    metadata: dict[str, str] = dict(call_metadata or ())
    return metadata.get("x-request-id", "")


# ---------------------------------------------------------------------- metrics


async def test_metrics_count_each_call_by_method_and_status_code(memoryd: RunningServer) -> None:
    sc = scope("u-metrics", agent_id="a", task_id="t")
    await memoryd.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_WORKING, key="k", content="v"))
    await memoryd.stub.Retrieve(pb.RetrieveRequest(scope=sc))
    await rpc_error(memoryd.stub.Retrieve(pb.RetrieveRequest(scope=sc, top_k=100_000)))
    # An error reaches the caller as soon as it is raised; the server counts it just after.
    assert await _until(lambda: _counted(memoryd, "Retrieve", "INVALID_ARGUMENT"))
    m = await metrics_of(memoryd)
    assert m.value("memoryd_rpc_requests_total", method="Add", code="OK") == 1
    assert m.value("memoryd_rpc_requests_total", method="Retrieve", code="OK") == 1
    assert m.value("memoryd_rpc_requests_total", method="Retrieve", code="INVALID_ARGUMENT") == 1
    assert m.value("memoryd_rpc_duration_seconds_count", method="Retrieve") == 2
    assert m.value("memoryd_rpc_in_flight", method="Retrieve") == 0
    buckets = {
        float(s.labels["le"])
        for s in m.samples
        if s.name == "memoryd_rpc_duration_seconds_bucket" and s.labels["method"] == "Add"
    }
    assert buckets == {*LATENCY_BUCKETS, float("inf")}
    assert min(LATENCY_BUCKETS) == 0.0001 and max(LATENCY_BUCKETS) == 10.0


async def test_a_streaming_call_is_counted_once_when_its_stream_ends(
    memoryd: RunningServer,
) -> None:
    sc = scope("u-stream")
    replies = [r async for r in memoryd.stub.Export(pb.ExportRequest(scope=sc))]
    assert replies[-1].HasField("trailer")
    m = await metrics_of(memoryd)
    assert m.value("memoryd_rpc_requests_total", method="Export", code="OK") == 1


async def test_store_calls_and_embeddings_are_timed(
    start_server: ServerFactory, redis_server: RedisServer, user_id: str
) -> None:
    s = await start_server(redis_url=redis_server.url)
    sc = scope(user_id, agent_id="a", task_id="t")
    await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_WORKING, key="k", content="v"))
    await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_LONG_TERM, content="I like tea"))
    await s.stub.Retrieve(pb.RetrieveRequest(scope=sc, query="tea", tiers=[pb.TIER_LONG_TERM]))
    m = await metrics_of(s)
    put = "memoryd_store_call_duration_seconds_count"
    assert m.value(put, store="redis", operation="put_entry") >= 1
    assert m.value(put, store="qdrant_edge", operation="upsert") >= 1
    assert m.value(put, store="qdrant_edge", operation="search") >= 1
    assert m.value("memoryd_embedding_duration_seconds_count") >= 2
    assert m.value("memoryd_embedding_batch_size_bucket", le="1.0") >= 2
    cache = m.value("memoryd_embedding_cache_hits_total", layer="memory") + m.value(
        "memoryd_embedding_cache_misses_total"
    )
    assert cache >= 2
    assert m.value("memoryd_store_up", store="redis") == 1
    assert m.value("memoryd_store_up", store="qdrant_edge") == 1


async def test_no_label_carries_a_user_id_a_key_or_content(
    memoryd: RunningServer,
) -> None:
    secrets = ["user-zq81secret", "key-zq81secret", "content zq81secret", "query zq81secret"]
    sc = scope(secrets[0], agent_id="agent-zq81secret", task_id="t", session_id="s")
    await memoryd.stub.Add(
        pb.AddRequest(scope=sc, tier=pb.TIER_WORKING, key=secrets[1], content=secrets[2])
    )
    await memoryd.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_SHORT_TERM, content=secrets[2]))
    await memoryd.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_LONG_TERM, content=secrets[2]))
    await memoryd.stub.Retrieve(pb.RetrieveRequest(scope=sc, query=secrets[3]))
    await memoryd.stub.Get(pb.GetRequest(scope=sc, tier=pb.TIER_WORKING, keys=[secrets[1]]))
    await memoryd.stub.Delete(pb.DeleteRequest(scope=sc, tier=pb.TIER_WORKING, keys=[secrets[1]]))
    await memoryd.app.copier.drain()
    m = await metrics_of(memoryd)
    assert "zq81secret" not in m.text
    assert len(m.samples) > 50
    for sample in m.samples:
        assert set(sample.labels) - {"le"} <= ALLOWED_LABELS, sample


async def test_quota_alerts_are_counted_by_level(start_server: ServerFactory, user_id: str) -> None:
    s = await start_server(long_term={"max_memories": 2})
    sc = scope(user_id)
    for text in ("one", "two"):
        await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_LONG_TERM, content=text))
    err = await rpc_error(s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_LONG_TERM, content="3")))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await s.stub.Usage(pb.UsageRequest(scope=sc))
    # The console's listing shows the same usage without raising the alerts again.
    for _ in range(2):
        [listed] = (await s.stub.ListUsers(pb.ListUsersRequest(user_id_prefix=user_id))).users
        assert listed.user_id == user_id
    m = await metrics_of(s)
    assert m.value("memoryd_quota_alerts_total", tier="long_term", level="exceeded") == 1
    assert m.value("memoryd_quota_alerts_total", tier="long_term", level="critical") == 1


async def test_retention_metrics_have_the_rt005_names(start_server: ServerFactory) -> None:
    now = [1_000_000_000.0]
    s = await start_server(clock=lambda: now[0])
    sc = scope("u-retention", agent_id="a", task_id="t")
    added = []
    for text in ("old fact one", "old fact two", "old fact three"):
        reply = await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_LONG_TERM, content=text))
        added.append(reply.memory_id)
    now[0] += 400 * 86_400.0
    await s.stub.Delete(pb.DeleteRequest(scope=sc, tier=pb.TIER_LONG_TERM, ids=added[:1]))
    await s.stub.Prune(
        pb.PruneRequest(
            scope=sc,
            tiers=[pb.TIER_LONG_TERM],
            strategy=pb.PRUNE_STRATEGY_ARCHIVE_OLDER_THAN,
            older_than_days=365,
        )
    )
    await s.app.maintenance.run_once()  # purges the soft-deleted one
    await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_LONG_TERM, content="a new fact"))
    await s.app.maintenance.survey()
    m = await metrics_of(s)
    assert m.value("memory_archived_total", memory_type="long_term") == 2
    assert m.value("memory_deleted_total", memory_type="long_term", reason="delete") == 1
    assert m.value("memory_deleted_total", memory_type="long_term", reason="purge") == 1
    assert m.value("memory_storage_bytes", memory_type="long_term") == len("a new fact")
    assert m.value("memory_age_days_count", memory_type="long_term") >= 1
    assert m.value("memory_age_days_bucket", memory_type="long_term", le="1.0") >= 1


async def test_the_write_behind_backlog_and_its_oldest_age_are_reported(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    await s.app.copier.stop()  # nothing is copied: the messages wait
    sc = scope(user_id, session_id="s")
    for text in ("first", "second"):
        await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_SHORT_TERM, content=text))
    await s.app.copier.report_backlog()
    m = await metrics_of(s)
    assert m.value("memoryd_queue_backlog", queue="write_behind") == 2
    assert m.value("memoryd_queue_oldest_age_seconds", queue="write_behind") >= 0
    assert 'memoryd_queue_oldest_age_seconds{queue="write_behind"}' in m.text
    await s.app.copier.drain()
    await s.app.copier.report_backlog()
    m = await metrics_of(s)
    assert m.value("memoryd_queue_backlog", queue="write_behind") == 0
    assert m.value("memoryd_queue_oldest_age_seconds", queue="write_behind") == 0


async def test_a_stopped_server_closes_its_metrics_port(start_server: ServerFactory) -> None:
    s = await start_server()
    port = s.server.metrics_port
    assert (await scrape(port)).text  # serving
    await s.server.stop(grace_s=0)

    def refused() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except ConnectionRefusedError:
            return True
        except ConnectionResetError:  # reached the listener while it was being closed
            pass
        return False

    for _ in range(200):  # a bound against hanging: the port closes, soon or late
        if refused():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the metrics port {port} still accepts connections")


async def test_an_empty_metrics_listen_serves_no_metrics(start_server: ServerFactory) -> None:
    s = await start_server(metrics=MetricsSettings(listen=""))
    assert s.server.metrics_port == 0
    await s.stub.Retrieve(pb.RetrieveRequest(scope=scope("u")))  # still serves calls


# ---------------------------------------------------------------------- request ids, logs


async def test_the_callers_request_id_is_echoed_and_a_new_one_made_when_absent(
    memoryd: RunningServer,
) -> None:
    request = pb.RetrieveRequest(scope=scope("u-rid"))
    call = memoryd.stub.Retrieve(request, metadata=(("x-request-id", "caller-id-42"),))
    await call
    assert request_id_of(await call.trailing_metadata()) == "caller-id-42"
    made = []
    for _ in range(2):
        call = memoryd.stub.Retrieve(request)
        await call
        made.append(request_id_of(await call.trailing_metadata()))
    assert all(made) and made[0] != made[1]


async def test_a_failing_call_still_echoes_its_request_id(memoryd: RunningServer) -> None:
    call = memoryd.stub.Retrieve(
        pb.RetrieveRequest(scope=scope("")), metadata=(("x-request-id", "bad-call-1"),)
    )
    err = await rpc_error(call)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    # With the error's details beside it (google.rpc.Status), which it does not displace.
    trailing = await call.trailing_metadata()
    assert request_id_of(trailing) == "bad-call-1"
    assert any(key == "grpc-status-details-bin" for key, _ in trailing)


async def test_each_call_writes_one_json_line_with_its_outcome(
    logs: LogLines, memoryd: RunningServer
) -> None:
    sc = scope("u-log")
    await memoryd.stub.Usage(pb.UsageRequest(scope=sc), metadata=(("x-request-id", "usage-1"),))
    await rpc_error(
        memoryd.stub.Retrieve(
            pb.RetrieveRequest(scope=scope("")), metadata=(("x-request-id", "bad-1"),)
        )
    )
    # An error reaches the caller as soon as it is raised; the server logs it just after.
    assert await _until(lambda: _logged(logs, "rpc", "bad-1"))
    lines = {r["request_id"]: r for r in logs.events("rpc")}
    assert set(lines) == {"usage-1", "bad-1"}
    ok, bad = lines["usage-1"], lines["bad-1"]
    assert ok["method"] == "Usage" and ok["code"] == "OK" and ok["level"] == "info"
    assert ok["tenant"] == "default" and ok["key_id"] == ""
    assert isinstance(ok["latency_ms"], float) and ok["latency_ms"] > 0
    assert ok["time"].endswith("Z")
    assert bad["method"] == "Retrieve" and bad["code"] == "INVALID_ARGUMENT"


async def test_work_done_later_for_a_request_logs_its_request_id(
    logs: LogLines, start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    sc = scope(user_id, session_id="s")
    call = s.stub.Add(
        pb.AddRequest(scope=sc, tier=pb.TIER_SHORT_TERM, content="hello"),
        metadata=(("x-request-id", "add-then-copy"),),
    )
    memory_id = (await call).memory_id
    await s.app.copier.drain()
    copies = [r for r in logs.events("conversation copy stored") if r["memory_id"] == memory_id]
    assert [c["request_id"] for c in copies] == ["add-then-copy"]


async def test_every_retrieval_is_logged_without_its_text(
    logs: LogLines, start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    sc = scope(user_id, agent_id="a", task_id="t", session_id="s")
    memories = ["Aurelio keeps a pet axolotl named Quibble", "Quibble eats bloodworms daily"]
    for text in memories:
        await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_LONG_TERM, content=text))
        await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_SHORT_TERM, content=text))
    await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_WORKING, key="pet", content=memories[0]))
    await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_PERSONA, key="pet", content=memories[1]))
    query = "what does the axolotl Quibble eat"
    retrieved = await s.stub.Retrieve(
        pb.RetrieveRequest(scope=sc, query=query), metadata=(("x-request-id", "ret-1"),)
    )
    rendered = await s.stub.RenderContext(
        pb.RenderContextRequest(scope=sc, query=query), metadata=(("x-request-id", "ren-1"),)
    )
    await s.app.copier.drain()
    assert retrieved.items and "Quibble" in rendered.context  # the text was really there

    lines = {r["request_id"]: r for r in logs.events("retrieval")}
    assert set(lines) == {"ret-1", "ren-1"}
    for rid, rpc in (("ret-1", "Retrieve"), ("ren-1", "RenderContext")):
        line = lines[rid]
        assert line["rpc"] == rpc and line["level"] == "info"
        assert line["query_sha256"] == text_sha256(query)
        assert len(line["user"]) == 16 and line["user"] != user_id
        assert "long_term" in line["tiers"]
        assert isinstance(line["truncated"], bool) and line["latency_ms"] > 0
    assert lines["ret-1"]["result_count"] == len(retrieved.items)
    assert lines["ren-1"]["result_count"] == rendered.item_count >= 1

    written = logs.text
    assert "retrieval" in written and "conversation copy stored" in written
    for secret in [query, *memories, "axolotl", "Quibble", "bloodworms", user_id]:
        assert secret not in written, secret


async def test_logs_are_json_lines_unless_a_person_reads_them() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    root = logging.getLogger()
    level = root.level
    outputs = {}
    try:
        for name, fmt, stream in (
            ("auto-pipe", "auto", io.StringIO()),
            ("auto-tty", "auto", Terminal()),
            ("forced-json", "json", Terminal()),
            ("forced-console", "console", io.StringIO()),
        ):
            handler = configure_logging("INFO", cast(LogFormat, fmt), stream)
            logging.getLogger("memoryd.test").info("hello", extra={"n": 1})
            root.removeHandler(handler)
            outputs[name] = stream.getvalue().strip()
    finally:
        root.setLevel(level)
    for name in ("auto-pipe", "forced-json"):
        line = json.loads(outputs[name])
        assert line["event"] == "hello" and line["n"] == 1 and line["level"] == "info"
    for name in ("auto-tty", "forced-console"):
        assert "hello" in outputs[name]
        with pytest.raises(json.JSONDecodeError):
            json.loads(outputs[name])


# ---------------------------------------------------------------------- health


async def _health(channel: grpc.aio.Channel, service: str) -> int:
    reply = await health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=service)
    )
    return int(reply.status)


async def test_a_redis_outage_shows_in_health_and_metrics_and_both_recover(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    (tmp_path / "first").mkdir()
    redis = RedisServer(tmp_path / "first")
    s = await start_server(redis_url=redis.url)
    hot = ("memoryd.tier.working", "memoryd.tier.short_term")
    for service in (*hot, "memoryd.tier.long_term"):
        assert await _health(s.channel, service) == SERVING

    redis.stop()
    await s.server.health.check_now()
    for service in hot:
        assert await _health(s.channel, service) == NOT_SERVING
    assert await _health(s.channel, "memoryd.tier.long_term") == SERVING
    assert (await metrics_of(s)).value("memoryd_store_up", store="redis") == 0

    (tmp_path / "again").mkdir()
    redis = RedisServer(tmp_path / "again", port=redis.port)
    try:

        async def recovered() -> bool:
            up = (await metrics_of(s)).value("memoryd_store_up", store="redis") == 1
            return up and all([await _health(s.channel, svc) == SERVING for svc in hot])

        assert await _until(recovered), "health and memoryd_store_up did not recover"
        sc = scope("u-back", agent_id="a", task_id="t")
        await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_WORKING, key="k", content="v"))
    finally:
        redis.stop()


async def test_storage_bytes_follow_writes_and_removals_between_surveys(
    start_server: ServerFactory,
) -> None:
    # No maintenance loop: the only survey is the one this test runs, at the start.
    s = await start_server(retention={"maintenance_interval_seconds": 0})
    await s.app.maintenance.survey()
    sc = scope("u-storage")
    facts = ("likes jazz", "owns a red bicycle", "reads Borges on Sundays")
    ids = []
    for text in facts:
        reply = await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_LONG_TERM, content=text))
        ids.append(reply.memory_id)
    batch = [pb.AddRequest(scope=sc, tier=pb.TIER_LONG_TERM, content="speaks Basque")]
    await s.stub.AddBatch(pb.AddBatchRequest(items=batch))
    held = sum(len(t) for t in facts) + len("speaks Basque")
    m = await metrics_of(s)
    assert m.value("memory_storage_bytes", memory_type="long_term") == held

    await s.stub.Delete(pb.DeleteRequest(scope=sc, tier=pb.TIER_LONG_TERM, ids=ids[:1]))
    held -= len(facts[0])
    m = await metrics_of(s)
    assert m.value("memory_storage_bytes", memory_type="long_term") == held

    # Maintenance purges the deleted one (counted once) and the next survey agrees.
    await s.app.maintenance.run_once()
    assert (await metrics_of(s)).value("memory_storage_bytes", memory_type="long_term") == held
    await s.app.maintenance.survey()
    assert (await metrics_of(s)).value("memory_storage_bytes", memory_type="long_term") == held
