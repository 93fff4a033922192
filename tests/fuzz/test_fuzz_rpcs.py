"""Fuzzing every RPC: hostile messages through the stubs, random and hand-encoded bytes
through the raw method handlers (Health included), and streams closed early. No answer
may be INTERNAL or UNKNOWN (nor any status a client could not act on), nothing may be
logged as an error, and the server stays SERVING throughout.

Seeded and bounded: MEMORYD_FUZZ_EXAMPLES (examples per test, default 25) and
MEMORYD_FUZZ_SEED (default fixed) choose the run; `make fuzz` runs a long one.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from memoryd.app import build_app
from memoryd.settings import Settings
from memoryd.stores.embeddings.port import Embedder
from memoryd.transport.server import MemorydServer
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer
from tests.fuzz.strategies import (
    USERS,
    adds,
    hand_encoded,
    import_items,
    mangled,
    messages,
    messages_of,
    oversized_keys,
)
from tests.support.rpc import import_requests

EXAMPLES = int(os.environ.get("MEMORYD_FUZZ_EXAMPLES", "25"))
SEED = int(os.environ.get("MEMORYD_FUZZ_SEED", "20251123"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # nothing written to the work tree; the seed makes runs repeatable
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,  # one server serves every example, on purpose
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)

SERVICE = pb.DESCRIPTOR.services_by_name["MemoryService"]
METHODS = {m.name: m for m in SERVICE.methods}
# Statuses a client can act on; INTERNAL, UNKNOWN and the rest mean a defect.
EXPECTED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.CANCELLED,  # only where the test itself cancels
}
TIMEOUT_S = 60.0
HEALTH = ["/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"]


class Fuzzed:
    def __init__(self, running: RunningServer) -> None:
        self.s = running
        self.channel = running.channel
        self.stub = running.stub
        self.health = health_pb2_grpc.HealthStub(running.channel)

    async def assert_serving(self) -> None:
        await self.s.server.health.check_now()
        reply = await self.health.Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.fixture(scope="module")
async def fuzzed(
    tmp_path_factory: pytest.TempPathFactory, embedder: Embedder
) -> AsyncIterator[Fuzzed]:
    """One server for every example, with small quotas so full tiers are reached."""
    settings_ = Settings.explicit(
        listen="127.0.0.1:0",
        metrics={"listen": "127.0.0.1:0"},  # never the fixed default: workers run at once
        data_dir=Path(tmp_path_factory.mktemp("fuzz")) / "data",
        long_term={"max_memories": 40},
        structured={"max_documents": 20},
        episodic={"max_episodes_per_agent": 10},
        write_behind={"retry_seconds": 0.05},
    )
    app = await build_app(settings_, embedder=embedder)
    server = MemorydServer(settings_, app, health_interval_s=3600)
    port = await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield Fuzzed(RunningServer(server, app, channel, port))
    await channel.close(None)
    await server.stop(grace_s=0)


@pytest.fixture
def no_errors_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    with caplog.at_level(logging.WARNING):
        yield
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert errors == [], [r.getMessage() for r in errors]


def write_after_the_end(err: grpc.aio.AioRpcError) -> bool:
    """A client-streaming call the server ended early (it refused a message) while the
    client was still sending: grpcio's asyncio client then reports its own failed write as
    INTERNAL "Internal error from Core" in place of the server's status (grpc/grpc#36066).
    That INTERNAL never left the server; what the server did is checked by its log (an
    INTERNAL it answers is always logged as an error, see `no_errors_logged`)."""
    return err.code() == grpc.StatusCode.INTERNAL and 'Failed "execute_batch"' in (
        err.debug_error_string() or ""
    )


def status_of(err: grpc.aio.AioRpcError) -> grpc.StatusCode:
    code = err.code()
    assert code in EXPECTED, f"{code.name}: {err.details()}"
    return code


async def unary(call: Any, request: Any) -> grpc.StatusCode:
    try:
        await call(request, timeout=TIMEOUT_S)
    except grpc.aio.AioRpcError as err:
        return status_of(err)
    return grpc.StatusCode.OK


async def server_stream(call: Any, request: Any, read: int | None = None) -> grpc.StatusCode:
    """Read the whole stream, or only `read` messages and then cancel it (closed early)."""
    stream = call(request, timeout=TIMEOUT_S)
    try:
        n = 0
        async for _ in stream:
            n += 1
            if read is not None and n >= read:
                stream.cancel()
                return grpc.StatusCode.CANCELLED
    except grpc.aio.AioRpcError as err:
        return status_of(err)
    except asyncio.CancelledError:
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.OK


async def client_stream(call: Any, requests: list[Any], cancel_after: int | None) -> Any:
    """Send `requests`; with `cancel_after`, cancel the call once that many are sent (an
    Import abandoned halfway), unless the server has answered before."""
    sent = asyncio.Event()

    async def feed() -> AsyncIterator[Any]:
        for n, request in enumerate(requests):
            if n == cancel_after:
                sent.set()
                await asyncio.sleep(3600)  # the call is cancelled while waiting here
            yield request

    stream = call(feed(), timeout=TIMEOUT_S)

    async def answer() -> Any:
        return await stream

    answered = asyncio.create_task(answer())
    if cancel_after is not None and cancel_after < len(requests):
        # The server may refuse a message and end the call before `cancel_after` is sent.
        waiting = asyncio.create_task(sent.wait())
        await asyncio.wait({answered, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if not answered.done():
            stream.cancel()
    try:
        await answered
    except grpc.aio.AioRpcError as err:
        if write_after_the_end(err):
            return grpc.StatusCode.CANCELLED
        return status_of(err)
    except asyncio.CancelledError:
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.OK


# --------------------------------------------------------------------------- through the stubs

UNARY = [m.name for m in SERVICE.methods if not m.client_streaming and not m.server_streaming]


@pytest.mark.parametrize("method", UNARY)
@FUZZ
@seed(SEED)
@given(data=st.data())
async def test_hostile_unary_requests(
    fuzzed: Fuzzed, no_errors_logged: None, method: str, data: st.DataObject
) -> None:
    requests = messages(METHODS[method].input_type)
    if method == "Add":  # most Adds should land, to fill the tiers the other RPCs read
        requests = st.one_of(adds(), adds(), requests)
    request = data.draw(requests, label="request")
    await unary(getattr(fuzzed.stub, method), request)
    await fuzzed.assert_serving()


@FUZZ
@seed(SEED)
@given(data=st.data())
async def test_hostile_export_requests_read_whole_or_closed_early(
    fuzzed: Fuzzed, no_errors_logged: None, data: st.DataObject
) -> None:
    request = data.draw(messages_of(pb.ExportRequest), label="request")
    if data.draw(st.booleans(), label="an existing user"):
        request.scope.user_id = data.draw(st.sampled_from(USERS))
    read = data.draw(st.one_of(st.none(), st.integers(1, 3)), label="messages read")
    await server_stream(fuzzed.stub.Export, request, read)
    await fuzzed.assert_serving()


@st.composite
def import_streams(draw: st.DrawFn) -> list[pb.ImportRequest]:
    """Anything at all, or a well-formed stream (scope, items, a matching trailer) whose
    items are plausible or hostile, so that the items' own checks and quotas are reached."""
    items = draw(st.lists(st.one_of(import_items(), messages_of(pb.MemoryItem)), max_size=5))
    if draw(st.booleans()):
        return draw(st.lists(messages_of(pb.ImportRequest), max_size=6))
    user, auto_prune = draw(st.sampled_from(USERS)), draw(st.booleans())
    return import_requests(user, items, auto_prune=auto_prune)


