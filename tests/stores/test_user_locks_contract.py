"""The user-lock contract, the same for every adapter (in-process, Redis, Redis Cluster):
one holder per user and purpose at a time, other users never wait, a failing body lets
go. The Redis adapters also exclude each other across clients (two replicas), release
only their own lock, outlive a holder that died by its time to live, and report a Redis
out of reach as `LocksUnavailable`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from memoryd.settings import Settings
from memoryd.stores import locks
from memoryd.stores.locks.port import LockBusy, LocksUnavailable, UserLocks
from memoryd.stores.locks.redis_locks import RedisLocks, lock_key
from tests.conftest import redis_settings
from tests.support.redis_server import RedisServer

REDIS_ADAPTERS = sorted(set(locks.ADAPTERS) - {"in_process"})


@pytest.fixture(params=sorted(locks.ADAPTERS))
async def user_locks(request: pytest.FixtureRequest) -> AsyncIterator[UserLocks]:
    store = locks.ADAPTERS[request.param](redis_settings(request, request.param))
    yield store
    await store.close()


@pytest.fixture
def user() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


async def overlap(holders: list[UserLocks], user: str, rounds: int) -> int:
    """Run `rounds` bodies per holder at once on the same lock; the most bodies seen
    inside at the same time."""
    inside = most = 0

    async def body(store: UserLocks) -> None:
        nonlocal inside, most
        async with store.hold("acme", user, "entity"):
            inside += 1
            most = max(most, inside)
            for _ in range(3):  # give the others every chance to enter
                await asyncio.sleep(0)
            inside -= 1

    await asyncio.gather(*(body(h) for h in holders for _ in range(rounds)))
    return most


async def test_one_holder_at_a_time(user_locks: UserLocks, user: str) -> None:
    assert await overlap([user_locks], user, 20) == 1


async def test_other_users_and_purposes_do_not_wait(user_locks: UserLocks, user: str) -> None:
    async with (
        user_locks.hold("acme", user, "entity"),
        user_locks.hold("acme", f"{user}-other", "entity"),
        user_locks.hold("acme", user, "another purpose"),
        user_locks.hold("other-tenant", user, "entity"),
    ):
        pass


async def test_a_failing_body_lets_go(user_locks: UserLocks, user: str) -> None:
    with pytest.raises(ValueError, match="boom"):
        async with user_locks.hold("acme", user, "entity"):
            raise ValueError("boom")
    async with user_locks.hold("acme", user, "entity"):
        pass


@pytest.fixture(params=REDIS_ADAPTERS)
async def two_replicas(request: pytest.FixtureRequest) -> AsyncIterator[list[UserLocks]]:
    """Two Redis adapters with their own clients, as two replica processes have."""
    settings = redis_settings(request, request.param)
    stores = [locks.ADAPTERS[request.param](settings) for _ in range(2)]
    yield stores
    for store in stores:
        await store.close()


async def test_replicas_exclude_each_other(two_replicas: list[UserLocks], user: str) -> None:
    assert await overlap(two_replicas, user, 15) == 1


async def test_the_key_carries_the_users_hash_tag(user: str) -> None:
    assert lock_key("acme", user, "entity") == f"memoryd:{{acme:{user}}}:lock:entity"


async def test_a_dead_holders_lock_lapses_and_is_never_released_by_another(
    redis_server: RedisServer, user: str
) -> None:
    raw = aioredis.Redis.from_url(redis_server.url)
    store = RedisLocks(raw, ttl_s=5.0, wait_s=30.0)
    key = lock_key("acme", user, "entity")
    try:
        # A replica that died holding it: nobody renews, it lapses after its ttl.
        await raw.set(key, "dead-replica", px=300)
        async with store.hold("acme", user, "entity"):
            mine = await store.holder("acme", user, "entity")
            assert mine not in (None, "dead-replica")
            # Someone else's lock now (ours lapsed meanwhile): our release leaves it.
            await raw.set(key, "someone-else")
        assert await store.holder("acme", user, "entity") == "someone-else"
    finally:
        await raw.aclose()


async def test_a_lock_held_past_the_wait_bound_is_busy(
    redis_server: RedisServer, user: str
) -> None:
    raw = aioredis.Redis.from_url(redis_server.url)
    store = RedisLocks(raw, ttl_s=60.0, wait_s=0.05)
    try:
        await raw.set(lock_key("acme", user, "entity"), "another-replica", px=60_000)
        with pytest.raises(LockBusy):
            async with store.hold("acme", user, "entity"):
                pass
    finally:
        await raw.aclose()


async def test_a_long_body_keeps_its_lock(redis_server: RedisServer, user: str) -> None:
    """Renewed every third of its ttl: a body running past the ttl still holds it."""
    raw = aioredis.Redis.from_url(redis_server.url)
    store = RedisLocks(raw, ttl_s=1.5, wait_s=30.0)
    try:
        async with store.hold("acme", user, "entity"):
            mine = await store.holder("acme", user, "entity")
            await asyncio.sleep(5.0)  # over three ttls
            assert await store.holder("acme", user, "entity") == mine
        assert await store.holder("acme", user, "entity") is None
    finally:
        await raw.aclose()


async def test_redis_out_of_reach_is_unavailable(tmp_path: Path, user: str) -> None:
    redis = RedisServer(tmp_path / "redis")  # a private one: it is stopped
    store = locks.ADAPTERS["redis"](Settings(redis_url=redis.url))
    try:
        async with store.hold("acme", user, "entity"):
            pass
        redis.stop()
        with pytest.raises(LocksUnavailable):
            async with store.hold("acme", user, "entity"):
                pass
    finally:
        redis.stop()
        await store.close()
