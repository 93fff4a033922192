"""Through gRPC: concurrent long-term Adds share model calls, and a call whose deadline
passes while it waits for the model leaves without its text ever being embedded.

Adds embed their text before they take their user's lock (which guards the quota check
and the write only), so Adds of one user share model calls as well as different users'.

The model is `GatedEmbedder` (tests/unit/unit_kit.py): it holds its first call open, so
the other requests arrive while the model is busy, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.rpc import scope
from tests.unit.unit_kit import LIVENESS_S, GatedEmbedder


@pytest.fixture
def embedder() -> GatedEmbedder:
    """Replaces the suite's MiniLM for this module's servers."""
    return GatedEmbedder()


async def add(
    server: RunningServer, user: str, content: str, deadline_s: float | None = None
) -> pb.AddResponse:
    request = pb.AddRequest(scope=scope(user), tier=pb.TIER_LONG_TERM, content=content)
    return await server.stub.Add(request, timeout=deadline_s)


async def test_concurrent_adds_are_embedded_in_one_model_call(
    start_server: ServerFactory, embedder: GatedEmbedder, user_id: str
) -> None:
    server = await start_server()
    first = await embedder.hold(lambda: add(server, user_id, "the first memory"))
    others = [
        asyncio.ensure_future(add(server, f"{user_id}-{i}", f"memory number {i}")) for i in range(8)
    ]
    batcher = server.app.embedding
    assert batcher is not None
    async with asyncio.timeout(LIVENESS_S):
        # All eight wait behind the busy model (polled: the batcher has no event for it).
        while batcher.queued() < 8:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    embedder.release()
    replies = await asyncio.wait_for(asyncio.gather(first, *others), LIVENESS_S)

    assert all(r.operation == pb.OPERATION_ADD for r in replies)
    *_, busy, batch = embedder.calls
    assert busy == ["the first memory"]
    assert sorted(batch) == [f"memory number {i}" for i in range(8)]


async def test_an_add_past_its_deadline_is_answered_and_never_embedded(
    start_server: ServerFactory, embedder: GatedEmbedder, user_id: str
) -> None:
    server = await start_server()
    first = await embedder.hold(lambda: add(server, user_id, "keeps the model busy"))
    with pytest.raises(grpc.aio.AioRpcError) as late:
        await add(server, f"{user_id}-late", "arrives too late", deadline_s=0.2)
    batcher = server.app.embedding
    assert batcher is not None
    async with asyncio.timeout(LIVENESS_S):
        # The server's deadline timer fires a moment after the client's: the model stays
        # busy until the server has dropped the late call (polled: no event for it).
        while batcher.queued() > 0:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    embedder.release()
    await asyncio.wait_for(first, LIVENESS_S)
    await add(server, user_id, "after the gate opened")

    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "arrives too late" not in embedder.texts_embedded
    found = await server.stub.Retrieve(
        pb.RetrieveRequest(
            scope=scope(f"{user_id}-late"), tiers=[pb.TIER_LONG_TERM], query="too late"
        )
    )
    assert "arrives too late" not in [i.content for i in found.items]


async def test_concurrent_adds_of_one_user_share_a_model_call(
    start_server: ServerFactory, embedder: GatedEmbedder, user_id: str
) -> None:
    server = await start_server()
    first = await embedder.hold(lambda: add(server, user_id, "the first memory"))
    others = [asyncio.ensure_future(add(server, user_id, f"fact number {i}")) for i in range(8)]
    batcher = server.app.embedding
    assert batcher is not None
    async with asyncio.timeout(LIVENESS_S):
        while batcher.queued() < 8:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    embedder.release()
    replies = await asyncio.wait_for(asyncio.gather(first, *others), LIVENESS_S)

    assert all(r.operation == pb.OPERATION_ADD for r in replies)
    assert len({r.memory_id for r in replies}) == 9
    *_, busy, batch = embedder.calls
    assert busy == ["the first memory"]
    assert sorted(batch) == [f"fact number {i}" for i in range(8)]
    usage = await server.stub.Usage(pb.UsageRequest(scope=scope(user_id)))
    [long_term] = [t for t in usage.tiers if t.tier == pb.TIER_LONG_TERM]
    assert long_term.count == 9
