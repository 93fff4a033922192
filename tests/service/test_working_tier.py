"""Working memory over gRPC: key/value per task, LRU past 10 KB, 100 keys, cleared at task end."""

from __future__ import annotations

import grpc
import pytest

from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory, server_on
from tests.support.rpc import quota_failure, rpc_error, scope

W = pb.TIER_WORKING


@pytest.fixture(params=["in_process", "redis", "redis_cluster"])
async def memoryd(request: pytest.FixtureRequest, start_server: ServerFactory) -> RunningServer:
    """This hot-tier suite runs on every hot store: in-process, one Redis, a Redis Cluster."""
    return await server_on(request, start_server, request.param)


def task(user_id: str, task_id: str = "task-1") -> pb.Scope:
    return scope(user_id, agent_id="travel_agent", task_id=task_id)


async def add(s: RunningServer, sc: pb.Scope, key: str, content: str) -> pb.AddResponse:
    return await s.stub.Add(pb.AddRequest(scope=sc, tier=W, key=key, content=content))


async def test_add_returns_an_id_and_the_remaining_quota(
    memoryd: RunningServer, user_id: str
) -> None:
    reply = await add(memoryd, task(user_id), "current_task", "book flight to Paris")
    assert reply.memory_id
    assert reply.operation == pb.OPERATION_ADD
    assert reply.tier == W
    assert reply.quota_remaining == 99
    assert reply.latency_ms > 0


async def test_replacing_a_key_keeps_its_id_and_reports_updated(
    memoryd: RunningServer, user_id: str
) -> None:
    first = await add(memoryd, task(user_id), "destination", "Paris")
    second = await add(memoryd, task(user_id), "destination", "Rome")
    assert second.operation == pb.OPERATION_UPDATED
    assert second.memory_id == first.memory_id
    got = await memoryd.stub.Get(pb.GetRequest(scope=task(user_id), tier=W, keys=["destination"]))
    assert [i.content for i in got.items] == ["Rome"]


async def test_get_by_key_and_by_id_and_report_missing(
    memoryd: RunningServer, user_id: str
) -> None:
    added = await add(memoryd, task(user_id), "destination", "Paris")
    got = await memoryd.stub.Get(
        pb.GetRequest(scope=task(user_id), tier=W, ids=[added.memory_id], keys=["nope"])
    )
    assert [(i.id, i.key, i.content) for i in got.items] == [
        (added.memory_id, "destination", "Paris")
    ]
    assert list(got.missing) == ["nope"]


async def test_delete_by_key(memoryd: RunningServer, user_id: str) -> None:
    await add(memoryd, task(user_id), "a", "1")
    reply = await memoryd.stub.Delete(pb.DeleteRequest(scope=task(user_id), tier=W, keys=["a"]))
    assert reply.deleted_count == 1
    got = await memoryd.stub.Get(pb.GetRequest(scope=task(user_id), tier=W, keys=["a"]))
    assert not got.items


async def test_values_past_10_kb_evict_the_least_recently_used(
    memoryd: RunningServer, user_id: str
) -> None:
    sc = task(user_id)
    for key in ("k1", "k2", "k3"):
        await add(memoryd, sc, key, "x" * 3000)  # 3,002 bytes each: three fit in 10,240
    await memoryd.stub.Get(pb.GetRequest(scope=sc, tier=W, keys=["k1"]))  # k1 is used again
    reply = await add(memoryd, sc, "k4", "y" * 3000)
    assert list(reply.evicted_keys) == ["k2"]
    left = await memoryd.stub.Retrieve(
        pb.RetrieveRequest(scope=sc, tiers=[W], top_k=100, token_budget=16_000)
    )
    assert sorted(i.key for i in left.items) == ["k1", "k3", "k4"]


async def test_the_101st_key_is_refused_with_the_limit(
    memoryd: RunningServer, user_id: str
) -> None:
    sc = task(user_id)
    for i in range(100):
        await add(memoryd, sc, f"k{i}", "v")
    err = await rpc_error(add(memoryd, sc, "k100", "v"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max: 100" in (err.details() or "")
    assert quota_failure(err).violations
    got = await memoryd.stub.Get(pb.GetRequest(scope=sc, tier=W, keys=["k100"]))
    assert list(got.missing) == ["k100"]


async def test_ending_the_task_clears_its_working_memory_only(
    memoryd: RunningServer, user_id: str
) -> None:
    await add(memoryd, task(user_id, "t1"), "a", "1")
    await add(memoryd, task(user_id, "t1"), "b", "2")
    await add(memoryd, task(user_id, "t2"), "c", "3")
    reply = await memoryd.stub.Prune(
        pb.PruneRequest(scope=task(user_id, "t1"), tiers=[W], strategy=pb.PRUNE_STRATEGY_ALL)
    )
    assert reply.deleted_count == 2
    gone = await memoryd.stub.Retrieve(pb.RetrieveRequest(scope=task(user_id, "t1"), tiers=[W]))
    kept = await memoryd.stub.Retrieve(pb.RetrieveRequest(scope=task(user_id, "t2"), tiers=[W]))
    assert not gone.items
    assert [i.key for i in kept.items] == ["c"]


async def test_a_dry_run_prune_changes_nothing(memoryd: RunningServer, user_id: str) -> None:
    await add(memoryd, task(user_id), "a", "1")
    reply = await memoryd.stub.Prune(
        pb.PruneRequest(
            scope=task(user_id), tiers=[W], strategy=pb.PRUNE_STRATEGY_ALL, dry_run=True
        )
    )
    assert reply.deleted_count == 1 and reply.dry_run
    left = await memoryd.stub.Retrieve(pb.RetrieveRequest(scope=task(user_id), tiers=[W]))
    assert len(left.items) == 1


async def test_a_query_returns_only_the_entries_sharing_words_with_it(
    memoryd: RunningServer, user_id: str
) -> None:
    # Working entries come first in a multi-tier retrieve: stale keys must not crowd out
    # relevant memories, so an entry the query does not touch is not returned.
    await add(memoryd, task(user_id), "destination", "Paris")
    await add(memoryd, task(user_id), "budget", "500 euros")
    await add(memoryd, task(user_id), "airline", "any")
    reply = await memoryd.stub.Retrieve(
        pb.RetrieveRequest(scope=task(user_id), tiers=[W], query="what is the budget?")
    )
    assert [i.key for i in reply.items] == ["budget"]
    assert reply.items[0].score > 0
    assert reply.total_count == 1


async def test_users_never_see_each_others_working_memory(memoryd: RunningServer) -> None:
    await add(memoryd, task("alice"), "secret", "alice's plan")
    reply = await memoryd.stub.Retrieve(pb.RetrieveRequest(scope=task("bob"), tiers=[W]))
    assert not reply.items
    got = await memoryd.stub.Get(pb.GetRequest(scope=task("bob"), tier=W, keys=["secret"]))
    assert not got.items
