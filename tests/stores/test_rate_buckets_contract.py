"""The rate-limit bucket contract: in-process, one Redis and a Redis Cluster (one Lua
script) behave alike."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis

from memoryd.stores import ratelimit
from memoryd.stores.ratelimit.port import BucketKey, Rate, TokenBuckets
from memoryd.stores.ratelimit.redis_buckets import RedisBuckets, bucket_key
from tests.conftest import redis_settings
from tests.support.redis_server import RedisServer

T0 = 1_700_000_000.0
TEN_A_MINUTE = Rate.per_minute(10)

Opener = Callable[[], TokenBuckets]


@pytest.fixture(params=sorted(ratelimit.ADAPTERS))
async def open_buckets(request: pytest.FixtureRequest) -> AsyncIterator[Opener]:
    """Each call opens another handle on the same buckets (for Redis: another replica)."""
    opened: list[TokenBuckets] = []
    settings = redis_settings(request, request.param)
    shared = ratelimit.ADAPTERS[request.param](settings)
    opened.append(shared)

    def open_() -> TokenBuckets:
        if request.param == "in_process":
            return shared
        buckets = ratelimit.ADAPTERS[request.param](settings)
        opened.append(buckets)
        return buckets

    yield open_
    for buckets in opened:
        await buckets.close()


@pytest.fixture
def key() -> BucketKey:
    return BucketKey("acme", f"user-{uuid.uuid4().hex[:8]}", "query")


async def test_a_full_bucket_allows_its_capacity_then_says_when_to_retry(
    open_buckets: Opener, key: BucketKey
) -> None:
    buckets = open_buckets()
    taken = [await buckets.take(key, TEN_A_MINUTE, T0) for _ in range(10)]
    assert all(t.allowed for t in taken)
    assert [round(t.remaining) for t in taken] == list(range(9, -1, -1))
    refused = await buckets.take(key, TEN_A_MINUTE, T0)
    assert not refused.allowed
    assert refused.retry_after_s == pytest.approx(6.0)  # one token every 6 s


async def test_tokens_come_back_with_time_up_to_the_capacity(
    open_buckets: Opener, key: BucketKey
) -> None:
    buckets = open_buckets()
    for _ in range(10):
        await buckets.take(key, TEN_A_MINUTE, T0)
    assert not (await buckets.take(key, TEN_A_MINUTE, T0 + 5.9)).allowed
    assert (await buckets.take(key, TEN_A_MINUTE, T0 + 6.0)).allowed
    assert not (await buckets.take(key, TEN_A_MINUTE, T0 + 6.0)).allowed
    # An hour idle refills the bucket to its capacity, not beyond.
    later = [await buckets.take(key, TEN_A_MINUTE, T0 + 3600) for _ in range(11)]
    assert [t.allowed for t in later] == [True] * 10 + [False]


async def test_tokens_given_back_can_be_taken_again_up_to_the_capacity(
    open_buckets: Opener, key: BucketKey
) -> None:
    buckets, other_replica = open_buckets(), open_buckets()
    for _ in range(10):
        await buckets.take(key, TEN_A_MINUTE, T0)
    await other_replica.give_back(key, TEN_A_MINUTE, T0, 3)
    again = [await buckets.take(key, TEN_A_MINUTE, T0) for _ in range(4)]
    assert [t.allowed for t in again] == [True, True, True, False]
    # Giving back more than was taken fills the bucket, no further.
    await buckets.give_back(key, TEN_A_MINUTE, T0, 50)
    full = [await buckets.take(key, TEN_A_MINUTE, T0) for _ in range(11)]
    assert [t.allowed for t in full] == [True] * 10 + [False]


async def test_a_clock_stepping_back_adds_no_tokens(open_buckets: Opener, key: BucketKey) -> None:
    buckets = open_buckets()
    for _ in range(10):
        await buckets.take(key, TEN_A_MINUTE, T0)
    assert not (await buckets.take(key, TEN_A_MINUTE, T0 - 120)).allowed
    assert not (await buckets.take(key, TEN_A_MINUTE, T0 + 5)).allowed
    assert (await buckets.take(key, TEN_A_MINUTE, T0 + 6)).allowed


async def test_buckets_of_other_users_tenants_and_names_are_separate(
    open_buckets: Opener, key: BucketKey
) -> None:
    buckets = open_buckets()
    for _ in range(10):
        await buckets.take(key, TEN_A_MINUTE, T0)
    others = [
        BucketKey("globex", key.user_id, key.name),
        BucketKey(key.tenant, key.user_id + "x", key.name),
        BucketKey(key.tenant, key.user_id, "write"),
    ]
    for other in others:
        assert (await buckets.take(other, TEN_A_MINUTE, T0)).allowed


async def test_a_call_costing_more_than_is_left_takes_nothing(
    open_buckets: Opener, key: BucketKey
) -> None:
    buckets = open_buckets()
    assert (await buckets.take(key, TEN_A_MINUTE, T0, cost=8)).allowed
    refused = await buckets.take(key, TEN_A_MINUTE, T0, cost=3)
    assert not refused.allowed and refused.remaining == pytest.approx(2)
    assert (await buckets.take(key, TEN_A_MINUTE, T0, cost=2)).allowed


async def test_concurrent_takes_from_two_replicas_never_overspend(
    open_buckets: Opener, key: BucketKey
) -> None:
    first, second = open_buckets(), open_buckets()
    rate = Rate.per_minute(25)
    taken = await asyncio.gather(
        *(b.take(key, rate, T0) for _ in range(30) for b in (first, second))
    )
    assert sum(t.allowed for t in taken) == 25


async def test_a_redis_bucket_expires_once_it_would_be_full_again(
    redis_server: RedisServer, redis_client: aioredis.Redis, key: BucketKey
) -> None:
    buckets = RedisBuckets(redis_server.url)
    try:
        await buckets.take(key, TEN_A_MINUTE, T0)
        ttl_ms = await redis_client.pttl(bucket_key(key))
        # One token short: full again in 6 s (plus a second of slack).
        assert 6_000 <= ttl_ms <= 7_000
        assert bucket_key(key).startswith(f"memoryd:{{{key.tenant}:{key.user_id}}}:")
    finally:
        await buckets.close()
