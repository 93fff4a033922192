"""Per-user rate limits from the caller's quota profile, on a clock the tests move:
queries degrade softly (a recent identical answer, or an empty one, `rate_limited`), writes
get RESOURCE_EXHAUSTED with RetryInfo and QuotaFailure and write nothing."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.clock import MovableClock
from tests.support.grants import Caller, error_info, new_key, retry_delay_s
from tests.support.redis_cluster import RedisCluster
from tests.support.rpc import quota_failure, rpc_error, scope

LT, WK = pb.TIER_LONG_TERM, pb.TIER_WORKING
# A profile of our own: 3 queries and 2 writes a minute.
TIGHT = {"profiles": {"tight": {"queries_per_minute": 3, "writes_per_minute": 2}}}


@pytest.fixture
def clock() -> MovableClock:
    return MovableClock(1_700_000_000.0)


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.jsonl"
    path.touch()
    return path


def bucket_settings(request: pytest.FixtureRequest, where: str) -> dict[str, Any]:
    if where == "redis_cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return {"redis_url": cluster.url, "redis_cluster": True}
    if where == "redis":
        return {"redis_url": request.getfixturevalue("redis_server").url}
    return {}


@pytest.fixture(params=["in_process", "redis", "redis_cluster"])
def buckets(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Settings for buckets in this process, in one Redis, or in a Redis Cluster."""
    return bucket_settings(request, request.param)


