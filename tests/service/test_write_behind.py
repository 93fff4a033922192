"""The write-behind copier of conversation messages keeps going when a batch fails (the
embedder is down): later messages are copied once it is back, and the failed batch stays
queued (never dropped) until it is replayed after a restart. On every queue: the journal
file, a Redis stream, a Redis Cluster stream."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from tenacity import AsyncRetrying, retry_if_result, stop_after_delay, wait_fixed

from memoryd.app import App, build_app
from memoryd.settings import Settings
from memoryd.stores.queue.port import QueueDown
from memoryd.transport.server import MemorydServer
from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc
from tests.support.openai_stub import OpenAIStub, start_openai_stub
from tests.support.redis_server import RedisServer
from tests.support.rpc import scope
from tests.unit.unit_kit import LIVENESS_S

FAILED = "I am allergic to peanuts"
LATER = "I live in Lisbon"


@pytest.fixture
def openai_api() -> Iterator[OpenAIStub]:
    stub = start_openai_stub(dim=8)
    yield stub
    stub.stop()


@asynccontextmanager
async def serving(
    settings: Settings,
) -> AsyncIterator[tuple[App, memory_pb2_grpc.MemoryServiceAsyncStub]]:
    app = await build_app(settings)
    server = MemorydServer(settings, app, health_interval_s=0.2)
    port = await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield app, memory_pb2_grpc.MemoryServiceStub(channel)
    finally:
        await channel.close(None)
        await server.stop(grace_s=0)


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    """Wait for the background worker (the deadline is against hanging, not a timing test)."""
    wait = AsyncRetrying(
        stop=stop_after_delay(60), wait=wait_fixed(0.05), retry=retry_if_result(operator.not_)
    )
    await wait(check)


async def messages_found(
    stub: memory_pb2_grpc.MemoryServiceAsyncStub, user_id: str, query: str
) -> list[str]:
    answer = await stub.Retrieve(
        pb.RetrieveRequest(
            scope=scope(user_id), tiers=[pb.TIER_LONG_TERM], query=query, kinds=[pb.KIND_MESSAGE]
        )
    )
    return [item.content for item in answer.items]


async def test_a_failed_batch_is_released_and_copied_once_the_store_answers(
    openai_api: OpenAIStub, tmp_path: Path, user_id: str, redis_family: dict[str, Any]
) -> None:
    settings = Settings(
        listen="127.0.0.1:0",
        metrics={"listen": "127.0.0.1:0"},  # never the fixed default: workers run at once
        data_dir=tmp_path,
        embedder=openai_api.embedder_settings(),
        write_behind={"retry_seconds": 0.05},
        **redis_family,
    )
    sc = scope(user_id, session_id="s")
    async with serving(settings) as (_, stub):
        # 400 is not retried by the OpenAI client itself: the copier sees the failure.
        openai_api.behaviour.status = 400
        await stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_SHORT_TERM, content=FAILED))

        async def tried() -> bool:
            return any(FAILED in r.body["input"] for r in openai_api.requests)

        await eventually(tried)

        openai_api.behaviour.status = 200
        await stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_SHORT_TERM, content=LATER))

        # Either batch may be copied first (the failed one is retried every 0.05 s): wait
        # for the later message itself, not for the first copy of anything.
        async def later_copied() -> bool:
            return LATER in await messages_found(stub, user_id, "where does the user live")

        await eventually(later_copied)

        async def failed_copied_too() -> bool:
            return FAILED in await messages_found(stub, user_id, "food allergies")

        # The failed batch was released, not left pending: it is copied without a restart.
        await eventually(failed_copied_too)


async def test_a_copy_in_the_embedder_never_holds_a_request_up(
    openai_api: OpenAIStub, tmp_path: Path, user_id: str
) -> None:
    """The copy embeds in a lane of its own: while the embeddings API holds the copy's
    call, another user's long-term Add, which embeds too, is answered (one call in flight
    per lane; the copy holds its own user's lock)."""
    settings = Settings(
        listen="127.0.0.1:0",
        metrics={"listen": "127.0.0.1:0"},
        data_dir=tmp_path,
        embedder=openai_api.embedder_settings(batch_concurrency=1),
    )
    sc = scope(user_id, session_id="s")
    openai_api.behaviour.hold = FAILED
    async with serving(settings) as (_, stub):
        await stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_SHORT_TERM, content=FAILED))

        async def copy_in_the_embedder() -> bool:
            return any(FAILED in r.body["input"] for r in openai_api.requests)

        await eventually(copy_in_the_embedder)
        added = await stub.Add(
            pb.AddRequest(scope=scope(f"{user_id}-b"), tier=pb.TIER_LONG_TERM, content=LATER),
            timeout=LIVENESS_S,
        )
        assert added.memory_id
        openai_api.behaviour.released.set()

        async def copied() -> bool:
            return FAILED in await messages_found(stub, user_id, "food allergies")

        await eventually(copied)


async def test_drain_waits_for_a_queue_that_comes_back(
    openai_api: OpenAIStub, tmp_path: Path, user_id: str
) -> None:
    redis = RedisServer(tmp_path / "redis", appendonly=True)
    settings = Settings(
        listen="127.0.0.1:0",
        metrics={"listen": "127.0.0.1:0"},
        data_dir=tmp_path / "data",
        embedder=openai_api.embedder_settings(),
        redis_url=redis.url,
    )
    try:
        async with serving(settings) as (app, stub):
            await app.copier.stop()  # only `drain` copies from here on
            sc = scope(user_id, session_id="s")
            await stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_SHORT_TERM, content=LATER))
            queue = app.copier._queue
            pending, met_down = queue.pending, asyncio.Event()

            async def noting() -> int:
                try:
                    return await pending()
                except QueueDown:
                    met_down.set()
                    raise

            queue.pending = noting  # type: ignore[method-assign]
            redis.stop()  # its pooled connections are now closed by the server
            draining = asyncio.ensure_future(app.copier.drain(timeout_s=LIVENESS_S))
            await asyncio.wait_for(met_down.wait(), LIVENESS_S)
            redis.restart(keep_data=True)
            await draining
            assert LATER in await messages_found(stub, user_id, "where does the user live")
    finally:
        redis.stop()
