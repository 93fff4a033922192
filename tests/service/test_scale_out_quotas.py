"""Long-term quotas across replicas: several `memoryd serve` processes on one Redis (single
or Cluster) reserve each write on the shared usage counters, so 50 concurrent adders for
one user spread over the replicas never pass the count or the byte quota, and killing a
replica mid-run loses no acknowledged write.

Each replica keeps its own embedded vector store here (no Qdrant server on these machines);
the counters are the shared part under test, so what the replicas store is summed. The
servers embed through the OpenAI-compatible test stub, so each start takes seconds."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memoryd.stores.usage.port import CounterKey
from memoryd.stores.usage.redis_counters import RedisCounters
from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc
from tests.support.openai_stub import OpenAIStub, running_openai_stub
from tests.support.redis_cluster import RedisCluster, on_family
from tests.support.redis_server import RedisServer, free_port
from tests.support.rpc import FAST_RECONNECT, REPLICAS, scope
from tests.support.write_load import missing_long_term

SERVICE_DIR = Path(__file__).resolve().parents[2] / "service"
LT, E = pb.TIER_LONG_TERM, pb.TIER_ENTITY
MAX_MEMORIES, MAX_BYTES = 20, 600


@pytest.fixture(params=["redis", "redis_cluster"])
def redis_target(request: pytest.FixtureRequest) -> tuple[str, bool]:
    if request.param == "redis_cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return cluster.url, True
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url, False


ON_REDIS = on_family("redis_target", "redis")  # a test without either runs on both
ON_CLUSTER = on_family("redis_target", "redis_cluster")


@pytest.fixture
def embeddings() -> Iterator[OpenAIStub]:
    with running_openai_stub(dim=8) as stub:
        yield stub


class Replica:
    def __init__(self, proc: asyncio.subprocess.Process, channel: grpc.aio.Channel) -> None:
        self.proc = proc
        self.stub = memory_pb2_grpc.MemoryServiceStub(channel)


@asynccontextmanager
async def replica(
    data: Path,
    name: str,
    target: tuple[str, bool],
    embeddings: OpenAIStub,
    extra_env: dict[str, str] | None = None,
) -> AsyncIterator[Replica]:
    """A `memoryd serve` process on its own data directory and the shared Redis."""
    listen = f"127.0.0.1:{free_port()}"
    url, cluster = target
    env = {
        **os.environ,
        "PYTHONPATH": str(SERVICE_DIR),
        "MEMORYD_DATA_DIR": str(data),
        "MEMORYD_LISTEN": listen,
        "MEMORYD_METRICS__LISTEN": "",
        "MEMORYD_REDIS_URL": url,
        "MEMORYD_REDIS_CLUSTER": "true" if cluster else "false",
        "MEMORYD_INSTANCE_ID": name,
        "MEMORYD_LONG_TERM__MAX_MEMORIES": str(MAX_MEMORIES),
        "MEMORYD_LONG_TERM__MAX_BYTES": str(MAX_BYTES),
        # Each replica's store holds only its own share here: no recount against it.
        "MEMORYD_RETENTION__MAINTENANCE_INTERVAL_SECONDS": "0",
        "MEMORYD_EMBEDDER__PROVIDER": "openai",
        "MEMORYD_EMBEDDER__OPENAI_BASE_URL": embeddings.url,
        "MEMORYD_EMBEDDER__OPENAI_API_KEY": "sk-test",
        "MEMORYD_EMBEDDER__OPENAI_DIMENSIONS": "8",
        **(extra_env or {}),
    }
    log = os.open(data.with_suffix(".log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memoryd", "serve", env=env, stderr=log
        )
    finally:
        os.close(log)
    try:
        async with grpc.aio.insecure_channel(listen, options=FAST_RECONNECT) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            async with asyncio.timeout(120):
                while True:
                    assert proc.returncode is None, f"{name} exited; see its log"
                    try:
                        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                        if reply.status == health_pb2.HealthCheckResponse.SERVING:
                            break
                    except grpc.aio.AioRpcError:
                        pass
                    await asyncio.sleep(0.1)
            yield Replica(proc, channel)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        await proc.wait()


async def started(
    stack: AsyncExitStack,
    n: int,
    tmp_path: Path,
    target: tuple[str, bool],
    embeddings: OpenAIStub,
    extra_env: dict[str, str] | None = None,
) -> list[Replica]:
    """`n` replicas on the shared Redis, started at once, stopped when `stack` closes."""
    async with asyncio.TaskGroup() as group:  # one failing to start cancels the others
        starting = [
            group.create_task(
                stack.enter_async_context(
                    replica(tmp_path / name, name, target, embeddings, extra_env)
                )
            )
            for name in (f"replica-{i}" for i in range(n))
        ]
    return [task.result() for task in starting]


async def stored(replicas: list[Replica], user: str) -> tuple[int, int]:
    """What every replica's store holds for the user, summed: memories and content bytes."""
    count = size = 0
    for r in replicas:
        dump = [x async for x in r.stub.Export(pb.ExportRequest(scope=scope(user), tiers=[LT]))]
        items = [x.item for x in dump if x.HasField("item") and not x.item.deleted]
        count += len(items)
        size += sum(len(i.content.encode()) for i in items)
    return count, size


