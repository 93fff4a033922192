"""Usage: per tier counts, bytes and quota %, alerts near the quota, estimated cost."""

from __future__ import annotations

import grpc

from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.rpc import bad_request_fields, rpc_error, scope


async def usage(s: RunningServer, user: str) -> pb.UsageResponse:
    return await s.stub.Usage(pb.UsageRequest(scope=scope(user)))


def tiers(reply: pb.UsageResponse) -> dict[int, pb.TierUsage]:
    return {t.tier: t for t in reply.tiers}


async def remember(s: RunningServer, user: str, *contents: str) -> None:
    for content in contents:
        await s.stub.Add(pb.AddRequest(scope=scope(user), tier=pb.TIER_LONG_TERM, content=content))


async def test_a_user_with_nothing_uses_nothing_and_costs_nothing(
    memoryd: RunningServer, user_id: str
) -> None:
    reply = await usage(memoryd, user_id)
    assert set(tiers(reply)) == {
        pb.TIER_WORKING,
        pb.TIER_SHORT_TERM,
        pb.TIER_LONG_TERM,
        pb.TIER_PERSONA,
        pb.TIER_EPISODIC,
        pb.TIER_ENTITY,
        pb.TIER_STRUCTURED,
    }
    assert all((t.count, t.bytes, t.percent) == (0, 0, 0) for t in reply.tiers)
    assert list(reply.alerts) == []
    assert reply.estimated_monthly_cost_usd == 0
    assert reply.quota_profile == "default"


async def test_usage_counts_sizes_and_quota_percent_per_tier(
    memoryd: RunningServer, user_id: str
) -> None:
    await remember(memoryd, user_id, "User likes jazz", "User owns a bicycle", "User reads Borges")
    await memoryd.stub.Add(
        pb.AddRequest(scope=scope(user_id), tier=pb.TIER_PERSONA, key="name", content="Ana")
    )
    task = scope(user_id, task_id="t1")
    await memoryd.stub.Add(pb.AddRequest(scope=task, tier=pb.TIER_WORKING, key="k", content="v1"))
    session = scope(user_id, session_id="s1")
    await memoryd.stub.Add(pb.AddRequest(scope=session, tier=pb.TIER_SHORT_TERM, content="hello"))
    await memoryd.app.copier.drain()  # the message's durable long-term copy

    by_tier = tiers(await usage(memoryd, user_id))
    long_term = by_tier[pb.TIER_LONG_TERM]
    assert long_term.count == 4  # three memories and the message's copy
    assert long_term.bytes == len("User likes jazzUser owns a bicycleUser reads Borgeshello")
    assert (long_term.max_count, long_term.max_bytes) == (10_000, 100 * 1024 * 1024)
    assert long_term.percent == 4 / 10_000 * 100

    persona = by_tier[pb.TIER_PERSONA]
    assert (persona.count, persona.bytes, persona.max_count, persona.percent) == (1, 3, 0, 0)

    working = by_tier[pb.TIER_WORKING]
    assert (working.count, working.bytes) == (1, len("k") + len("v1"))
    assert (working.max_count, working.max_bytes) == (100, 10_240)
    assert working.percent == 1.0  # 1 of 100 keys; 3 of 10,240 bytes is less

    short_term = by_tier[pb.TIER_SHORT_TERM]
    assert (short_term.count, short_term.bytes, short_term.max_count) == (1, 5, 100)


async def test_deleted_memories_no_longer_count(memoryd: RunningServer, user_id: str) -> None:
    await remember(memoryd, user_id, "User likes jazz")
    reply = await memoryd.stub.Add(
        pb.AddRequest(scope=scope(user_id), tier=pb.TIER_LONG_TERM, content="User owns a bicycle")
    )
    await memoryd.stub.Delete(
        pb.DeleteRequest(scope=scope(user_id), tier=pb.TIER_LONG_TERM, ids=[reply.memory_id])
    )
    assert tiers(await usage(memoryd, user_id))[pb.TIER_LONG_TERM].count == 1


async def test_a_tier_at_80_percent_warns_and_at_95_percent_is_critical(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(long_term={"max_memories": 10})
    await remember(s, user_id, *[f"memory number {n}" for n in range(7)])
    assert list((await usage(s, user_id)).alerts) == []

    await remember(s, user_id, "memory number 7")
    [warning] = (await usage(s, user_id)).alerts
    assert (warning.tier, warning.level, warning.percent) == (pb.TIER_LONG_TERM, "warning", 80)
    assert "80%" in warning.message

    await remember(s, user_id, "memory number 8", "memory number 9")
    [critical] = (await usage(s, user_id)).alerts
    assert (critical.level, critical.percent) == ("critical", 100)
    assert "delete old memories" in critical.message


async def test_the_estimated_monthly_cost_grows_with_the_data(
    memoryd: RunningServer, user_id: str
) -> None:
    await remember(memoryd, user_id, "User likes jazz")
    small = (await usage(memoryd, user_id)).estimated_monthly_cost_usd
    await remember(memoryd, user_id, "User owns a bicycle " * 100)
    large = (await usage(memoryd, user_id)).estimated_monthly_cost_usd
    assert 0 < small < large
    # RT-006: $0.40 per GB-month of vector store.
    assert small == len("User likes jazz") / 1024**3 * 0.40


async def test_usage_without_a_user_id_is_refused(memoryd: RunningServer) -> None:
    err = await rpc_error(memoryd.stub.Usage(pb.UsageRequest()))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["scope.user_id"]
