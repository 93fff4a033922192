"""Faults under load: the private test Redis killed and started again with its data
(append-only file) or without any (restart empty, FLUSHALL), the write-behind copier
stuck, Redis down while the long-term tiers are reachable, a second server on one data
directory. memoryd recovers without a restart and loses no acknowledged write.

(`kill -9` of the server itself is in test_crash_recovery.py.)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import redis.asyncio as aioredis
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memoryd.app import build_app
from memoryd.core.startup import StartupRefused
from memoryd.settings import Settings
from memoryd.stores.hot.port import HotStoreDown, SessionKey, SessionMessage
from memoryd.stores.hot.redis_store import RedisHotStore
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.redis_server import RedisServer
from tests.support.rpc import rpc_error, scope
from tests.support.write_load import WriteLoad, missing_long_term

SERVICE_DIR = Path(__file__).resolve().parents[2] / "service"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
WK, ST, LT, PE = pb.TIER_WORKING, pb.TIER_SHORT_TERM, pb.TIER_LONG_TERM, pb.TIER_PERSONA
EP, EN, SD = pb.TIER_EPISODIC, pb.TIER_ENTITY, pb.TIER_STRUCTURED
STREAM = "memoryd:wb:messages"
# Retry the copy quickly, so the tests wait little for it.
FAST_COPIER = {"retry_seconds": 0.05}


async def health_of(s: RunningServer, service: str = "") -> int:
    await s.server.health.check_now()
    reply = await health_pb2_grpc.HealthStub(s.channel).Check(
        health_pb2.HealthCheckRequest(service=service)
    )
    return int(reply.status)


async def until_health(s: RunningServer, service: str, status: int, timeout_s: float = 60) -> None:
    async with asyncio.timeout(timeout_s):
        while await health_of(s, service) != status:  # noqa: ASYNC110 (the stores' state)
            await asyncio.sleep(0.05)


async def missing_hot(s: RunningServer, load: WriteLoad, user: str) -> list[str]:
    """Acknowledged working entries and messages that are not where they were put."""
    missing: list[str] = []
    by_task: dict[str, list[str]] = {}
    for task, key in load.acked.working:
        by_task.setdefault(task, []).append(key)
    for task, keys in by_task.items():
        reply = await s.stub.Get(pb.GetRequest(scope=scope(user, task_id=task), tier=WK, keys=keys))
        missing += [f"working {task}/{k}" for k in reply.missing]
    by_session: dict[str, list[str]] = {}
    for message_id, session in load.acked.messages.items():
        by_session.setdefault(session, []).append(message_id)
    for session, ids in by_session.items():
        reply = await s.stub.Get(
            pb.GetRequest(scope=scope(user, session_id=session), tier=ST, ids=ids)
        )
        missing += [f"message {session}/{i}" for i in reply.missing]
    return missing


async def restart_under_load(
    s: RunningServer, redis: RedisServer, user: str, how: str
) -> tuple[WriteLoad, int]:
    """Writes before, during and after Redis going away; returns the load and how many
    writes had been acknowledged before the fault."""
    load = WriteLoad(s.stub, user, clients=4, max_ops=300)
    load.start()
    await load.acked_at_least(60)
    before = load.acked.total
    if how == "flushall":
        client = aioredis.Redis.from_url(redis.url)
        await client.flushall()
        await client.aclose()
    else:
        redis.kill()
        await load.refused_at_least(8)
        redis.restart(keep_data=how == "restart_with_data")
    await load.acked_at_least(load.acked.total + 90)
    await load.stop()
    assert load.unexpected == []
    return load, before


async def test_redis_killed_and_restarted_with_its_data_loses_no_acknowledged_write(
    start_server: ServerFactory, tmp_path: Path, user_id: str
) -> None:
    redis = RedisServer(tmp_path / "redis", appendonly=True)
    try:
        s = await start_server(redis_url=redis.url, write_behind=FAST_COPIER)
        load, _ = await restart_under_load(s, redis, user_id, "restart_with_data")

        assert load.refused[grpc.StatusCode.UNAVAILABLE] > 0  # Redis really was gone
        await until_health(s, "", SERVING)
        await s.app.copier.drain()
        assert await missing_hot(s, load, user_id) == []
        # Every acknowledged long-term memory, and every acknowledged message's durable copy.
        copies = list(load.acked.messages)
        assert await missing_long_term(s.stub, user_id, load.acked.long_term + copies) == []
    finally:
        redis.stop()


@pytest.mark.parametrize("how", ["restart_empty", "flushall"])
async def test_redis_that_lost_its_data_is_recovered_from_without_a_memoryd_restart(
    start_server: ServerFactory, tmp_path: Path, user_id: str, how: str
) -> None:
    """Hot data written before the loss is gone with it (docs/operations.md, "Redis
    persistence"); everything after it works as before, and the long-term tiers lost
    nothing."""
    redis = RedisServer(tmp_path / "redis")
    try:
        s = await start_server(redis_url=redis.url, write_behind=FAST_COPIER)
        load, _ = await restart_under_load(s, redis, user_id, how)
        await until_health(s, "", SERVING)
        assert await health_of(s, "memoryd.write_behind") == SERVING

        # The write-behind queue took up again: a message said now is copied.
        said = await s.stub.Add(
            pb.AddRequest(scope=scope(user_id, session_id="after"), tier=ST, content="Still here")
        )
        await s.app.copier.drain()
        assert await missing_long_term(s.stub, user_id, [said.memory_id]) == []
        assert await missing_long_term(s.stub, user_id, load.acked.long_term) == []
        # GDPR erasure works (it flushes the queue first).
        erased = await s.stub.Prune(
            pb.PruneRequest(scope=scope(user_id), strategy=pb.PRUNE_STRATEGY_ALL)
        )
        assert erased.deleted_count > 0
        usage = await s.stub.Usage(pb.UsageRequest(scope=scope(user_id)))
        assert all(t.count == 0 for t in usage.tiers)
    finally:
        redis.stop()


async def test_health_turns_not_serving_while_the_copier_is_stuck_and_back_after(
    start_server: ServerFactory, tmp_path: Path, user_id: str
) -> None:
    redis = RedisServer(tmp_path / "redis")
    client = aioredis.Redis.from_url(redis.url)
    try:
        s = await start_server(
            redis_url=redis.url,
            write_behind={"retry_seconds": 0.05, "stuck_after_seconds": 0.5},
        )
        assert await health_of(s, "memoryd.write_behind") == SERVING
        # Something else took the stream's key: every read of the queue fails.
        await client.delete(STREAM)
        await client.set(STREAM, "not a stream")

        await until_health(s, "memoryd.write_behind", NOT_SERVING)
        assert await health_of(s, "") == NOT_SERVING
        assert await health_of(s, "memoryd.hot_store") == SERVING  # Redis itself is fine
        err = await rpc_error(
            s.stub.Add(pb.AddRequest(scope=scope(user_id, session_id="x"), tier=ST, content="hi"))
        )
        assert err.code() == grpc.StatusCode.UNAVAILABLE  # its copy could not be queued

        await client.delete(STREAM)
        await until_health(s, "memoryd.write_behind", SERVING)
        assert await health_of(s, "") == SERVING
    finally:
        await client.aclose()
        redis.stop()


async def test_while_redis_is_down_the_long_term_tiers_are_still_served(
    start_server: ServerFactory, tmp_path: Path, user_id: str
) -> None:
    redis = RedisServer(tmp_path / "redis")
    stopped = False
    try:
        s = await start_server(redis_url=redis.url)
        everywhere = scope(user_id, task_id="t", session_id="s")
        await s.stub.Add(pb.AddRequest(scope=everywhere, tier=WK, key="k", content="hot"))
        kept = await s.stub.Add(
            pb.AddRequest(scope=scope(user_id), tier=LT, content="The user likes green tea")
        )
        redis.stop()
        stopped = True

        usage = await s.stub.Usage(pb.UsageRequest(scope=everywhere))
        assert list(usage.skipped_tiers) == [WK, ST]
        assert {t.tier: t.count for t in usage.tiers} == {LT: 1, PE: 0, EP: 0, EN: 0, SD: 0}

        found = await s.stub.Retrieve(pb.RetrieveRequest(scope=everywhere, query="green tea"))
        assert [i.id for i in found.items] == [kept.memory_id]
        assert list(found.skipped_tiers) == [WK, ST]
        named = pb.RetrieveRequest(scope=everywhere, query="tea", tiers=[WK, LT])
        assert (await rpc_error(s.stub.Retrieve(named))).code() == grpc.StatusCode.UNAVAILABLE

        dump = [r async for r in s.stub.Export(pb.ExportRequest(scope=scope(user_id)))]
        header, items, trailer = dump[0].header, dump[1:-1], dump[-1].trailer
        assert list(header.skipped_tiers) == [WK, ST]
        assert {c.tier for c in header.counts} == {LT, PE, EP, EN, SD}
        assert [m.item.id for m in items] == [kept.memory_id] and trailer.item_count == 1
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in s.stub.Export(pb.ExportRequest(scope=scope(user_id), tiers=[WK])):
                pass
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        if not stopped:
            redis.stop()


async def test_a_second_server_on_the_same_data_dir_is_refused_in_one_line(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    await start_server(data_dir=data)
    with pytest.raises(StartupRefused, match="in use by another memoryd"):
        await build_app(Settings(data_dir=data))

    env = {
        "MEMORYD_DATA_DIR": str(data),
        "MEMORYD_LISTEN": "127.0.0.1:0",
        "MEMORYD_METRICS__LISTEN": "127.0.0.1:0",  # refused for the directory, not a port
    }
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "memoryd", "serve"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SERVICE_DIR), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "start-up refused" in lines[0] and "in use" in lines[0]


async def test_a_full_redis_refuses_hot_writes_as_unavailable_not_internal(
    start_server: ServerFactory, tmp_path: Path, user_id: str
) -> None:
    """docs/operations.md advises `maxmemory-policy noeviction`: a full Redis then refuses
    writes (OOM) rather than dropping sessions, and callers are told to retry."""
    redis = RedisServer(tmp_path / "redis")
    client = aioredis.Redis.from_url(redis.url)
    try:
        s = await start_server(redis_url=redis.url)
        await client.config_set("maxmemory-policy", "noeviction")
        await client.config_set("maxmemory", "1")  # already past it: every write is refused
        task = scope(user_id, task_id="t", session_id="s")
        for request in (
            pb.AddRequest(scope=task, tier=WK, key="k", content="v"),
            pb.AddRequest(scope=task, tier=ST, content="hello"),
        ):
            err = await rpc_error(s.stub.Add(request))
            assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()
        await client.config_set("maxmemory", "0")
        await s.stub.Add(pb.AddRequest(scope=task, tier=WK, key="k", content="v"))
    finally:
        await client.aclose()
        redis.stop()


async def test_a_frozen_redis_is_answered_unavailable_by_the_server_within_the_callers_deadline(
    start_server: ServerFactory, tmp_path: Path, user_id: str
) -> None:
    """Redis stopped dead (SIGSTOP: connections open, no answer). Every Redis call is
    bounded by `redis_timeout_seconds` and by the caller's deadline, and a request does not
    wait for Redis again once it timed out: the server answers UNAVAILABLE itself, so the
    caller never sees its own DEADLINE_EXCEEDED."""
    redis = RedisServer(tmp_path / "redis")
    frozen = False
    try:
        s = await start_server(redis_url=redis.url)
        everywhere = scope(user_id, task_id="t", session_id="s")
        await s.stub.Add(pb.AddRequest(scope=everywhere, tier=WK, key="k", content="v"))
        redis.freeze()
        frozen = True

        # Usage asks Redis for every tier (hot tiers, usage counters): one timeout in all,
        # then it answers as with Redis down (the hot tiers skipped).
        usage = await s.stub.Usage(pb.UsageRequest(scope=everywhere), timeout=10)
        assert list(usage.skipped_tiers) == [WK, ST]

        # With a Redis timeout longer than the caller's deadline, the deadline bounds it.
        patient = await start_server(
            redis_url=redis.url, redis_timeout_seconds=60, data_dir=tmp_path / "patient"
        )
        requests = (
            pb.AddRequest(scope=everywhere, tier=WK, key="k2", content="v"),
            pb.AddRequest(scope=everywhere, tier=ST, content="hello"),
            pb.AddRequest(scope=everywhere, tier=LT, content="The user likes green tea"),
        )
        # At once: each waits out most of its deadline, and each has a budget of its own.
        errors = await asyncio.gather(
            *(rpc_error(patient.stub.Add(request, timeout=4)) for request in requests)
        )
        for request, err in zip(requests, errors, strict=True):
            assert err.code() == grpc.StatusCode.UNAVAILABLE, (request.tier, err.details())

        redis.thaw()
        frozen = False
        await until_health(s, "", SERVING)
        await s.stub.Add(pb.AddRequest(scope=everywhere, tier=WK, key="k3", content="v"))
    finally:
        if frozen:
            redis.thaw()
        redis.stop()


async def test_after_redis_restarts_the_first_requests_succeed(
    start_server: ServerFactory, tmp_path: Path, user_id: str
) -> None:
    """The connections pooled before the restart are dead: none of them may cost a
    request (docs/operations.md, "Redis restarts")."""
    redis = RedisServer(tmp_path / "redis", appendonly=True)
    try:
        s = await start_server(redis_url=redis.url)
        everywhere = scope(user_id, task_id="t", session_id="s")

        async def every_call(n: int) -> None:
            # Concurrent, so that the pools hold several connections each.
            await asyncio.gather(
                s.stub.Add(pb.AddRequest(scope=everywhere, tier=WK, key=f"k{n}", content="v")),
                s.stub.Add(pb.AddRequest(scope=everywhere, tier=ST, content=f"message {n}")),
                s.stub.Add(pb.AddRequest(scope=everywhere, tier=LT, content=f"Fact number {n}")),
                s.stub.Retrieve(pb.RetrieveRequest(scope=everywhere, query="fact")),
                s.stub.Usage(pb.UsageRequest(scope=everywhere)),
            )

        await every_call(0)
        await every_call(1)
        # In a thread, as another process would: the server's loop runs meanwhile.
        await asyncio.to_thread(redis.restart, keep_data=True)

        await every_call(2)
        usage = await s.stub.Usage(pb.UsageRequest(scope=everywhere))
        assert {t.tier: t.count for t in usage.tiers}[WK] == 3
    finally:
        redis.stop()


async def test_a_dead_pooled_connection_is_retried_for_a_read_never_for_an_append(
    tmp_path: Path,
) -> None:
    """A connection whose close memoryd has not seen yet (here: Redis restarted while the
    event loop was busy). A read is sent again on a fresh connection; appending a message
    is not (had the first attempt run, the message would be there twice): the caller gets
    UNAVAILABLE and may retry."""
    redis = RedisServer(tmp_path / "redis")
    store = RedisHotStore(redis.url)
    session = SessionKey("default", "u", "s")

    def message(n: int) -> SessionMessage:
        return SessionMessage(id=f"m{n}", content=f"hello {n}", role="user", created_at=0, size=7)

    try:
        await store.append_message(session, message(1), 10, 10_000, 60)
        redis.restart(keep_data=False)  # blocks the loop: the close is not seen before use
        assert await store.list_messages(session) == []

        redis.restart(keep_data=False)
        with pytest.raises(HotStoreDown):
            await store.append_message(session, message(2), 10, 10_000, 60)
        await store.append_message(session, message(2), 10, 10_000, 60)
        assert [m.id for m in await store.list_messages(session)] == ["m2"]
    finally:
        await store.close()
        redis.stop()
