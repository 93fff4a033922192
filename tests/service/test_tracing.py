"""Tracing (the `otel` extra): a call continues the caller's W3C trace, with spans for
embedding, store calls and fusion inside it."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from memoryd.settings import Settings, TracingSettings
from memoryd.telemetry import Telemetry
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.rpc import scope

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01"


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
async def traced(
    start_server: ServerFactory, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> tuple[RunningServer, InMemorySpanExporter]:
    """A server whose spans end up in the exporter."""
    provider, exporter = spans
    return await start_server(telemetry=Telemetry(tracer_provider=provider)), exporter


def _names(found: tuple[ReadableSpan, ...]) -> list[str]:
    return [s.name for s in found]


async def test_a_call_continues_the_callers_trace_with_spans_inside(
    traced: tuple[RunningServer, InMemorySpanExporter], user_id: str
) -> None:
    s, exporter = traced
    sc = scope(user_id)
    await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_LONG_TERM, content="I like green tea"))
    exporter.clear()
    await s.stub.Retrieve(
        pb.RetrieveRequest(scope=sc, query="tea", tiers=[pb.TIER_LONG_TERM]),
        metadata=(("traceparent", TRACEPARENT),),
    )
    found = exporter.get_finished_spans()
    server = [sp for sp in found if sp.name == "/memoryd.v1.MemoryService/Retrieve"]
    assert len(server) == 1, _names(found)
    call = server[0]
    assert call.parent is not None and f"{call.parent.span_id:016x}" == PARENT_SPAN_ID
    assert all(f"{sp.context.trace_id:032x}" == TRACE_ID for sp in found), _names(found)
    inside = {sp.name for sp in found if sp is not call}
    assert {
        "memoryd.embedding",
        "memoryd.store qdrant_edge.search",
        "memoryd.store qdrant_edge.count",
        "memoryd.fusion",
    } <= inside
    fusion = {
        (sp.attributes or {})["memoryd.fusion.stage"] for sp in found if sp.name == "memoryd.fusion"
    }
    assert fusion == {"signals", "tiers"}
    embedding = next(sp for sp in found if sp.name == "memoryd.embedding")
    assert (embedding.attributes or {})["memoryd.batch_size"] == 1
    # Each child hangs under the call's span (directly or through another child).
    ids = {sp.context.span_id for sp in found}
    assert all(sp.parent is not None and sp.parent.span_id in ids for sp in found if sp is not call)


async def test_a_tier_found_empty_is_not_looked_up_again_until_the_users_next_write(
    traced: tuple[RunningServer, InMemorySpanExporter], user_id: str
) -> None:
    s, exporter = traced
    sc = scope(user_id)
    await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_PERSONA, key="name", content="Ana"))

    def ask(query: str) -> pb.RetrieveRequest:
        return pb.RetrieveRequest(scope=sc, query=query, tiers=[pb.TIER_LONG_TERM])

    def store_calls() -> list[str]:
        return [n for n in _names(exporter.get_finished_spans()) if n.startswith("memoryd.store")]

    exporter.clear()
    assert not (await s.stub.Retrieve(ask("tea"))).items
    assert store_calls()  # the first time, the store is asked
    exporter.clear()
    assert not (await s.stub.Retrieve(ask("coffee"))).items
    assert store_calls() == []  # nothing written since: still empty, no store call

    await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_LONG_TERM, content="I like green tea"))
    found = await s.stub.Retrieve(ask("tea"))
    assert [i.content for i in found.items] == ["I like green tea"]


async def test_tracing_is_off_by_default(start_server: ServerFactory) -> None:
    s = await start_server()
    assert s.app.telemetry.tracer_provider is None
    assert Settings.explicit().tracing.enabled is False


async def test_tracing_on_builds_an_exporting_provider() -> None:
    telemetry = Telemetry.from_settings(
        Settings.explicit(tracing=TracingSettings(enabled=True, exporter="console"))
    )
    assert telemetry.tracer_provider is not None
    await telemetry.close()
