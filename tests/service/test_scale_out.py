"""Several replicas on one Redis (single or Cluster): hot-tier quotas hold across them,
one replica at a time runs maintenance, and the write-behind work is shared."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from memoryd.settings import RetentionSettings, WorkingSettings
from memoryd.stores.lease.redis_lease import MAINTENANCE_KEY, RedisLease
from memoryd.stores.queue.redis_stream import CLUSTER_STREAM, RedisStreamQueue
from memoryd.stores.redis_clients import AsyncClient, open_async
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer
from tests.support.rpc import scope

W = pb.TIER_WORKING


@pytest.fixture(params=["redis", "redis_cluster"])
def redis_target(request: pytest.FixtureRequest) -> tuple[str, bool]:
    """(url, is a cluster): every test runs on one Redis and on a Redis Cluster."""
    if request.param == "redis_cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return cluster.url, True
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url, False


async def replicas(
    start_server: ServerFactory, tmp_path: Path, target: tuple[str, bool], n: int, **kw: object
) -> list[RunningServer]:
    url, cluster = target
    return [
        await start_server(
            data_dir=tmp_path / f"replica-{i}",  # own embedded vectors; Redis is shared
            redis_url=url,
            redis_cluster=cluster,
            instance_id=f"replica-{i}",
            **kw,
        )
        for i in range(n)
    ]


async def eventually(check: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


@pytest.mark.parametrize("n_replicas", [2, 3])
async def test_concurrent_adders_across_replicas_never_overshoot_a_working_quota(
    start_server: ServerFactory,
    tmp_path: Path,
    redis_target: tuple[str, bool],
    user_id: str,
    n_replicas: int,
) -> None:
    servers = await replicas(
        start_server, tmp_path, redis_target, n_replicas, working=WorkingSettings(max_entries=20)
    )
    sc = scope(user_id, agent_id="agent", task_id="task")

    async def add(i: int) -> bool:
        request = pb.AddRequest(scope=sc, tier=W, key=f"k{i}", content="v")
        try:
            await servers[i % n_replicas].stub.Add(request)
            return True
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            return False

    accepted = await asyncio.gather(*(add(i) for i in range(50)))
    assert sum(accepted) == 20
    for server in servers:  # both replicas see the same 20 keys
        got = await server.stub.Get(
            pb.GetRequest(scope=sc, tier=W, keys=[f"k{i}" for i in range(50)])
        )
        assert sorted(i.key for i in got.items) == sorted(
            f"k{i}" for i, ok in enumerate(accepted) if ok
        )


async def test_a_replica_killed_mid_run_loses_no_acknowledged_write(
    start_server: ServerFactory, tmp_path: Path, redis_target: tuple[str, bool], user_id: str
) -> None:
    doomed, survivor = await replicas(start_server, tmp_path, redis_target, 2)
    sc = scope(user_id, agent_id="agent", task_id="task")
    acknowledged: list[str] = []
    half_done = asyncio.Event()

    async def add(i: int) -> None:
        server = doomed if i % 2 else survivor
        try:
            await server.stub.Add(pb.AddRequest(scope=sc, tier=W, key=f"k{i}", content="v"))
        except grpc.aio.AioRpcError:
            return  # never acknowledged: the caller knows it may be lost
        acknowledged.append(f"k{i}")
        if len(acknowledged) == 20:
            half_done.set()

    async def kill_midway() -> None:
        await half_done.wait()
        await doomed.server.stop(grace_s=0)  # in-flight calls are cut off

    await asyncio.gather(kill_midway(), *(add(i) for i in range(80)))
    got = await survivor.stub.Get(
        pb.GetRequest(scope=sc, tier=W, keys=[f"k{i}" for i in range(80)])
    )
    assert len(acknowledged) >= 20
    assert set(acknowledged) <= {i.key for i in got.items}


async def test_one_replica_at_a_time_holds_the_maintenance_lease(
    start_server: ServerFactory, tmp_path: Path, redis_target: tuple[str, bool]
) -> None:
    client = open_async(redis_target[0], cluster=redis_target[1])
    await client.delete(MAINTENANCE_KEY)
    retention = RetentionSettings(maintenance_lease_seconds=0.3)
    servers = await replicas(start_server, tmp_path, redis_target, 2, retention=retention)
    loops = [s.app.maintenance_loop for s in servers]

    await eventually(lambda: any(loop.leader for loop in loops), "a replica took the lease")
    [leader] = [s for s in servers if s.app.maintenance_loop.leader]
    [other] = [s for s in servers if s is not leader]
    # The follower has tried at least once by now (it renews as often), and failed.
    await asyncio.sleep(retention.maintenance_lease_seconds / 3 * 2)
    assert [loop.leader for loop in loops].count(True) == 1

    await leader.server.stop(grace_s=0)  # releases the lease: the other takes over
    await eventually(lambda: other.app.maintenance_loop.leader, "the other replica took over")
    await client.aclose()


async def test_a_lease_lapses_when_its_holder_stops_renewing(
    redis_target: tuple[str, bool],
) -> None:
    client: AsyncClient = open_async(redis_target[0], cluster=redis_target[1])
    key = f"memoryd:{{lease}}:test-{uuid.uuid4().hex}"
    first = RedisLease(client, "first", key=key, ttl_s=0.2)
    second = RedisLease(client, "second", key=key, ttl_s=0.2)
    assert await first.hold() and not await second.hold()
    assert await first.hold()  # renewing is holding
    await second.release()  # not its lease: nothing happens
    assert await first.holder() == "first"
    await asyncio.sleep(0.4)  # the first replica died: never renewed
    assert await second.hold() and not await first.hold()
    await second.release()
    assert await first.holder() is None
    await client.aclose()


async def test_write_behind_consumers_share_the_stream_without_duplicates(
    redis_target: tuple[str, bool],
) -> None:
    url, cluster = redis_target
    stream = f"{CLUSTER_STREAM}:{uuid.uuid4().hex}"  # one slot, a fresh stream per test
    queues = [
        RedisStreamQueue.from_url(url, f"replica-{i}", cluster=cluster, stream=stream)
        for i in range(2)
    ]
    for n in range(40):
        await queues[0].put({"n": n})
    seen: list[int] = []
    taken_by = [0, 0]

    async def consume(i: int) -> None:
        while batch := await queues[i].take(3, wait_s=0.05):
            taken_by[i] += len(batch)
            seen.extend(e.body["n"] for e in batch)
            await asyncio.sleep(0)  # let the other replica take its turn
            await queues[i].ack([e.id for e in batch])

    await asyncio.gather(consume(0), consume(1))
    assert sorted(seen) == list(range(40))  # each entry handed to exactly one replica
    assert all(taken_by)
    assert await queues[0].pending() == 0
    for queue in queues:
        await queue.close()


async def test_entries_a_dead_replica_left_pending_are_claimed_by_another(
    redis_target: tuple[str, bool],
) -> None:
    url, cluster = redis_target
    stream = f"{CLUSTER_STREAM}:{uuid.uuid4().hex}"
    client = open_async(url, cluster=cluster)
    dead = RedisStreamQueue(client, "dead", stream, claim_idle_ms=50)
    alive = RedisStreamQueue(client, "alive", stream, claim_idle_ms=50)
    for n in range(3):
        await dead.put({"n": n})
    assert len(await dead.take(10, wait_s=0.05)) == 3  # taken, never acked: it died
    await asyncio.sleep(0.1)  # past the idle bound
    claimed = await alive.take(10, wait_s=0.05)
    assert sorted(e.body["n"] for e in claimed) == [0, 1, 2]
    await alive.ack([e.id for e in claimed])
    assert await alive.pending() == 0
    await client.aclose()
