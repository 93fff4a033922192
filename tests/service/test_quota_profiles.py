"""Quota profiles through the service: assigned limits are enforced and reported by Usage."""

from __future__ import annotations

import asyncio

import grpc

from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc
from tests.conftest import ServerFactory
from tests.service.test_quotas import bulk_load, live_count
from tests.support.rpc import quota_failure, rpc_error, scope

LT = pb.TIER_LONG_TERM

# The in-process servers' only tenant (no authentication yet).
TENANT = "default"


async def long_term_usage(
    stub: memory_pb2_grpc.MemoryServiceAsyncStub, user_id: str
) -> tuple[pb.TierUsage, str]:
    reply = await stub.Usage(pb.UsageRequest(scope=scope(user_id)))
    (tier,) = [t for t in reply.tiers if t.tier == LT]
    return tier, reply.quota_profile


async def test_a_user_on_the_free_profile_is_refused_at_100(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(quotas={"user_profiles": {f"{TENANT}/{user_id}": "free"}})
    await asyncio.to_thread(bulk_load, s, user_id, 100)
    err = await rpc_error(
        s.stub.Add(pb.AddRequest(scope=scope(user_id), tier=LT, content="One more memory"))
    )
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = err.details() or ""
    assert "max: 100 " in details and "delete old memories or upgrade" in details
    assert quota_failure(err).violations
    assert live_count(s, user_id) == 100
    tier, profile = await long_term_usage(s.stub, user_id)
    assert (tier.count, tier.max_count, tier.percent, profile) == (100, 100, 100.0, "free")


async def test_a_tenant_on_enterprise_gets_100000_in_usage(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(quotas={"tenant_profiles": {TENANT: "enterprise"}})
    tier, profile = await long_term_usage(s.stub, user_id)
    assert (tier.max_count, tier.max_bytes) == (100_000, 1000 * 1024 * 1024)
    assert profile == "enterprise"


async def test_the_user_assignment_beats_the_tenant_assignment(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(
        quotas={
            "tenant_profiles": {TENANT: "enterprise"},
            "user_profiles": {f"{TENANT}/{user_id}": "free"},
        }
    )
    tier, profile = await long_term_usage(s.stub, user_id)
    assert (tier.max_count, profile) == (100, "free")
    other, other_profile = await long_term_usage(s.stub, f"{user_id}-other")
    assert (other.max_count, other_profile) == (100_000, "enterprise")


async def test_an_add_past_the_bytes_quota_is_refused(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(long_term={"max_bytes": 1000})
    await s.stub.Add(pb.AddRequest(scope=scope(user_id), tier=LT, content="a" * 600))
    for auto_prune in (False, True):
        err = await rpc_error(
            s.stub.Add(
                pb.AddRequest(
                    scope=scope(user_id), tier=LT, content="b" * 600, auto_prune=auto_prune
                )
            )
        )
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        details = err.details() or ""
        assert "max: 1,000 bytes" in details and "delete old memories or upgrade" in details
        assert quota_failure(err).violations
    assert live_count(s, user_id) == 1
    # What still fits is added.
    await s.stub.Add(pb.AddRequest(scope=scope(user_id), tier=LT, content="c" * 400))
    assert live_count(s, user_id) == 2


async def test_without_assignments_the_default_profile_is_the_long_term_block(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(long_term={"max_memories": 3})
    tier, profile = await long_term_usage(s.stub, user_id)
    assert (tier.max_count, profile) == (3, "default")
