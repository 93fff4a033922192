"""Input an attacker (or a broken client) sends: every answer is INVALID_ARGUMENT naming
the field, never INTERNAL or UNKNOWN, nothing is written, and what was accepted stays
readable. Each case here is one the fuzzing of issue 11 found."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2

from memoryd.core.errors import echo
from memoryd.core.memory.payload import content_hash, to_payload
from memoryd.core.models import Kind, MemoryRecord, Scope, Tier
from memoryd.core.ratelimit_log import EveryFewSeconds
from memoryd.stores.vectors.port import VectorPoint
from memoryd.transport import interceptors
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.rpc import bad_request_fields, import_requests, rpc_error, scope
from tests.support.vector_stores import QDRANT_LOCAL

LT, SD = pb.TIER_LONG_TERM, pb.TIER_STRUCTURED
# The last instant a google.protobuf.Timestamp can hold: 9999-12-31T23:59:59.999999999Z.
MAX_SECONDS, MAX_NANOS = 253_402_300_799, 999_999_999


@pytest.fixture
async def server(start_server: ServerFactory) -> RunningServer:
    """One server (in-process hot store): what is checked here is the same on both."""
    return await start_server()


@pytest.fixture(params=["edge", "qdrant_client_local"])
async def vec(request: pytest.FixtureRequest, start_server: ServerFactory) -> RunningServer:
    """A server on each vector adapter: a filter must mean the same on both."""
    if request.param == "edge":
        return await start_server()
    return await start_server(**QDRANT_LOCAL)


async def export_items(s: RunningServer, user: str) -> list[pb.MemoryItem]:
    request = pb.ExportRequest(scope=scope(user))
    return [r.item async for r in s.stub.Export(request) if r.WhichOneof("payload") == "item"]


def import_stream(user: str, items: list[pb.MemoryItem]) -> Iterator[pb.ImportRequest]:
    yield from import_requests(user, items)


# --------------------------------------------------------------------------- times


async def test_a_time_past_the_timestamp_range_is_refused(
    server: RunningServer, user_id: str
) -> None:
    for ts in (Timestamp(seconds=MAX_SECONDS + 1), Timestamp(seconds=-62_135_596_801)):
        request = pb.AddRequest(scope=scope(user_id), tier=LT, content="x", expires_at=ts)
        err = await rpc_error(server.stub.Add(request))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert bad_request_fields(err) == ["expires_at"]
    bad_nanos = Timestamp(seconds=2_000_000_000, nanos=-1)
    request = pb.AddRequest(scope=scope(user_id), tier=LT, content="x", expires_at=bad_nanos)
    assert bad_request_fields(await rpc_error(server.stub.Add(request))) == ["expires_at"]
    assert await export_items(server, user_id) == []


async def test_the_last_representable_instant_is_accepted_and_read_back(
    server: RunningServer, user_id: str
) -> None:
    last = Timestamp(seconds=MAX_SECONDS, nanos=MAX_NANOS)
    added = await server.stub.Add(
        pb.AddRequest(scope=scope(user_id), tier=LT, content="Kept until the end", expires_at=last)
    )
    reply = await server.stub.Retrieve(pb.RetrieveRequest(scope=scope(user_id), tiers=[LT]))
    [item] = reply.items
    assert item.id == added.memory_id
    # Kept as a float, it rounds past the range; it comes back as the last instant.
    assert (item.expires_at.seconds, item.expires_at.nanos) == (MAX_SECONDS, MAX_NANOS)
    [exported] = await export_items(server, user_id)
    assert exported.expires_at == item.expires_at


async def test_a_user_with_a_stored_out_of_range_time_can_still_read_and_export(
    server: RunningServer, user_id: str
) -> None:
    """Written before out-of-range times were refused: clamped on the way out."""
    owner = Scope(tenant="default", user_id=user_id)
    record = MemoryRecord(
        id=str(uuid.uuid4()),
        tier=Tier.LONG_TERM,
        content="An old memory with a wild expiry",
        kind=Kind.NOTE,
        created_at=1_700_000_000.0,
        updated_at=1_700_000_000.0,
        expires_at=1e15,
    )
    payload = to_payload(record, owner, content_hash(owner, Tier.LONG_TERM, "", "x"), 1024)
    vector = [1.0] + [0.0] * (server.app.vectors.dim - 1)
    server.app.vectors.upsert([VectorPoint(record.id, vector, None, payload)])

    reply = await server.stub.Retrieve(pb.RetrieveRequest(scope=scope(user_id), tiers=[LT]))
    assert [i.expires_at.seconds for i in reply.items] == [MAX_SECONDS]
    assert [i.id for i in await export_items(server, user_id)] == [record.id]


async def test_an_import_with_a_time_past_the_range_writes_nothing(
    server: RunningServer, user_id: str
) -> None:
    good = pb.MemoryItem(id=str(uuid.uuid4()), tier=LT, kind=pb.KIND_NOTE, content="fine")
    bad = pb.MemoryItem(
        id=str(uuid.uuid4()),
        tier=LT,
        kind=pb.KIND_NOTE,
        content="from the far future",
        created_at=Timestamp(seconds=MAX_SECONDS + 1),
    )
    err = await rpc_error(server.stub.Import(import_stream(user_id, [good, bad])))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["item.created_at"]
    assert await export_items(server, user_id) == []


# --------------------------------------------------------------------------- documents

LONE_SURROGATES = [
    '{"note": "\\ud800"}',  # an unpaired high surrogate, escaped in the JSON text
    '{"note": "ok \\udfff"}',  # an unpaired low one
    '{"\\ud83d": 1}',  # in a key
    '{"list": [{"deep": "\\udc00"}]}',
]


@pytest.mark.parametrize("document", LONE_SURROGATES)
async def test_a_lone_surrogate_in_a_document_is_refused(
    server: RunningServer, user_id: str, document: str
) -> None:
    err = await rpc_error(
        server.stub.Add(pb.AddRequest(scope=scope(user_id), tier=SD, document_json=document))
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["document_json"]
    assert "surrogate" in (err.details() or "")


async def test_a_surrogate_pair_escape_is_a_character_and_accepted(
    server: RunningServer, user_id: str
) -> None:
    document = '{"mood": "\\ud83d\\ude00"}'
    await server.stub.Add(pb.AddRequest(scope=scope(user_id), tier=SD, document_json=document))
    [item] = await export_items(server, user_id)
    assert item.document_json == document and "mood: \U0001f600" in item.content


async def test_an_imported_document_with_a_lone_surrogate_writes_nothing(
    server: RunningServer, user_id: str
) -> None:
    item = pb.MemoryItem(
        id=str(uuid.uuid4()), tier=SD, kind=pb.KIND_DOCUMENT, document_json=LONE_SURROGATES[0]
    )
    err = await rpc_error(server.stub.Import(import_stream(user_id, [item])))
    assert bad_request_fields(err) == ["item.document_json"]
    assert await export_items(server, user_id) == []


NOT_STRICT_JSON = [
    '{"price": NaN}',
    '{"price": Infinity}',
    '{"prices": [1, -Infinity]}',
    '{"price": 1e999}',
    '{"price": {"max": -1e999}}',
    '{"price": 1' + "0" * 400 + "}",
]


@pytest.mark.parametrize("document", NOT_STRICT_JSON)
async def test_a_document_other_json_parsers_would_refuse_is_refused(
    server: RunningServer, user_id: str, document: str
) -> None:
    err = await rpc_error(
        server.stub.Add(pb.AddRequest(scope=scope(user_id), tier=SD, document_json=document))
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["document_json"]
    item = pb.MemoryItem(
        id=str(uuid.uuid4()), tier=SD, kind=pb.KIND_DOCUMENT, document_json=document
    )
    err = await rpc_error(server.stub.Import(import_stream(user_id, [item])))
    assert bad_request_fields(err) == ["item.document_json"]
    assert await export_items(server, user_id) == []


async def test_the_largest_and_smallest_finite_numbers_are_accepted(
    server: RunningServer, user_id: str
) -> None:
    document = '{"big": 1.7976931348623157e308, "tiny": -5e-324, "count": 12345678901234567890}'
    await server.stub.Add(pb.AddRequest(scope=scope(user_id), tier=SD, document_json=document))
    [item] = await export_items(server, user_id)
    assert item.document_json == document


# --------------------------------------------------------------------------- filter keys


@pytest.mark.parametrize("key", ["a b", 'a"b', "a\\b", "a[0]", "", "x" * 65, "ключ?"])
async def test_a_filter_key_outside_the_key_alphabet_is_refused(
    server: RunningServer, user_id: str, key: str
) -> None:
    retrieve = pb.RetrieveRequest(scope=scope(user_id), tiers=[LT], filters={key: "1"})
    err = await rpc_error(server.stub.Retrieve(retrieve))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == [f"filters[{echo(key)!r}]"]
    prune = pb.PruneRequest(
        scope=scope(user_id), tiers=[LT], strategy=pb.PRUNE_STRATEGY_BY_FILTER, filters={key: "1"}
    )
    assert (await rpc_error(server.stub.Prune(prune))).code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_filter_keys_are_literal_never_paths(vec: RunningServer, user_id: str) -> None:
    usc = scope(user_id)
    metadata_of = {"dotted": {"a.b": "1"}, "numeric": {"2024": "x"}, "named": {"año": "y"}}
    ids = {}
    for name, metadata in metadata_of.items():
        reply = await vec.stub.Add(
            pb.AddRequest(scope=usc, tier=LT, content=f"The {name} memory", metadata=metadata)
        )
        ids[name] = reply.memory_id
    await vec.stub.Add(pb.AddRequest(scope=usc, tier=SD, document_json='{"a": {"b": "1"}}'))
    flat = await vec.stub.Add(pb.AddRequest(scope=usc, tier=SD, document_json='{"a.b": "1"}'))

    async def found(filters: dict[str, str], tier: pb.Tier.ValueType = LT) -> list[str]:
        request = pb.RetrieveRequest(scope=usc, tiers=[tier], filters=filters)
        return [i.id for i in (await vec.stub.Retrieve(request)).items]

    assert await found({"a.b": "1"}) == [ids["dotted"]]
    assert await found({"2024": "x"}) == [ids["numeric"]]
    assert await found({"año": "y"}) == [ids["named"]]
    # On documents, the top-level field named "a.b" matches; the nested a -> b does not.
    assert await found({"a.b": "1"}, SD) == [flat.memory_id]
    pruned = await vec.stub.Prune(
        pb.PruneRequest(
            scope=usc, tiers=[LT], strategy=pb.PRUNE_STRATEGY_BY_FILTER, filters={"a.b": "1"}
        )
    )
    assert pruned.deleted_count == 1


# --------------------------------------------------------------------------- undecodable bytes

UNDECODABLE = {
    # field 1 (scope) holding a Scope whose user_id (field 1) is the invalid UTF-8 byte 0xff
    "invalid UTF-8": b"\x0a\x03\x0a\x01\xff",
    # wire type 6 does not exist
    "invalid wire type": b"\x0e\x01",
    # an end-group tag with no group open
    "unmatched end group": b"\x0c",
    # a length prefix running past the end of the message
    "truncated": b"\x0a\x05\x0a",
    # field number 0 does not exist
    "field zero": b"\x00\x01",
}
UNARY = ["Add", "Retrieve", "Get", "Delete", "Prune", "Usage", "RenderContext", "EndSession"]


def assert_malformed(err: grpc.aio.AioRpcError) -> None:
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    assert "malformed request" in (err.details() or "")
    assert bad_request_fields(err) == ["request"]


async def test_undecodable_request_bytes_are_invalid_argument_on_every_rpc(
    server: RunningServer,
) -> None:
    for raw in UNDECODABLE.values():
        await answered_malformed(server.channel, raw)
    health = await server.channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING


async def answered_malformed(channel: grpc.aio.Channel, raw: bytes) -> None:
    for method in UNARY:
        call = channel.unary_unary(
            f"/memoryd.v1.MemoryService/{method}",
            request_serializer=None,
            response_deserializer=None,
        )
        assert_malformed(await rpc_error(call(raw)))
    export = channel.unary_stream(
        "/memoryd.v1.MemoryService/Export", request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in export(raw):
            pass
    assert_malformed(caught.value)
    check = channel.unary_unary(
        "/grpc.health.v1.Health/Check", request_serializer=None, response_deserializer=None
    )
    assert_malformed(await rpc_error(check(raw)))
    watch = channel.unary_stream(
        "/grpc.health.v1.Health/Watch", request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in watch(raw):
            pass
    assert_malformed(caught.value)


async def test_a_field_sent_with_another_wire_type_is_skipped_as_an_unknown_field(
    server: RunningServer,
) -> None:
    """Protobuf parsers keep a known field number with the wrong (valid) wire type as an
    unknown field: the request decodes without its scope, which is then what is missing."""
    call = server.channel.unary_unary(
        "/memoryd.v1.MemoryService/Usage", request_serializer=None, response_deserializer=None
    )
    err = await rpc_error(call(b"\x08\x01"))  # field 1 (scope, a message) as a varint
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["scope.user_id"]


async def test_an_undecodable_message_inside_an_import_stream_writes_nothing(
    server: RunningServer, user_id: str
) -> None:
    item = pb.MemoryItem(id=str(uuid.uuid4()), tier=LT, kind=pb.KIND_NOTE, content="fine")

    async def stream() -> AsyncIterator[bytes]:
        yield pb.ImportRequest(scope=scope(user_id)).SerializeToString()
        yield pb.ImportRequest(item=item).SerializeToString()
        yield UNDECODABLE["invalid UTF-8"]
        trailer = pb.ExportTrailer(item_count=1)
        yield pb.ImportRequest(trailer=trailer).SerializeToString()

    call = server.channel.stream_unary(
        "/memoryd.v1.MemoryService/Import", request_serializer=None, response_deserializer=None
    )
    assert_malformed(await rpc_error(call(stream())))
    assert await export_items(server, user_id) == []


async def test_undecodable_requests_log_one_rate_limited_line_and_no_traceback(
    start_server: ServerFactory, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = await start_server()
    monkeypatch.setattr(interceptors, "_malformed_log", EveryFewSeconds(interceptors.log, 3600))
    call = s.channel.unary_unary(
        "/memoryd.v1.MemoryService/Add", request_serializer=None, response_deserializer=None
    )
    with caplog.at_level(logging.DEBUG):
        for _ in range(20):
            assert_malformed(await rpc_error(call(UNDECODABLE["invalid wire type"])))
    lines = [r for r in caplog.records if "malformed request" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert "/memoryd.v1.MemoryService/Add" in lines[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_a_rate_limited_line_counts_what_it_held_back(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limited = EveryFewSeconds(logging.getLogger("server.test"), 10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="server.test"):
        logged = [limited.warning("bad %s", n) for n in range(5)]
        now[0] = 10.0
        logged.append(limited.warning("bad %s", 5))
    assert logged == [True, False, False, False, False, True]
    assert [r.getMessage() for r in caplog.records] == [
        "bad 0",
        "bad 5 (and 4 more like it since the last such line)",
    ]


# --------------------------------------------------------------------------- echoes

HUGE_KEY = "k" * 20_000


def assert_bounded_invalid_argument(err: grpc.aio.AioRpcError, field: str) -> None:
    """INVALID_ARGUMENT naming the field, the client's text quoted cut short (`echo`), so
    that the error fits the trailing metadata it travels in."""
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == [f"{field}[{echo(HUGE_KEY)!r}]"]
    assert len(err.details() or "") < 1024


async def test_an_add_with_a_huge_metadata_key_names_the_field_without_echoing_it(
    server: RunningServer, user_id: str
) -> None:
    add = pb.AddRequest(scope=scope(user_id), tier=LT, content="c", metadata={HUGE_KEY: "v"})
    assert_bounded_invalid_argument(await rpc_error(server.stub.Add(add)), "metadata")
    assert await export_items(server, user_id) == []


async def test_a_metadata_value_over_its_limit_is_refused_by_its_key(
    server: RunningServer, user_id: str
) -> None:
    add = pb.AddRequest(scope=scope(user_id), tier=LT, content="c", metadata={"k": "v" * 20_000})
    err = await rpc_error(server.stub.Add(add))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["metadata['k']"]
    assert "over 1024 bytes" in (err.details() or "")


async def test_retrieve_and_prune_with_a_huge_filter_key_name_the_field_without_echoing_it(
    server: RunningServer, user_id: str
) -> None:
    retrieve = pb.RetrieveRequest(scope=scope(user_id), tiers=[LT], filters={HUGE_KEY: "1"})
    assert_bounded_invalid_argument(await rpc_error(server.stub.Retrieve(retrieve)), "filters")
    prune = pb.PruneRequest(
        scope=scope(user_id),
        tiers=[LT],
        strategy=pb.PRUNE_STRATEGY_BY_FILTER,
        filters={HUGE_KEY: "1"},
    )
    assert_bounded_invalid_argument(await rpc_error(server.stub.Prune(prune)), "filters")


async def test_a_batch_item_with_a_3_mb_metadata_key_fails_alone_in_a_small_answer(
    server: RunningServer, user_id: str
) -> None:
    good = pb.AddRequest(scope=scope(user_id), tier=LT, content="User likes tea")
    huge = "k" * 3_000_000
    bad = pb.AddRequest(scope=scope(user_id), tier=LT, content="c", metadata={huge: "v"})
    reply = await server.stub.AddBatch(pb.AddBatchRequest(items=[good, bad]))
    assert (reply.succeeded_count, reply.failed_count) == (1, 1)
    assert reply.results[0].memory_id  # stored, and said so: a retry would duplicate it
    error = reply.results[1].error
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert error.field == f"metadata[{echo(huge)!r}]"
    assert reply.ByteSize() < 2048
    assert [i.content for i in await export_items(server, user_id)] == ["User likes tea"]