@FUZZ
@seed(SEED)
@given(requests=import_streams(), data=st.data())
async def test_hostile_import_streams_whole_or_abandoned(
    fuzzed: Fuzzed, no_errors_logged: None, requests: list[pb.ImportRequest], data: st.DataObject
) -> None:
    cancel = data.draw(st.one_of(st.none(), st.integers(0, len(requests))), label="cancel after")
    await client_stream(fuzzed.stub.Import, requests, cancel)
    await fuzzed.assert_serving()


# --------------------------------------------------------------------------- echoes

# Well under grpc's default 8 KiB for trailing metadata, where an error's status travels.
MAX_ERROR_BYTES = 4096


def error_bytes(err: grpc.aio.AioRpcError) -> int:
    trailers: Any = err.trailing_metadata() or ()
    return len(err.details() or "") + sum(len(value) for _, value in trailers)


@FUZZ
@seed(SEED)
@given(key=oversized_keys, data=st.data())
async def test_oversized_keys_are_refused_by_name_and_never_echoed_whole(
    fuzzed: Fuzzed, no_errors_logged: None, key: str, data: st.DataObject
) -> None:
    """A metadata or filter key past its limit is INVALID_ARGUMENT whatever its size (an
    echo of it would outgrow the trailers: RESOURCE_EXHAUSTED); in a batch it fails alone."""
    user = pb.Scope(user_id=data.draw(st.sampled_from(USERS)))
    lt = pb.TIER_LONG_TERM
    refused: list[tuple[Any, Message]] = [
        (fuzzed.stub.Add, pb.AddRequest(scope=user, tier=lt, content="c", metadata={key: "v"})),
        (fuzzed.stub.Retrieve, pb.RetrieveRequest(scope=user, query="q", filters={key: "v"})),
        (
            fuzzed.stub.Prune,
            pb.PruneRequest(scope=user, strategy=pb.PRUNE_STRATEGY_BY_FILTER, filters={key: "v"}),
        ),
    ]
    call, request = data.draw(st.sampled_from(refused), label="call")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(request, timeout=TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_bytes(caught.value) < MAX_ERROR_BYTES

    task = pb.Scope(user_id=user.user_id, task_id="t1")
    good = pb.AddRequest(scope=task, tier=pb.TIER_WORKING, key="echo", content="kept")
    bad = pb.AddRequest(scope=user, tier=lt, content="c", metadata={key: "v"})
    reply = await fuzzed.stub.AddBatch(pb.AddBatchRequest(items=[good, bad]), timeout=TIMEOUT_S)
    assert reply.results[0].memory_id and not reply.results[0].HasField("error")
    assert reply.results[1].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert reply.ByteSize() < MAX_ERROR_BYTES
    await fuzzed.assert_serving()


# --------------------------------------------------------------------------- raw bytes

RAW_METHODS = [f"/memoryd.v1.MemoryService/{m.name}" for m in SERVICE.methods] + HEALTH


def request_type(path: str) -> Any:
    if path.startswith("/grpc.health.v1.Health/"):
        return health_pb2.HealthCheckRequest.DESCRIPTOR
    return METHODS[path.rsplit("/", 1)[1]].input_type


@st.composite
def raw_requests(draw: st.DrawFn, path: str) -> bytes:
    valid: Message = draw(messages(request_type(path)))
    return draw(
        st.one_of(
            st.binary(max_size=256),
            hand_encoded(),
            mangled(valid),
            st.just(valid.SerializeToString()),
        )
    )


def raw_call(channel: grpc.aio.Channel, path: str) -> tuple[Any, bool, bool]:
    """A call of `path` sending and receiving bytes as they are (identity serializers)."""
    if path.endswith("/Import"):
        return (
            channel.stream_unary(path, request_serializer=None, response_deserializer=None),
            True,
            False,
        )
    if path.endswith(("/Export", "/Watch")):
        return (
            channel.unary_stream(path, request_serializer=None, response_deserializer=None),
            False,
            True,
        )
    return (
        channel.unary_unary(path, request_serializer=None, response_deserializer=None),
        False,
        False,
    )


@pytest.mark.parametrize("path", RAW_METHODS)
@FUZZ
@seed(SEED)
@given(data=st.data())
async def test_random_and_hand_encoded_bytes(
    fuzzed: Fuzzed, no_errors_logged: None, path: str, data: st.DataObject
) -> None:
    call, requests_stream, responses_stream = raw_call(fuzzed.channel, path)
    if requests_stream:
        chunks = data.draw(st.lists(raw_requests(path), max_size=5), label="messages")
        await client_stream(call, chunks, None)
    elif responses_stream:
        # A Watch on a valid request streams until cancelled: read one answer at most.
        await server_stream(call, data.draw(raw_requests(path), label="bytes"), read=1)
    else:
        await unary(call, data.draw(raw_requests(path), label="bytes"))
    await fuzzed.assert_serving()


async def test_the_fuzzed_server_still_answers_real_work(fuzzed: Fuzzed) -> None:
    """After everything above, ordinary calls still work."""
    user = "fuzz-after"
    added = await fuzzed.stub.Add(
        pb.AddRequest(scope=pb.Scope(user_id=user), tier=pb.TIER_LONG_TERM, content="Still fine")
    )
    got = await fuzzed.stub.Get(
        pb.GetRequest(scope=pb.Scope(user_id=user), tier=pb.TIER_LONG_TERM, ids=[added.memory_id])
    )
    assert [i.content for i in got.items] == ["Still fine"]
    await fuzzed.assert_serving()
