"""AddBatch over gRPC: many memories in one call, each with its own result or error; the
long-term items share one embedding batch and one store write, their quota checked for the
whole batch at once. Run on both vector adapters and both hot stores."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.rpc import code_pb2

from memoryd.stores.vectors.port import Filter, MatchValue
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.rpc import bad_request_fields, rpc_error, scope
from tests.support.scrape import scrape
from tests.support.vector_stores import QDRANT_LOCAL

LT = pb.TIER_LONG_TERM


def note(user: str, content: str, **fields: Any) -> pb.AddRequest:
    return pb.AddRequest(scope=scope(user), tier=LT, content=content, **fields)


def live_count(s: RunningServer, user_id: str) -> int:
    flt = Filter(
        must=[MatchValue("user_id", user_id), MatchValue("tier", "long_term")],
        must_not=[MatchValue("deleted", True)],
    )
    return s.app.vectors.count(flt)


@pytest.fixture(params=["edge+in_process", "qdrant+redis"])
async def starter(request: pytest.FixtureRequest, start_server: ServerFactory) -> ServerFactory:
    """Starts servers on embedded qdrant-edge with the in-process hot store, or on
    qdrant-client (local mode stands in for a Qdrant server) with a real Redis."""

    async def start(**overrides: object) -> RunningServer:
        if request.param == "edge+in_process":
            return await start_server(**overrides)
        redis_url = request.getfixturevalue("redis_server").url
        return await start_server(
            **QDRANT_LOCAL,
            redis_url=redis_url,
            **overrides,
        )

    return start


async def test_a_batch_of_several_tiers_stores_every_item_in_request_order(
    starter: ServerFactory, user_id: str
) -> None:
    s = await starter()
    reply = await s.stub.AddBatch(
        pb.AddBatchRequest(
            items=[
                note(user_id, "User enjoys skiing"),
                pb.AddRequest(
                    scope=scope(user_id, task_id="t1"),
                    tier=pb.TIER_WORKING,
                    key="step",
                    content="booking the flight",
                ),
                note(user_id, "User is allergic to peanuts", kind=pb.KIND_FACT),
                pb.AddRequest(
                    scope=scope(user_id, session_id="s1"),
                    tier=pb.TIER_SHORT_TERM,
                    role=pb.ROLE_ASSISTANT,
                    content="Your flight is booked.",
                ),
            ]
        )
    )
    assert [r.index for r in reply.results] == [0, 1, 2, 3]
    assert [r.tier for r in reply.results] == [LT, pb.TIER_WORKING, LT, pb.TIER_SHORT_TERM]
    assert all(r.memory_id and not r.HasField("error") for r in reply.results)
    assert (reply.succeeded_count, reply.failed_count) == (4, 0)
    assert reply.results[0].operation == pb.OPERATION_ADD
    long_term = await s.stub.Get(
        pb.GetRequest(
            scope=scope(user_id), tier=LT, ids=[reply.results[i].memory_id for i in (0, 2)]
        )
    )
    assert sorted(i.content for i in long_term.items) == [
        "User enjoys skiing",
        "User is allergic to peanuts",
    ]
    found = await s.stub.Retrieve(
        pb.RetrieveRequest(scope=scope(user_id), tiers=[LT], query="peanut allergy", top_k=1)
    )
    assert [i.id for i in found.items] == [reply.results[2].memory_id]
    working = await s.stub.Get(
        pb.GetRequest(scope=scope(user_id, task_id="t1"), tier=pb.TIER_WORKING, keys=["step"])
    )
    assert [i.content for i in working.items] == ["booking the flight"]


async def test_an_invalid_item_fails_alone_and_the_others_are_stored(
    starter: ServerFactory, user_id: str
) -> None:
    s = await starter()
    reply = await s.stub.AddBatch(
        pb.AddBatchRequest(
            items=[
                note(user_id, "User likes tea"),
                note(user_id, "   "),
                pb.AddRequest(scope=scope(user_id), tier=pb.TIER_WORKING, key="k", content="x"),
                pb.AddRequest(scope=scope(user_id), content="no tier named"),
                note(user_id, "User likes green tea most", importance=2.0),
                note(user_id, "User lives in Lisbon"),
            ]
        )
    )
    errors = {r.index: r.error for r in reply.results if r.HasField("error")}
    assert sorted(errors) == [1, 2, 3, 4]
    assert all(e.code == code_pb2.INVALID_ARGUMENT for e in errors.values())
    assert all(e.reason == "INVALID_ARGUMENT" for e in errors.values())
    assert [errors[i].field for i in (1, 2, 3, 4)] == [
        "content",
        "scope.task_id",
        "tier",
        "importance",
    ]
    assert all(not reply.results[i].memory_id for i in errors)
    assert [reply.results[i].operation for i in (0, 5)] == [pb.OPERATION_ADD] * 2
    assert (reply.succeeded_count, reply.failed_count) == (2, 4)
    assert live_count(s, user_id) == 2


async def test_the_count_quota_is_checked_for_the_whole_batch(
    starter: ServerFactory, user_id: str
) -> None:
    s = await starter(long_term={"max_memories": 5})
    await s.stub.Add(note(user_id, "An earlier memory"))
    await s.stub.Add(note(user_id, "Another earlier memory"))
    reply = await s.stub.AddBatch(
        pb.AddBatchRequest(items=[note(user_id, f"Batch memory number {i}") for i in range(5)])
    )
    # The items that fit are added in order; those past the limit fail, the others stand.
    assert [r.HasField("error") for r in reply.results] == [False] * 3 + [True] * 2
    assert [r.quota_remaining for r in reply.results[:3]] == [2, 1, 0]
    refused = [r.error for r in reply.results[3:]]
    assert all(e.code == code_pb2.RESOURCE_EXHAUSTED for e in refused)
    assert all(e.reason == "QUOTA_EXCEEDED" and "max: 5 memories" in e.message for e in refused)
    assert live_count(s, user_id) == 5


async def test_an_auto_prune_item_makes_room_within_the_batch(
    starter: ServerFactory, user_id: str
) -> None:
    s = await starter(long_term={"max_memories": 3})
    reply = await s.stub.AddBatch(
        pb.AddBatchRequest(
            items=[
                note(user_id, "First memory of three"),
                note(user_id, "Second memory of three"),
                note(user_id, "Third memory of three"),
                note(user_id, "A fourth memory that needs room", auto_prune=True),
                note(user_id, "A fifth memory without auto prune"),
            ]
        )
    )
    ops = [r.operation for r in reply.results[:4]]
    assert ops == [pb.OPERATION_ADD] * 3 + [pb.OPERATION_ADD_WITH_PRUNE]
    assert reply.results[4].error.code == code_pb2.RESOURCE_EXHAUSTED
    assert live_count(s, user_id) == 3


async def test_the_bytes_quota_refuses_the_items_that_overflow_it(
    starter: ServerFactory, user_id: str
) -> None:
    s = await starter(long_term={"max_bytes": 100})
    forty = "x" * 30 + " memory %d"  # 39 bytes each
    reply = await s.stub.AddBatch(
        pb.AddBatchRequest(
            items=[note(user_id, forty % i) for i in range(3)] + [note(user_id, "short one")]
        )
    )
    assert [r.HasField("error") for r in reply.results] == [False, False, True, False]
    error = reply.results[2].error
    assert error.code == code_pb2.RESOURCE_EXHAUSTED and "size quota" in error.message
    usage = await s.stub.Usage(pb.UsageRequest(scope=scope(user_id)))
    [long_term] = [t for t in usage.tiers if t.tier == LT]
    assert (long_term.count, long_term.bytes) == (3, 39 * 2 + 9)


async def test_the_same_memory_twice_in_a_batch_is_stored_once(
    starter: ServerFactory, user_id: str
) -> None:
    s = await starter()
    stored = await s.stub.Add(note(user_id, "User owns a red bicycle"))
    reply = await s.stub.AddBatch(
        pb.AddBatchRequest(
            items=[
                note(user_id, "User plays the violin"),
                note(user_id, "  user PLAYS the violin "),
                note(user_id, "User owns a red bicycle"),
                note(user_id, "Hello there", kind=pb.KIND_MESSAGE),
                note(user_id, "Hello there", kind=pb.KIND_MESSAGE),
            ]
        )
    )
    ops = [r.operation for r in reply.results]
    assert ops == [
        pb.OPERATION_ADD,
        pb.OPERATION_DEDUPLICATED,
        pb.OPERATION_DEDUPLICATED,
        pb.OPERATION_ADD,
        pb.OPERATION_ADD,
    ]
    assert reply.results[1].memory_id == reply.results[0].memory_id
    assert reply.results[2].memory_id == stored.memory_id
    # Conversation messages are never de-duplicated: each one happened.
    assert reply.results[3].memory_id != reply.results[4].memory_id
    assert live_count(s, user_id) == 4


async def test_several_users_in_one_batch_each_get_their_own_quota(
    starter: ServerFactory, user_id: str
) -> None:
    s = await starter(long_term={"max_memories": 1})
    other = user_id + "-b"
    reply = await s.stub.AddBatch(
        pb.AddBatchRequest(
            items=[
                note(user_id, "Memory of the first user"),
                note(other, "Memory of the second user"),
                note(user_id, "Second memory of the first user"),
            ]
        )
    )
    assert [r.HasField("error") for r in reply.results] == [False, False, True]
    assert (live_count(s, user_id), live_count(s, other)) == (1, 1)


async def test_an_empty_or_oversized_batch_is_refused_whole(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(limits={"max_batch_items": 3})
    empty = await rpc_error(s.stub.AddBatch(pb.AddBatchRequest()))
    assert empty.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(empty) == ["items"]
    items = [note(user_id, f"Memory {i}") for i in range(4)]
    err = await rpc_error(s.stub.AddBatch(pb.AddBatchRequest(items=items)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "1 to 3 items" in (err.details() or "")
    assert live_count(s, user_id) == 0
    reply = await s.stub.AddBatch(pb.AddBatchRequest(items=items[:3]))
    assert reply.succeeded_count == 3


async def test_the_long_term_items_take_one_embedding_call_and_one_upsert(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    calls = "memoryd_store_call_duration_seconds_count"
    before = await scrape(s.server.metrics_port)
    reply = await s.stub.AddBatch(
        pb.AddBatchRequest(items=[note(user_id, f"Distinct batch fact {i}") for i in range(6)])
    )
    after = await scrape(s.server.metrics_port)
    assert reply.succeeded_count == 6
    embeds = "memoryd_embedding_batch_size_count"
    assert after.total(embeds) - before.total(embeds) == 1
    texts = "memoryd_embedding_batch_size_sum"
    assert after.total(texts) - before.total(texts) == 6
    assert after.total(calls, operation="upsert") - before.total(calls, operation="upsert") == 1
