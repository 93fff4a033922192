"""Several `memoryd serve` processes on one Redis (single, and a 3-master Redis Cluster):
the write-behind copy is shared without duplicates and survives a replica killed while it
held messages, maintenance runs on one replica at a time, and SIGTERM flushes what the
replica had queued before it exits 0.

Each replica keeps its own embedded vector store (its own data directory) while Redis is
shared: a message copied twice, or by the wrong replica, would then show up as two stored
copies across the replicas. Embeddings come from a stub, so no process loads a model.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memoryd.stores.lease.redis_lease import MAINTENANCE_KEY
from memoryd.stores.queue.redis_stream import CLUSTER_STREAM, STREAM
from memoryd.stores.redis_clients import AsyncClient, open_async
from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc
from tests.support.openai_stub import OpenAIStub, start_openai_stub
from tests.support.redis_cluster import RedisCluster, on_family
from tests.support.redis_server import RedisServer, free_port
from tests.support.rpc import FAST_RECONNECT, REPLICAS, scope

ROOT = Path(__file__).resolve().parents[2]
SERVING = health_pb2.HealthCheckResponse.SERVING
ST = pb.TIER_SHORT_TERM
MAINTENANCE_RUN = "maintenance: "  # the line a finished maintenance run logs


class Replica:
    """One `memoryd serve` process; its log goes to a file the test reads."""

    def __init__(self, name: str, directory: Path, env: dict[str, str], data: str = "") -> None:
        self.name = name
        self.port = free_port()
        self.log_path = directory / f"{name}.log"
        self.data_dir = directory / (data or name)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "serve"],
            env={
                **env,
                "MEMORYD_LISTEN": f"127.0.0.1:{self.port}",
                "MEMORYD_DATA_DIR": str(self.data_dir),
                "MEMORYD_INSTANCE_ID": name,
            },
            stderr=self._log,
            stdout=subprocess.DEVNULL,
        )
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}", options=FAST_RECONNECT)
        self.stub = memory_pb2_grpc.MemoryServiceStub(self.channel)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def maintenance_runs(self) -> int:
        return self.log().count(MAINTENANCE_RUN)

    async def serving(self) -> None:
        health = health_pb2_grpc.HealthStub(self.channel)
        for _ in range(2400):  # a bound against hanging, not a timing assertion
            assert self.proc.poll() is None, f"{self.name} exited at start:\n{self.log()}"
            try:
                reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.05)
        raise AssertionError(f"{self.name} never became SERVING")

    async def contents(self, user_id: str, tier: pb.Tier.ValueType) -> list[str]:
        """Every memory of the user in that tier of this replica's own store."""
        found = []
        async for reply in self.stub.Export(pb.ExportRequest(scope=scope(user_id), tiers=[tier])):
            if reply.WhichOneof("payload") == "item":
                found.append(reply.item.content)
        return found

    async def stopped(self, sig: signal.Signals) -> int:
        self.proc.send_signal(sig)
        return await asyncio.to_thread(self.proc.wait, 60)

    async def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait, 30)
        await self.channel.close(None)
        self._log.close()


@pytest.fixture
def openai_api() -> Iterator[OpenAIStub]:
    stub = start_openai_stub(dim=8)
    yield stub
    stub.stop()


@pytest.fixture(params=["redis", "redis_cluster"])
def redis_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """MEMORYD_* for one Redis or a Redis Cluster (a test marked ON_REDIS or ON_CLUSTER runs
    on that one only)."""
    if request.param == "redis_cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return {"MEMORYD_REDIS_URL": cluster.url, "MEMORYD_REDIS_CLUSTER": "true"}
    server: RedisServer = request.getfixturevalue("redis_server")
    return {"MEMORYD_REDIS_URL": server.url, "MEMORYD_REDIS_CLUSTER": "false"}


ON_REDIS = on_family("redis_env", "redis")  # a test without either runs on both
ON_CLUSTER = on_family("redis_env", "redis_cluster")


@pytest.fixture
async def redis(redis_env: dict[str, str]) -> AsyncIterator[AsyncClient]:
    client = open_async(
        redis_env["MEMORYD_REDIS_URL"], cluster=redis_env["MEMORYD_REDIS_CLUSTER"] == "true"
    )
    yield client
    await client.aclose()


ReplicaFactory = Callable[..., Replica]


