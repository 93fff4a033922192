"""The entity tier across replicas: its quotas (entities, relations) are reserved on the
usage counters on every write path, so the counters agree with the store after each one
and maintenance corrects drift; every find-then-write sequence of a user holds the
user's entity lock, so two replicas over one vector store adding the same name at once
end with one entity, and concurrent adders on both never pass a quota. With Redis
configured but down, entity writes answer UNAVAILABLE. Counter tests run with the
in-process counters, on one Redis and on a Redis Cluster."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis

from memoryd.core.errors import QuotaExceeded
from memoryd.core.lifecycle.quotas import QuotaProfiles
from memoryd.core.models import Entity, Relation, Scope
from memoryd.core.tiers.entity import EntityTier
from memoryd.settings import Settings
from memoryd.stores import locks, usage
from memoryd.stores.embeddings.openai_embedder import OpenAIEmbedder
from memoryd.stores.usage.port import CounterKey
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.service.test_entity_tier import entity, relate, small_quota
from tests.service.test_export_import import export, stream
from tests.support.openai_stub import start_openai_stub
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer
from tests.support.rpc import rpc_error, scope

E = pb.TIER_ENTITY


@pytest.fixture(params=["redis", "redis_cluster"])
def shared_redis(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "redis_cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return {"redis_url": cluster.url, "redis_cluster": True}
    return {"redis_url": request.getfixturevalue("redis_server").url}


async def stored(s: RunningServer, user: str) -> tuple[int, int]:
    """What the store holds for the user: entities and relations (from Export)."""
    items = [i for i in (await export(s, user, tiers=[E])).items if not i.deleted]
    return sum(i.HasField("entity") for i in items), sum(i.HasField("relation") for i in items)


async def counted(s: RunningServer, user: str) -> tuple[int, int]:
    """What the counters say: entities as Usage reports them, relations from their counter."""
    usage_ = await s.stub.Usage(pb.UsageRequest(scope=scope(user)))
    [tier] = [t for t in usage_.tiers if t.tier == E]
    relations = await s.app.counters.get(CounterKey("default", user, "entity/relations"))
    return tier.count, relations.count if relations is not None else -1


async def agree(s: RunningServer, user: str) -> tuple[int, int]:
    now = await stored(s, user)
    assert await counted(s, user) == now
    return now


async def test_counters_agree_with_the_store_after_every_write_path(
    start_server: ServerFactory, redis_family: dict[str, Any], user_id: str
) -> None:
    s = await start_server(**redis_family, **small_quota(6, 4))
    u = user_id
    await entity(s, u, "Ana", type="person")
    await entity(s, u, "ana", description="merged: no new entity")
    assert await agree(s, u) == (1, 0)
    await relate(s, u, "Ana", "knows", "Juan")  # creates Juan
    await relate(s, u, "Ana", "knows", "Juan")  # the same relation: deduplicated
    await relate(s, u, "Juan", "works_at", "Acme")
    assert await agree(s, u) == (3, 2)
    await relate(s, u, "Ana", "likes", "Bea", metadata={"x": "1"})
    assert await agree(s, u) == (4, 3)
    await s.stub.Delete(pb.DeleteRequest(scope=scope(u), tier=E, keys=["Juan"]))
    assert await agree(s, u) == (3, 1)  # Juan's two relations went with him
    for name in ("Cy", "Di", "Ed"):
        await entity(s, u, name)
    full = await rpc_error(entity(s, u, "Flo"))
    assert full.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    pruned = await entity(s, u, "Flo", auto_prune=True)
    assert pruned.operation == pb.OPERATION_ADD_WITH_PRUNE
    await agree(s, u)
    await s.stub.Prune(
        pb.PruneRequest(
            scope=scope(u), tiers=[E], strategy=pb.PRUNE_STRATEGY_OLDEST_PERCENT, percent=50
        )
    )
    await agree(s, u)
    await s.stub.Prune(
        pb.PruneRequest(
            scope=scope(u), tiers=[E], strategy=pb.PRUNE_STRATEGY_BY_FILTER, filters={"x": "1"}
        )
    )
    await agree(s, u)
    dump = await export(s, u, tiers=[E])
    copy = f"{u}-copy"
    await s.stub.Import(stream(copy, dump))
    assert await agree(s, copy) == await stored(s, u)
    await s.stub.Import(stream(copy, dump))  # all known: nothing new counted
    assert await agree(s, copy) == await stored(s, u)
    await s.stub.Prune(pb.PruneRequest(scope=scope(u), tiers=[E], strategy=pb.PRUNE_STRATEGY_ALL))
    assert await agree(s, u) == (0, 0)
    await s.stub.Prune(pb.PruneRequest(scope=scope(copy), strategy=pb.PRUNE_STRATEGY_ALL))
    assert await agree(s, copy) == (0, 0)


async def test_a_failed_write_gives_its_room_back(
    start_server: ServerFactory, user_id: str
) -> None:
    api = start_openai_stub(dim=8)
    try:
        model = OpenAIEmbedder("k", base_url=api.url, dimensions=8, max_retries=0)
        s = await start_server(model=model, **small_quota(3, 1))
        await entity(s, user_id, "Ana")
        api.behaviour.status = 400  # the next writes fail
        for write in (entity(s, user_id, "Bea"), relate(s, user_id, "Cy", "knows", "Di")):
            err = await rpc_error(write)
            assert err.code() == grpc.StatusCode.UNAVAILABLE
        api.behaviour.status = 200
        assert await agree(s, user_id) == (1, 0)
        await relate(s, user_id, "Cy", "knows", "Di")  # the failed writes kept no room
        assert await agree(s, user_id) == (3, 1)
    finally:
        api.stop()


async def test_maintenance_corrects_entity_counters_that_drifted(
    start_server: ServerFactory, redis_family: dict[str, Any], user_id: str
) -> None:
    s = await start_server(**redis_family)
    await relate(s, user_id, "Ana", "knows", "Juan")
    for kind in ("entity/entities", "entity/relations"):
        key = CounterKey("default", user_id, kind)
        await s.app.counters.forget(key, {str(uuid.uuid4()): 0})  # a removal that never was
    assert await counted(s, user_id) == (1, 0)
    assert s.app.maintenance is not None
    report = await s.app.maintenance.run_once()
    assert report.corrected >= 1
    assert await agree(s, user_id) == (2, 1)


async def test_a_lost_counter_is_rebuilt_from_the_store(
    start_server: ServerFactory, redis_server: RedisServer, user_id: str
) -> None:
    s = await start_server(redis_url=redis_server.url, **small_quota(2, 5))
    await relate(s, user_id, "Ana", "knows", "Juan")
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        await client.flushall()  # Redis restarted empty
    finally:
        await client.aclose()
    err = await rpc_error(entity(s, user_id, "Bea"))  # the rebuilt counter still says 2
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await agree(s, user_id) == (2, 1)


async def test_entity_writes_answer_unavailable_while_redis_is_down(
    start_server: ServerFactory, tmp_path: Path, user_id: str
) -> None:
    redis = RedisServer(tmp_path / "redis")  # a private one: it is stopped
    try:
        s = await start_server(redis_url=redis.url)
        await entity(s, user_id, "Ana")
        redis.stop()
        for write in (entity(s, user_id, "Bea"), relate(s, user_id, "Ana", "knows", "Cy")):
            err = await rpc_error(write)
            assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()
    finally:
        redis.stop()


@pytest.fixture
async def second_replica(
    start_server: ServerFactory, shared_redis: dict[str, Any]
) -> AsyncIterator[tuple[RunningServer, EntityTier, dict[str, Any]]]:
    """A server, and the entity tier of a second replica over the same vector store (as
    replicas over one Qdrant are) with its own Redis clients for counters and locks."""
    quota: dict[str, Any] = small_quota(10, 10)
    s = await start_server(**shared_redis, **quota)
    settings = Settings(**shared_redis, **quota)
    adapter = "redis_cluster" if settings.redis_cluster else "redis"
    counters = usage.ADAPTERS[adapter](settings)
    user_locks = locks.ADAPTERS[adapter](settings)
    tier = EntityTier(
        s.app.memory,
        settings.entity,
        QuotaProfiles(settings.quotas, settings.long_term),
        settings.limits,
        time.time,
        counters,
        user_locks,
    )
    yield s, tier, shared_redis
    await counters.close()
    await user_locks.close()


async def test_two_replicas_adding_one_name_at_once_end_with_one_entity(
    second_replica: tuple[RunningServer, EntityTier, dict[str, Any]], user_id: str
) -> None:
    s, other, _ = second_replica
    names = [f"Person {n}" for n in range(8)]

    async def on_other(name: str) -> None:
        await other.upsert_entity(Scope("default", user_id), Entity(name=name.upper()))

    await asyncio.gather(*(entity(s, user_id, n) for n in names), *(on_other(n) for n in names))
    items = (await export(s, user_id, tiers=[E])).items
    assert sorted(i.entity.name.lower() for i in items) == sorted(n.lower() for n in names)
    assert await agree(s, user_id) == (8, 0)


async def test_adders_on_two_replicas_never_pass_the_entity_or_relation_quota(
    second_replica: tuple[RunningServer, EntityTier, dict[str, Any]], user_id: str
) -> None:
    s, other, _ = second_replica
    here = Scope("default", user_id)

    async def add(n: int) -> bool:
        try:
            if n % 2:
                await other.upsert_entity(here, Entity(name=f"Thing {n}"))
            else:
                await entity(s, user_id, f"Thing {n}")
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            return False
        except QuotaExceeded:  # the second replica's tier raises the core error
            return False
        return True

    assert sum(await asyncio.gather(*(add(n) for n in range(30)))) == 10
    assert await agree(s, user_id) == (10, 0)

    linker = f"{user_id}-links"  # two entities, then relations only
    await relate(s, linker, "Alpha", "rel 0", "Beta")

    async def link(n: int) -> bool:
        try:
            if n % 2:
                await other.add_relation(
                    Scope("default", linker), Relation("Alpha", f"rel {n}", "Beta")
                )
            else:
                await relate(s, linker, "Alpha", f"rel {n}", "Beta")
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            return False
        except QuotaExceeded:
            return False
        return True

    assert sum(await asyncio.gather(*(link(n) for n in range(1, 30)))) == 9
    assert await agree(s, linker) == (2, 10)
