"""Long-term, episodic (per agent) and structured usage is counted on every write path
(Add, AddBatch, message copies, Import, Delete, every Prune, expiry, archive, erasure), so
quota checks never read the user's memories and concurrent Adds never pass a quota; the
counters always agree with what the store holds, a failed write gives its room back, and
maintenance (or first use) rebuilds a counter that drifted or was lost. Each test runs
with the in-process counters, on one Redis and on a Redis Cluster."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis
from google.protobuf.timestamp_pb2 import Timestamp

from memoryd.stores.embeddings.openai_embedder import OpenAIEmbedder
from memoryd.stores.usage.port import CounterKey
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.clock import MovableClock
from tests.support.openai_stub import start_openai_stub
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer
from tests.support.rpc import import_requests, quota_failure, rpc_error, scope

LT, ST = pb.TIER_LONG_TERM, pb.TIER_SHORT_TERM
EP, SD = pb.TIER_EPISODIC, pb.TIER_STRUCTURED
DAY_S = 86_400


async def held(s: RunningServer, user: str) -> tuple[int, int]:
    """What the store holds for the user (from Export): memories not deleted, and their
    content bytes."""
    dump = [r async for r in s.stub.Export(pb.ExportRequest(scope=scope(user), tiers=[LT]))]
    items = [r.item for r in dump if r.HasField("item") and not r.item.deleted]
    return len(items), sum(len(i.content.encode()) for i in items)


async def counted(s: RunningServer, user: str) -> tuple[int, int]:
    usage = await s.stub.Usage(pb.UsageRequest(scope=scope(user)))
    [lt] = [t for t in usage.tiers if t.tier == LT]
    return lt.count, lt.bytes


async def agree(s: RunningServer, user: str) -> tuple[int, int]:
    now = await held(s, user)
    assert await counted(s, user) == now
    return now


def at(epoch_s: float) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(datetime.fromtimestamp(epoch_s, UTC))
    return ts


def add(user: str, content: str, **kw: Any) -> pb.AddRequest:
    return pb.AddRequest(scope=scope(user), tier=LT, content=content, **kw)


def import_stream(user: str, contents: list[str]) -> Iterator[pb.ImportRequest]:
    items = [
        pb.MemoryItem(id=str(uuid.uuid4()), tier=LT, kind=pb.KIND_NOTE, content=c) for c in contents
    ]
    yield from import_requests(user, items)


async def test_usage_follows_every_write_path(
    start_server: ServerFactory, redis_family: dict[str, Any], user_id: str
) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock, **redis_family)
    u = user_id
    kept = await s.stub.Add(add(u, "The user likes green tea"))
    await s.stub.Add(add(u, "The user likes green tea"))  # deduplicated: nothing more held
    await s.stub.Add(add(u, "Lives in Lisbon", metadata={"topic": "home"}))
    await s.stub.Add(add(u, "Leaves soon", expires_at=at(clock.now + DAY_S)))
    assert await agree(s, u) == (3, 50)

    batch = [add(u, f"Batch fact number {n}") for n in range(3)]
    await s.stub.AddBatch(pb.AddBatchRequest(items=batch))
    assert (await agree(s, u))[0] == 6

    for text in ("Hello there", "How are you?"):
        said = pb.AddRequest(scope=scope(u, session_id="chat"), tier=ST, content=text)
        await s.stub.Add(said)
    await s.app.copier.drain()  # the durable copies in long-term memory
    assert (await agree(s, u))[0] == 8

    reply = await s.stub.Import(import_stream(u, ["Imported one", "Imported two"]))
    assert reply.imported_count == 2
    assert (await agree(s, u))[0] == 10

    await s.stub.Delete(pb.DeleteRequest(scope=scope(u), tier=LT, ids=[kept.memory_id]))
    await s.stub.Delete(pb.DeleteRequest(scope=scope(u), tier=LT, ids=[kept.memory_id]))
    assert (await agree(s, u))[0] == 9

    await s.stub.Prune(
        pb.PruneRequest(
            scope=scope(u),
            tiers=[LT],
            strategy=pb.PRUNE_STRATEGY_BY_FILTER,
            filters={"topic": "home"},
        )
    )
    assert (await agree(s, u))[0] == 8

    await s.stub.Prune(
        pb.PruneRequest(
            scope=scope(u), tiers=[LT], strategy=pb.PRUNE_STRATEGY_OLDEST_PERCENT, percent=20
        )
    )
    assert (await agree(s, u))[0] == 6

    clock.advance(2 * DAY_S)  # "Leaves soon" expired; the purge removes it (and the deleted one)
    await s.stub.Prune(
        pb.PruneRequest(scope=scope(u), tiers=[LT], strategy=pb.PRUNE_STRATEGY_EXPIRED)
    )
    assert (await agree(s, u))[0] == 5

    clock.advance(400 * DAY_S)  # past long-term retention: archived by maintenance
    await s.stub.Add(add(u, "A new memory after a year"))
    report = await s.app.maintenance.run_once()
    assert report.archived >= 5 and report.corrected == 0
    assert await agree(s, u) == (1, len(b"A new memory after a year"))

    await s.stub.Prune(pb.PruneRequest(scope=scope(u), strategy=pb.PRUNE_STRATEGY_ALL))
    assert await agree(s, u) == (0, 0)


async def test_auto_prune_and_refusals_keep_the_count_exact(
    start_server: ServerFactory, redis_family: dict[str, Any], user_id: str
) -> None:
    s = await start_server(long_term={"max_memories": 10, "max_bytes": 400}, **redis_family)
    for n in range(10):
        await s.stub.Add(add(user_id, f"Fact {n}"))
    err = await rpc_error(s.stub.Add(add(user_id, "One too many")))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert quota_failure(err).violations[0].subject == f"long_term:{user_id}"
    pruned = await s.stub.Add(add(user_id, "Makes room", auto_prune=True))
    assert pruned.operation == pb.OPERATION_ADD_WITH_PRUNE
    assert await agree(s, user_id) == (10, 6 * 9 + len(b"Makes room"))
    big = await rpc_error(s.stub.Add(add(user_id, "x" * 400, auto_prune=True)))
    assert "max: 400 bytes" in (big.details() or "")
    await agree(s, user_id)


async def test_a_failed_write_gives_its_room_back(
    start_server: ServerFactory, user_id: str
) -> None:
    api = start_openai_stub(dim=8)
    try:
        model = OpenAIEmbedder("k", base_url=api.url, dimensions=8, max_retries=0)
        s = await start_server(model=model, long_term={"max_memories": 2})
        await s.stub.Add(add(user_id, "First"))
        api.behaviour.status = 400  # the next write fails
        err = await rpc_error(s.stub.Add(add(user_id, "Never stored")))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        api.behaviour.status = 200
        assert await agree(s, user_id) == (1, len(b"First"))
        await s.stub.Add(add(user_id, "Second"))  # the failed write kept no room
        assert (await agree(s, user_id))[0] == 2
    finally:
        api.stop()


async def test_maintenance_corrects_a_counter_that_drifted(
    start_server: ServerFactory, redis_family: dict[str, Any], user_id: str
) -> None:
    s = await start_server(long_term={"max_memories": 5}, **redis_family)
    for n in range(3):
        await s.stub.Add(add(user_id, f"Fact {n}"))
    key = CounterKey("default", user_id, "long_term")
    # Drift: a removal counted that never happened in the store.
    await s.app.counters.forget(key, {str(uuid.uuid4()): 6, str(uuid.uuid4()): 6})
    assert await counted(s, user_id) == (1, 6)
    report = await s.app.maintenance.run_once()
    assert report.corrected == 1
    assert await agree(s, user_id) == (3, 18)
    for n in range(3, 5):
        await s.stub.Add(add(user_id, f"Fact {n}"))
    full = await rpc_error(s.stub.Add(add(user_id, "Over the quota")))
    assert full.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a_counter_lost_with_the_redis_data_is_rebuilt_from_the_store(
    start_server: ServerFactory, redis_server: RedisServer, user_id: str
) -> None:
    s = await start_server(redis_url=redis_server.url, long_term={"max_memories": 4})
    for n in range(4):
        await s.stub.Add(add(user_id, f"Fact {n}"))
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        await client.flushall()  # Redis restarted empty
    finally:
        await client.aclose()
    full = await rpc_error(s.stub.Add(add(user_id, "Not read as zero")))
    assert full.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await agree(s, user_id) == (4, 24)


async def test_a_counter_dropped_on_a_cluster_is_rebuilt_from_the_store(
    start_server: ServerFactory, redis_cluster: RedisCluster, user_id: str
) -> None:
    s = await start_server(
        redis_url=redis_cluster.url, redis_cluster=True, long_term={"max_memories": 4}
    )
    for n in range(3):
        await s.stub.Add(add(user_id, f"Fact {n}"))
    await s.app.counters.drop(CounterKey("default", user_id, "long_term"))
    assert await counted(s, user_id) == (3, 18)
    await s.stub.Add(add(user_id, "Fact 3"))
    full = await rpc_error(s.stub.Add(add(user_id, "Over")))
    assert full.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def exported(s: RunningServer, user: str, tier: pb.Tier.ValueType) -> list[pb.MemoryItem]:
    dump = [r async for r in s.stub.Export(pb.ExportRequest(scope=scope(user), tiers=[tier]))]
    return [r.item for r in dump if r.HasField("item") and not r.item.deleted]


async def usage_of(s: RunningServer, user: str, tier: pb.Tier.ValueType) -> tuple[int, int]:
    usage = await s.stub.Usage(pb.UsageRequest(scope=scope(user)))
    [t] = [t for t in usage.tiers if t.tier == tier]
    return t.count, t.bytes


def episode(n: int) -> pb.Episode:
    return pb.Episode(task=f"Task number {n}", steps=[pb.EpisodeStep(action=f"step {n}")])


def document(n: int, pad: str = "") -> str:
    return f'{{"order": {n}, "note": "{pad}"}}'


async def test_episodic_counters_per_agent_follow_adds_deletes_and_prunes(
    start_server: ServerFactory, redis_family: dict[str, Any], user_id: str
) -> None:
    s = await start_server(episodic={"max_episodes_per_agent": 3}, **redis_family)
    added: dict[str, list[str]] = {"planner": [], "coder": []}
    for n, agent in enumerate(["planner"] * 3 + ["coder"] * 2):
        sc = scope(user_id, agent_id=agent)
        reply = await s.stub.Add(pb.AddRequest(scope=sc, tier=EP, episode=episode(n)))
        added[agent].append(reply.memory_id)
    full = await rpc_error(
        s.stub.Add(
            pb.AddRequest(scope=scope(user_id, agent_id="planner"), tier=EP, episode=episode(9))
        )
    )
    assert full.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # the quota is per agent...
    await s.stub.Add(
        pb.AddRequest(scope=scope(user_id, agent_id="coder"), tier=EP, episode=episode(5))
    )  # ...so another agent still has room
    await s.stub.Delete(pb.DeleteRequest(scope=scope(user_id), tier=EP, ids=[added["planner"][0]]))
    await s.stub.Prune(
        pb.PruneRequest(
            scope=scope(user_id), tiers=[EP], strategy=pb.PRUNE_STRATEGY_OLDEST_PERCENT, percent=20
        )
    )
    items = await exported(s, user_id, EP)
    assert await usage_of(s, user_id, EP) == (
        len(items),
        sum(len(i.content.encode()) for i in items),
    )
    for agent in ("planner", "coder"):
        mine = [i for i in items if i.agent_id == agent]
        got = await s.app.counters.get(CounterKey("default", user_id, f"episodic/{agent}"))
        assert got is not None
        assert (got.count, got.bytes) == (len(mine), sum(len(i.content.encode()) for i in mine))


async def test_structured_counters_follow_adds_deletes_and_prunes_in_json_bytes(
    start_server: ServerFactory, redis_family: dict[str, Any], user_id: str
) -> None:
    s = await start_server(structured={"max_documents": 4, "max_bytes": 200}, **redis_family)
    ids = []
    for n in range(4):
        reply = await s.stub.Add(
            pb.AddRequest(scope=scope(user_id), tier=SD, document_json=document(n))
        )
        ids.append(reply.memory_id)
    full = await rpc_error(
        s.stub.Add(pb.AddRequest(scope=scope(user_id), tier=SD, document_json=document(4)))
    )
    assert full.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    pruned = await s.stub.Add(
        pb.AddRequest(scope=scope(user_id), tier=SD, document_json=document(5), auto_prune=True)
    )
    assert pruned.operation == pb.OPERATION_ADD_WITH_PRUNE
    await s.stub.Delete(pb.DeleteRequest(scope=scope(user_id), tier=SD, ids=[ids[-1]]))
    big = await rpc_error(
        s.stub.Add(
            pb.AddRequest(scope=scope(user_id), tier=SD, document_json=document(6, "x" * 150))
        )
    )
    assert "max: 200 bytes" in (big.details() or "")
    items = await exported(s, user_id, SD)
    assert len(items) == 3
    assert await usage_of(s, user_id, SD) == (3, sum(len(i.document_json.encode()) for i in items))
    await s.stub.Prune(
        pb.PruneRequest(scope=scope(user_id), tiers=[SD], strategy=pb.PRUNE_STRATEGY_ALL)
    )
    assert await usage_of(s, user_id, SD) == (0, 0)


@pytest.mark.parametrize("tier", [EP, SD])
async def test_concurrent_adds_never_pass_the_reservation(
    start_server: ServerFactory, redis_server: RedisServer, user_id: str, tier: pb.Tier.ValueType
) -> None:
    s = await start_server(
        redis_url=redis_server.url,
        episodic={"max_episodes_per_agent": 5},
        structured={"max_documents": 5},
    )
    sc = scope(user_id, agent_id="planner")

    async def one(n: int) -> grpc.StatusCode:
        body: dict[str, Any] = (
            {"episode": episode(n)} if tier == EP else {"document_json": document(n)}
        )
        try:
            await s.stub.Add(pb.AddRequest(scope=sc, tier=tier, **body))
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK

    codes = await asyncio.gather(*(one(n) for n in range(20)))
    assert codes.count(grpc.StatusCode.OK) == 5
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 15
    items = await exported(s, user_id, tier)
    assert len(items) == 5
    assert (await usage_of(s, user_id, tier))[0] == 5