@pytest.fixture
async def start_replica(
    tmp_path: Path, openai_api: OpenAIStub, redis_env: dict[str, str]
) -> AsyncIterator[ReplicaFactory]:
    """Starts `memoryd serve` processes (names unique to the test); all killed at the end."""
    started: list[Replica] = []
    prefix = uuid.uuid4().hex[:6]
    base = {
        **os.environ,
        **redis_env,
        "MEMORYD_METRICS__LISTEN": "",
        "MEMORYD_EMBEDDER__PROVIDER": "openai",
        "MEMORYD_EMBEDDER__OPENAI_BASE_URL": openai_api.url,
        "MEMORYD_EMBEDDER__OPENAI_API_KEY": "sk-test",
        "MEMORYD_EMBEDDER__OPENAI_DIMENSIONS": "8",
        "MEMORYD_LOG_FORMAT": "json",
        # This checkout's server and client packages (the CLI imports the client).
        "PYTHONPATH": os.pathsep.join(str(ROOT / d) for d in ("service", "clients/python")),
    }

    def start(name: str, data: str = "", **env: str) -> Replica:
        """`data`: the data directory of an earlier replica, to start on its stores."""
        replica = Replica(f"{prefix}-{name}", tmp_path, {**base, **env}, data)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        await replica.close()


def stream_of(redis_env: dict[str, str]) -> str:
    return CLUSTER_STREAM if redis_env["MEMORYD_REDIS_CLUSTER"] == "true" else STREAM


async def held_by(redis: AsyncClient, stream: str, consumer: str) -> int:
    """How many stream entries that consumer took and has not acked."""
    try:
        consumers = await redis.xinfo_consumers(stream, "memoryd")
    except Exception:  # no stream or group yet
        return 0
    for entry in consumers:
        name = entry["name"]
        if (name.decode() if isinstance(name, bytes) else name) == consumer:
            return int(entry["pending"])
    return 0


async def eventually(check: Callable[[], Any], what: str) -> None:
    """Waits for background work in other processes; the bound is against hanging only."""
    for _ in range(1200):
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


@ON_CLUSTER
async def test_replicas_share_the_write_behind_copy_without_duplicates(
    start_replica: ReplicaFactory,
    redis: AsyncClient,
    redis_env: dict[str, str],
    openai_api: OpenAIStub,
    user_id: str,
) -> None:
    # One message per batch, each copy a little slow: no replica can take everything.
    openai_api.behaviour.delay_s = 0.05
    replicas = [
        start_replica(f"r{i}", MEMORYD_WRITE_BEHIND__BATCH_SIZE="1") for i in range(REPLICAS)
    ]
    for replica in replicas:
        await replica.serving()
    said = [f"message number {n} of the conversation" for n in range(30)]

    async def say(n: int) -> None:
        sc = scope(user_id, session_id=f"s{n % 3}")
        await replicas[n % REPLICAS].stub.Add(pb.AddRequest(scope=sc, tier=ST, content=said[n]))

    await asyncio.gather(*(say(n) for n in range(len(said))))

    async def copies() -> list[list[str]]:
        return [await r.contents(user_id, pb.TIER_LONG_TERM) for r in replicas]

    async def all_copied_and_acked() -> bool:
        held = [await held_by(redis, stream_of(redis_env), r.name) for r in replicas]
        return not any(held) and {c for cs in await copies() for c in cs} == set(said)

    await eventually(all_copied_and_acked, "every message copied and acked")
    per_replica = await copies()
    assert sorted(c for cs in per_replica for c in cs) == sorted(said)  # each exactly once
    assert sum(1 for cs in per_replica if cs) >= 2  # the work was shared


@ON_REDIS
async def test_messages_a_killed_replica_held_are_copied_by_another(
    start_replica: ReplicaFactory,
    redis: AsyncClient,
    redis_env: dict[str, str],
    openai_api: OpenAIStub,
    user_id: str,
) -> None:
    # The doomed replica's copies fail and it waits an hour before retrying: it holds the
    # messages it took, unacked, when it is killed.
    doomed = start_replica("doomed", MEMORYD_WRITE_BEHIND__RETRY_SECONDS="3600")
    await doomed.serving()  # (it embeds a text at start)
    openai_api.behaviour.status = 400
    said = [f"acknowledged message {n}" for n in range(10)]
    for text in said:
        await doomed.stub.Add(
            pb.AddRequest(scope=scope(user_id, session_id="s"), tier=ST, content=text)
        )
    stream = stream_of(redis_env)
    await eventually(lambda: held_by(redis, stream, doomed.name), "the doomed replica took some")

    assert await doomed.stopped(signal.SIGKILL) == -signal.SIGKILL
    openai_api.behaviour.status = 200
    survivor = start_replica(
        "survivor",
        MEMORYD_WRITE_BEHIND__RETRY_SECONDS="0.05",
        MEMORYD_WRITE_BEHIND__CLAIM_AFTER_SECONDS="0.5",
    )
    await survivor.serving()

    async def all_copied() -> bool:
        return set(await survivor.contents(user_id, pb.TIER_LONG_TERM)) == set(said)

    await eventually(all_copied, "the survivor copied every acknowledged message")
    assert sorted(await survivor.contents(user_id, pb.TIER_LONG_TERM)) == sorted(said)
    assert await held_by(redis, stream, doomed.name) == 0  # claimed away from the dead one