async def counted(r: Replica, user: str) -> tuple[int, int]:
    usage = await r.stub.Usage(pb.UsageRequest(scope=scope(user)))
    [lt] = [t for t in usage.tiers if t.tier == LT]
    return lt.count, lt.bytes


async def add_concurrently(replicas: list[Replica], user: str, contents: list[str]) -> list[str]:
    """One adder per content, spread over the replicas; the ids acknowledged."""

    async def add(i: int, content: str) -> str | None:
        request = pb.AddRequest(scope=scope(user), tier=LT, content=content)
        try:
            return (await replicas[i % len(replicas)].stub.Add(request)).memory_id
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
            return None

    done = await asyncio.gather(*(add(i, c) for i, c in enumerate(contents)))
    return [i for i in done if i is not None]


@pytest.mark.slow  # several server processes
@ON_REDIS
async def test_fifty_adders_across_replicas_never_pass_the_count_or_byte_quota(
    tmp_path: Path,
    redis_target: tuple[str, bool],
    embeddings: OpenAIStub,
    user_id: str,
) -> None:
    async with AsyncExitStack() as stack:
        replicas = await started(stack, REPLICAS, tmp_path, redis_target, embeddings)
        # Short memories: the count binds (20 x 9 bytes is far under 600).
        by_count = f"{user_id}-n"
        acked = await add_concurrently(replicas, by_count, [f"Fact {n:04d}" for n in range(50)])
        assert len(acked) == MAX_MEMORIES
        assert await stored(replicas, by_count) == (MAX_MEMORIES, 9 * MAX_MEMORIES)
        for r in replicas:
            assert await counted(r, by_count) == (MAX_MEMORIES, 9 * MAX_MEMORIES)

        # 40-byte memories: the bytes bind (15 x 40 = 600, under 20 memories).
        by_bytes = f"{user_id}-b"
        long = [f"A forty byte memory, number {n:04d}".ljust(40, ".") for n in range(50)]
        assert {len(c) for c in long} == {40}
        acked = await add_concurrently(replicas, by_bytes, long)
        assert len(acked) == MAX_BYTES // 40
        assert await stored(replicas, by_bytes) == (MAX_BYTES // 40, MAX_BYTES)
        assert await counted(replicas[-1], by_bytes) == (MAX_BYTES // 40, MAX_BYTES)


@pytest.mark.slow  # several server processes, one killed
@ON_CLUSTER
async def test_a_replica_killed_mid_run_loses_no_acknowledged_write_and_the_quota_holds(
    tmp_path: Path, redis_target: tuple[str, bool], embeddings: OpenAIStub, user_id: str
) -> None:
    doomed_dir = tmp_path / "doomed"
    acked: list[str] = []
    some_acked = asyncio.Event()
    async with replica(tmp_path / "survivor", "survivor", redis_target, embeddings) as survivor:
        async with replica(doomed_dir, "doomed", redis_target, embeddings) as doomed:

            async def add(i: int) -> None:
                target = doomed if i % 2 else survivor
                request = pb.AddRequest(scope=scope(user_id), tier=LT, content=f"Fact {i:04d}")
                try:
                    reply = await target.stub.Add(request)
                except grpc.aio.AioRpcError:
                    return  # refused (quota) or cut off: never acknowledged
                acked.append(reply.memory_id)
                if len(acked) == 8:
                    some_acked.set()

            async def kill_midway() -> None:
                await some_acked.wait()
                doomed.proc.send_signal(signal.SIGKILL)  # calls in flight are cut off
                await doomed.proc.wait()

            await asyncio.gather(kill_midway(), *(add(i) for i in range(60)))

        async with replica(doomed_dir, "doomed-again", redis_target, embeddings) as restarted:
            both = [survivor, restarted]
            missing = set(acked)
            for r in both:
                missing &= set(await missing_long_term(r.stub, user_id, acked))
            assert missing == set()  # every acknowledged write is in one of the stores
            count, size = await stored(both, user_id)
            assert count <= MAX_MEMORIES
            # A reservation the killed replica never settled may keep its room for a while
            # (until maintenance recounts), never less than what is stored.
            held, held_bytes = await counted(survivor, user_id)
            assert held >= count and held_bytes >= size


MAX_ENTITIES = MAX_RELATIONS = 20
ENTITY_QUOTA = {
    "MEMORYD_QUOTAS__PROFILES": json.dumps(
        {"default": {"entity_max_entities": MAX_ENTITIES, "entity_max_relations": MAX_RELATIONS}}
    )
}


async def stored_entities(replicas: list[Replica], user: str) -> tuple[int, int]:
    """Entities and relations every replica's store holds for the user, summed."""
    entities = relations = 0
    for r in replicas:
        dump = [x async for x in r.stub.Export(pb.ExportRequest(scope=scope(user), tiers=[E]))]
        items = [x.item for x in dump if x.HasField("item") and not x.item.deleted]
        entities += sum(i.HasField("entity") for i in items)
        relations += sum(i.HasField("relation") for i in items)
    return entities, relations


async def counted_entities(target: tuple[str, bool], user: str) -> tuple[int, int]:
    """The shared entity and relation counters (0: never used, so never built)."""
    counters = RedisCounters.from_url(target[0], cluster=target[1])
    try:
        got = [
            await counters.get(CounterKey("default", user, f"entity/{kind}"))
            for kind in ("entities", "relations")
        ]
    finally:
        await counters.close()
    return tuple(c.count if c is not None else 0 for c in got)  # type: ignore[return-value]


@pytest.mark.slow  # several server processes
@ON_CLUSTER
async def test_fifty_adders_across_replicas_never_pass_the_entity_or_relation_quota(
    tmp_path: Path,
    redis_target: tuple[str, bool],
    embeddings: OpenAIStub,
    user_id: str,
) -> None:
    async with AsyncExitStack() as stack:
        replicas = await started(stack, REPLICAS, tmp_path, redis_target, embeddings, ENTITY_QUOTA)

        async def add(i: int, request: pb.AddRequest) -> bool:
            try:
                await replicas[i % REPLICAS].stub.Add(request)
            except grpc.aio.AioRpcError as err:
                assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
                return False
            return True

        people = f"{user_id}-e"
        named = [
            pb.AddRequest(scope=scope(people), tier=E, entity=pb.Entity(name=f"Person {n}"))
            for n in range(50)
        ]
        acked = await asyncio.gather(*(add(i, r) for i, r in enumerate(named)))
        assert sum(acked) == MAX_ENTITIES
        assert await stored_entities(replicas, people) == (MAX_ENTITIES, 0)
        assert await counted_entities(redis_target, people) == (MAX_ENTITIES, 0)

        # Each replica's own store makes its own two ends here (4 or 6 entities, in quota).
        links = f"{user_id}-r"
        related = [
            pb.AddRequest(
                scope=scope(links),
                tier=E,
                relation=pb.Relation(subject="Alpha", predicate=f"rel {n}", object="Beta"),
            )
            for n in range(50)
        ]
        acked = await asyncio.gather(*(add(i, r) for i, r in enumerate(related)))
        assert sum(acked) == MAX_RELATIONS
        entities, relations = await stored_entities(replicas, links)
        assert relations == MAX_RELATIONS and entities <= 2 * REPLICAS
        assert await counted_entities(redis_target, links) == (entities, relations)