@pytest.fixture(params=["redis", "redis_cluster"])
def shared_buckets(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Settings for buckets every replica shares: one Redis, or a Redis Cluster."""
    return bucket_settings(request, request.param)


async def limited_server(
    start_server: ServerFactory,
    clock: MovableClock,
    keys_file: Path,
    buckets: dict[str, Any],
    **extra: Any,
) -> RunningServer:
    return await start_server(
        clock=clock, auth={"keys_file": keys_file}, quotas=TIGHT, **buckets, **extra
    )


def retrieve(user: str, query: str) -> pb.RetrieveRequest:
    return pb.RetrieveRequest(scope=scope(user), query=query, tiers=[LT])


async def test_queries_past_the_free_rate_get_the_same_query_s_answer_or_none(
    start_server: ServerFactory, clock: MovableClock, keys_file: Path, buckets: dict[str, Any]
) -> None:
    s = await limited_server(start_server, clock, keys_file, buckets)
    user = f"u-{uuid.uuid4().hex[:8]}"
    alice = Caller(s.channel, new_key(keys_file, "acme", "agent", (user,), profile="free"))
    await alice.Add(pb.AddRequest(scope=scope(user), tier=LT, content="Alice drinks green tea"))

    answers = [await alice.Retrieve(retrieve(user, "what does alice drink")) for _ in range(10)]
    assert not any(a.rate_limited for a in answers)
    assert [i.content for i in answers[-1].items] == ["Alice drinks green tea"]

    again = await alice.Retrieve(retrieve(user, "what does alice drink"))
    assert again.rate_limited
    assert list(again.items) == list(answers[-1].items)
    other = await alice.Retrieve(retrieve(user, "tea"))
    assert other.rate_limited and list(other.items) == []
    rendered = await alice.RenderContext(pb.RenderContextRequest(scope=scope(user), query="tea"))
    assert rendered.rate_limited and rendered.context == ""

    clock.advance(6.0)  # the free profile's 10 a minute: one query every 6 s
    fresh = await alice.Retrieve(retrieve(user, "tea"))
    assert not fresh.rate_limited and [i.content for i in fresh.items] == ["Alice drinks green tea"]
    assert (await alice.Retrieve(retrieve(user, "tea"))).rate_limited


async def test_writes_past_the_rate_are_refused_with_retry_info_and_nothing_is_written(
    start_server: ServerFactory, clock: MovableClock, keys_file: Path, buckets: dict[str, Any]
) -> None:
    s = await limited_server(start_server, clock, keys_file, buckets)
    user = f"u-{uuid.uuid4().hex[:8]}"
    alice = Caller(s.channel, new_key(keys_file, "acme", "agent", (user,), profile="tight"))
    task = scope(user, agent_id="a", task_id="t")
    for n in range(2):
        await alice.Add(pb.AddRequest(scope=task, tier=WK, key=f"k{n}", content="v"))

    err = await rpc_error(alice.Add(pb.AddRequest(scope=task, tier=WK, key="k2", content="v")))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(err).reason == "RATE_LIMITED"
    assert retry_delay_s(err) == pytest.approx(30.0)  # 2 a minute: one every 30 s
    [violation] = quota_failure(err).violations
    assert (
        violation.subject == f"rate:{user}" and "max: 2 writes per minute" in violation.description
    )
    err = await rpc_error(alice.Delete(pb.DeleteRequest(scope=task, tier=WK, keys=["k0"])))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    listing = await alice.Get(pb.GetRequest(scope=task, tier=WK, keys=["k0", "k1", "k2"]))
    assert sorted(i.key for i in listing.items) == ["k0", "k1"]  # reads are not writes
    clock.advance(30.0)
    await alice.Add(pb.AddRequest(scope=task, tier=WK, key="k2", content="v"))


async def test_an_import_past_the_write_rate_writes_nothing(
    start_server: ServerFactory, clock: MovableClock, keys_file: Path, buckets: dict[str, Any]
) -> None:
    s = await limited_server(start_server, clock, keys_file, buckets)
    user = f"u-{uuid.uuid4().hex[:8]}"
    admin = Caller(s.channel, new_key(keys_file, "acme", "admin", profile="tight"))
    for n in range(2):
        await admin.Add(pb.AddRequest(scope=scope(user), tier=LT, content=f"memory {n}"))
    item = pb.MemoryItem(id=str(uuid.uuid4()), tier=LT, content="imported")
    stream = [
        pb.ImportRequest(scope=scope(user), item=item),
        pb.ImportRequest(trailer=pb.ExportTrailer(item_count=1)),
    ]
    err = await rpc_error(admin.Import(iter(stream)))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    usage = await admin.Usage(pb.UsageRequest(scope=scope(user)))
    assert {t.tier: t.count for t in usage.tiers}[LT] == 2


async def test_an_erased_user_s_old_answers_are_never_served_past_the_limit(
    start_server: ServerFactory, clock: MovableClock, keys_file: Path, buckets: dict[str, Any]
) -> None:
    s = await limited_server(start_server, clock, keys_file, buckets)
    user = f"u-{uuid.uuid4().hex[:8]}"
    alice = Caller(s.channel, new_key(keys_file, "acme", "agent", (user,), profile="tight"))
    admin = Caller(s.channel, new_key(keys_file, "acme", "admin"))
    await alice.Add(pb.AddRequest(scope=scope(user), tier=LT, content="Alice's secret plan"))
    first = await alice.Retrieve(retrieve(user, "secret plan"))
    assert [i.content for i in first.items] == ["Alice's secret plan"]
    await admin.Prune(pb.PruneRequest(scope=scope(user), strategy=pb.PRUNE_STRATEGY_ALL))
    for _ in range(2):
        await alice.Retrieve(retrieve(user, "anything"))
    past = await alice.Retrieve(retrieve(user, "secret plan"))
    assert past.rate_limited and list(past.items) == []


async def test_a_key_without_a_profile_takes_its_user_s_profile(
    start_server: ServerFactory, clock: MovableClock, keys_file: Path
) -> None:
    quotas = {**TIGHT, "tenant_profiles": {"acme": "tight"}}
    s = await start_server(clock=clock, auth={"keys_file": keys_file}, quotas=quotas)
    acme = Caller(s.channel, new_key(keys_file, "acme", "agent", ("u",)))
    globex = Caller(s.channel, new_key(keys_file, "globex", "agent", ("u",)))
    answers = [await acme.Retrieve(retrieve("u", "q")) for _ in range(4)]
    assert [a.rate_limited for a in answers] == [False, False, False, True]
    answers = [await globex.Retrieve(retrieve("u", "q")) for _ in range(4)]
    assert not any(a.rate_limited for a in answers)  # the default profile has no rate


async def test_replicas_on_one_redis_share_the_buckets(
    start_server: ServerFactory,
    clock: MovableClock,
    keys_file: Path,
    tmp_path: Path,
    shared_buckets: dict[str, Any],
) -> None:
    common: dict[str, Any] = {
        "clock": clock,
        "auth": {"keys_file": keys_file},
        "quotas": TIGHT,
        **shared_buckets,
    }
    first = await start_server(**common, data_dir=tmp_path / "one")
    second = await start_server(**common, data_dir=tmp_path / "two")
    user = f"u-{uuid.uuid4().hex[:8]}"
    token = new_key(keys_file, "acme", "agent", (user,), profile="tight")
    answers = [
        await Caller(replica.channel, token).Retrieve(retrieve(user, "q"))
        for replica in (first, second, first, second)
    ]
    assert [a.rate_limited for a in answers] == [False, False, False, True]


async def test_with_auth_off_nothing_is_rate_limited_even_on_the_free_profile(
    start_server: ServerFactory, clock: MovableClock
) -> None:
    s = await start_server(clock=clock, quotas={"default_profile": "free"})
    user = f"u-{uuid.uuid4().hex[:8]}"
    answers = [await s.stub.Retrieve(retrieve(user, "q")) for _ in range(12)]
    assert not any(a.rate_limited for a in answers)
    task = scope(user, agent_id="a", task_id="t")
    for n in range(61):  # the free profile would allow 60 writes a minute
        await s.stub.Add(pb.AddRequest(scope=task, tier=WK, key=f"k{n}", content="v"))


def batch(user: str, *contents: str) -> pb.AddBatchRequest:
    return pb.AddBatchRequest(
        items=[pb.AddRequest(scope=scope(user), tier=LT, content=c) for c in contents]
    )


async def test_each_item_of_an_add_batch_is_one_write_against_its_user_s_rate(
    start_server: ServerFactory, clock: MovableClock, keys_file: Path, buckets: dict[str, Any]
) -> None:
    s = await limited_server(start_server, clock, keys_file, buckets)
    alice, bob = (f"u-{uuid.uuid4().hex[:8]}" for _ in range(2))
    admin = Caller(s.channel, new_key(keys_file, "acme", "admin", profile="tight"))

    stored = await admin.AddBatch(batch(alice, "alice walks", "alice runs"))
    assert stored.succeeded_count == 2
    err = await rpc_error(admin.Add(pb.AddRequest(scope=scope(alice), tier=LT, content="more")))
    assert error_info(err).reason == "RATE_LIMITED"  # the batch spent alice's 2 writes

    clock.advance(30.0)  # one write back: too few for two items, so neither is stored
    err = await rpc_error(admin.AddBatch(batch(alice, "alice swims", "alice rows")))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(err).reason == "RATE_LIMITED"
    assert retry_delay_s(err) == pytest.approx(30.0)
    usage = await admin.Usage(pb.UsageRequest(scope=scope(alice)))
    assert {t.tier: t.count for t in usage.tiers}[LT] == 2

    # Bob's bucket is his own; more items than the bucket ever holds cannot wait for it.
    err = await rpc_error(admin.AddBatch(batch(bob, "one", "two", "three")))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(err).reason == "QUOTA_EXCEEDED"
    assert "max: 2 writes per minute" in quota_failure(err).violations[0].description
    assert (await admin.AddBatch(batch(bob, "bob reads"))).succeeded_count == 1


async def test_an_add_batch_refused_for_one_user_costs_its_other_users_nothing(
    start_server: ServerFactory, clock: MovableClock, keys_file: Path, buckets: dict[str, Any]
) -> None:
    s = await limited_server(start_server, clock, keys_file, buckets)
    alice, bob = (f"u-{uuid.uuid4().hex[:8]}" for _ in range(2))
    admin = Caller(s.channel, new_key(keys_file, "acme", "admin", profile="tight"))
    await admin.AddBatch(batch(bob, "bob walks", "bob runs"))  # bob's 2 writes spent

    mixed = pb.AddBatchRequest(items=[*batch(alice, "alice walks").items, *batch(bob, "no").items])
    err = await rpc_error(admin.AddBatch(mixed))
    assert error_info(err).reason == "RATE_LIMITED"
    # Nothing was written, so alice's token came back: her bucket still holds both.
    stored = await admin.AddBatch(batch(alice, "alice swims", "alice rows"))
    assert stored.succeeded_count == 2


async def test_an_add_batch_forgets_its_users_cached_answers(
    start_server: ServerFactory, clock: MovableClock, keys_file: Path
) -> None:
    s = await limited_server(start_server, clock, keys_file, {})
    user = f"u-{uuid.uuid4().hex[:8]}"
    alice = Caller(s.channel, new_key(keys_file, "acme", "agent", (user,), profile="tight"))
    await alice.Add(pb.AddRequest(scope=scope(user), tier=LT, content="Alice's old plan"))
    first = await alice.Retrieve(retrieve(user, "plan"))
    assert [i.content for i in first.items] == ["Alice's old plan"]

    await alice.AddBatch(batch(user, "Alice's new plan"))
    for _ in range(2):
        await alice.Retrieve(retrieve(user, "anything"))
    past = await alice.Retrieve(retrieve(user, "plan"))
    assert past.rate_limited and list(past.items) == []  # not the answer from before the batch


async def test_listings_past_the_rate_are_refused_per_user_and_per_tenant(
    start_server: ServerFactory, clock: MovableClock, keys_file: Path
) -> None:
    """The console's reads spend the same query buckets: ListMemories the user's,
    ListUsers the tenant's. A page has no soft answer, so past the rate it is refused."""
    s = await limited_server(start_server, clock, keys_file, {})
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    reader = Caller(s.channel, new_key(keys_file, tenant, "reader", profile="tight"))

    def listing(user: str) -> pb.ListMemoriesRequest:
        return pb.ListMemoriesRequest(scope=scope(user))

    for _ in range(3):  # tight: 3 queries a minute
        await reader.ListMemories(listing("ana"))
    err = await rpc_error(reader.ListMemories(listing("ana")))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(err).reason == "RATE_LIMITED"
    assert retry_delay_s(err) == pytest.approx(20.0)
    [violation] = quota_failure(err).violations
    assert violation.subject == "rate:ana" and "max: 3 queries per minute" in violation.description
    await reader.ListMemories(listing("bob"))  # another user's bucket is full

    for _ in range(3):
        await reader.ListUsers(pb.ListUsersRequest())
    err = await rpc_error(reader.ListUsers(pb.ListUsersRequest()))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert quota_failure(err).violations[0].subject == "rate:*"

    clock.advance(20.0)  # one token back in each bucket
    await reader.ListUsers(pb.ListUsersRequest())
    await reader.ListMemories(listing("ana"))