@ON_CLUSTER
async def test_maintenance_runs_on_one_replica_at_a_time_and_moves_when_it_goes(
    start_replica: ReplicaFactory, redis: AsyncClient
) -> None:
    await redis.delete(MAINTENANCE_KEY)  # no lease left by an earlier test
    env = {
        "MEMORYD_RETENTION__MAINTENANCE_INTERVAL_SECONDS": "0.2",
        "MEMORYD_RETENTION__MAINTENANCE_LEASE_SECONDS": "6",
    }
    replicas = [start_replica(f"m{i}", **env) for i in range(3)]
    for replica in replicas:
        await replica.serving()

    async def holder() -> Replica:
        value = await redis.get(MAINTENANCE_KEY)
        name = (value.decode() if isinstance(value, bytes) else value or "").split(":")[0]
        [held] = [r for r in replicas if r.name == name]
        return held

    async def the_only_one_running(expected: list[Replica]) -> Replica:
        """Waits until one of `expected` has run maintenance a few times, then checks that
        it holds the lease and that no other replica ran since `before`."""
        before = {r.name: r.maintenance_runs() for r in replicas}
        await eventually(
            lambda: any(r.maintenance_runs() - before[r.name] >= 3 for r in expected),
            "maintenance ran",
        )
        [leader] = [r for r in expected if r.maintenance_runs() - before[r.name] >= 3]
        assert await holder() is leader
        ran = [r for r in replicas if r.maintenance_runs() > before[r.name]]
        assert ran == [leader]
        return leader

    first = await the_only_one_running(replicas)
    # A replica that stops gives the lease up: another takes over at once.
    assert await first.stopped(signal.SIGTERM) == 0
    rest = [r for r in replicas if r is not first]
    second = await the_only_one_running(rest)
    # A replica that dies holds it until it lapses; then the last one takes over.
    assert await second.stopped(signal.SIGKILL) == -signal.SIGKILL
    [last] = [r for r in rest if r is not second]
    assert await the_only_one_running([last]) is last


@ON_REDIS
async def test_sigterm_flushes_the_write_behind_copy_before_exiting_0(
    start_replica: ReplicaFactory,
    redis: AsyncClient,
    redis_env: dict[str, str],
    openai_api: OpenAIStub,
    user_id: str,
) -> None:
    # Copies fail and the background copier waits an hour to retry: only the flush at
    # shutdown can copy these messages.
    replica = start_replica("flushed", MEMORYD_WRITE_BEHIND__RETRY_SECONDS="3600")
    await replica.serving()  # (it embeds a text at start)
    openai_api.behaviour.status = 400
    said = [f"said just before the stop {n}" for n in range(5)]
    for text in said:
        await replica.stub.Add(
            pb.AddRequest(scope=scope(user_id, session_id="s"), tier=ST, content=text)
        )
    stream = stream_of(redis_env)
    await eventually(lambda: held_by(redis, stream, replica.name), "the copy was tried")
    assert not await replica.contents(user_id, pb.TIER_LONG_TERM)

    openai_api.behaviour.status = 200
    assert await replica.stopped(signal.SIGTERM) == 0
    assert "memoryd stopped" in replica.log()
    assert await held_by(redis, stream, replica.name) == 0
    entries = await redis.xrange(stream) or []
    left = [e for _, e in entries if e and user_id in str(e[b"body"])]
    assert left == []  # nothing of this user still queued for another replica

    # Started again on the same data: the copies are there, and nothing was left to copy.
    again = start_replica("flushed-again", data=replica.data_dir.name)
    await again.serving()
    assert sorted(await again.contents(user_id, pb.TIER_LONG_TERM)) == sorted(said)
