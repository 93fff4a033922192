"""Prune naming no tier: every strategy applies to every tier the server serves (ALL stays
the user's erasure). A hot tier then prunes each of the user's tasks / sessions, unless
the scope names one."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.rpc import rpc_error, scope

WK, ST, LT, PE = pb.TIER_WORKING, pb.TIER_SHORT_TERM, pb.TIER_LONG_TERM, pb.TIER_PERSONA
EP, EN, SD = pb.TIER_EPISODIC, pb.TIER_ENTITY, pb.TIER_STRUCTURED
APOLLO = {"project": "apollo"}
GEMINI = {"project": "gemini"}


@pytest.fixture
async def server(start_server: ServerFactory) -> RunningServer:
    return await start_server()


async def add(s: RunningServer, sc: pb.Scope, tier: pb.Tier.ValueType, **kw: Any) -> str:
    return (await s.stub.Add(pb.AddRequest(scope=sc, tier=tier, **kw))).memory_id


async def listing(s: RunningServer, sc: pb.Scope, tier: pb.Tier.ValueType) -> list[str]:
    reply = await s.stub.Retrieve(pb.RetrieveRequest(scope=sc, tiers=[tier], top_k=100))
    return sorted(i.document_json or i.content for i in reply.items)


async def test_by_filter_with_no_tier_named_prunes_every_tier(
    memoryd: RunningServer, user_id: str
) -> None:
    s = memoryd
    for task in ("t1", "t2"):
        tsc = scope(user_id, task_id=task)
        await add(s, tsc, WK, key="a", content=f"apollo {task}", metadata=APOLLO)
        await add(s, tsc, WK, key="g", content=f"gemini {task}", metadata=GEMINI)
    ssc = scope(user_id, session_id="s1")
    await add(s, ssc, ST, content="apollo message", metadata=APOLLO)
    await add(s, ssc, ST, content="gemini message", metadata=GEMINI)
    await s.app.copier.drain()  # the messages' long-term copies carry the metadata too
    usc = scope(user_id)
    await add(s, usc, LT, content="Apollo launches on Monday", metadata=APOLLO)
    await add(s, usc, LT, content="Gemini launches on Friday", metadata=GEMINI)
    await add(s, usc, PE, key="team", content="apollo", metadata=APOLLO)
    await add(s, usc, SD, document_json='{"project": "apollo", "n": 1}')
    await add(s, usc, SD, document_json='{"project": "gemini", "n": 2}')

    reply = await s.stub.Prune(
        pb.PruneRequest(scope=usc, strategy=pb.PRUNE_STRATEGY_BY_FILTER, filters=APOLLO)
    )

    per_tier = {c.tier: c.count for c in reply.per_tier}
    assert per_tier == {WK: 2, ST: 1, LT: 2, PE: 1, EP: 0, EN: 0, SD: 1}
    assert reply.deleted_count == 7
    assert await listing(s, scope(user_id, task_id="t1"), WK) == ["gemini t1"]
    assert await listing(s, scope(user_id, task_id="t2"), WK) == ["gemini t2"]
    assert await listing(s, ssc, ST) == ["gemini message"]
    assert await listing(s, usc, LT) == ["Gemini launches on Friday", "gemini message"]
    assert await listing(s, usc, PE) == []
    assert await listing(s, usc, SD) == ['{"project": "gemini", "n": 2}']


async def test_a_scope_naming_a_task_narrows_the_hot_tiers_to_it(
    server: RunningServer, user_id: str
) -> None:
    for task in ("t1", "t2"):
        await add(server, scope(user_id, task_id=task), WK, key="k", content="v", metadata=APOLLO)
    reply = await server.stub.Prune(
        pb.PruneRequest(
            scope=scope(user_id, task_id="t1"),
            strategy=pb.PRUNE_STRATEGY_BY_FILTER,
            filters=APOLLO,
        )
    )
    assert {c.tier: c.count for c in reply.per_tier}[WK] == 1
    assert await listing(server, scope(user_id, task_id="t2"), WK) == ["v"]


async def test_oldest_percent_and_expired_with_no_tier_named_prune_the_vector_tiers(
    server: RunningServer, user_id: str
) -> None:
    usc = scope(user_id)
    for n in range(4):
        await add(server, usc, LT, content=f"Memory number {n} about topic {n}")
    await add(server, usc, SD, document_json='{"a": 1}')
    await add(server, usc, SD, document_json='{"a": 2}')

    dry = await server.stub.Prune(
        pb.PruneRequest(
            scope=usc, strategy=pb.PRUNE_STRATEGY_OLDEST_PERCENT, percent=50, dry_run=True
        )
    )
    assert {c.tier: c.count for c in dry.per_tier} == {
        WK: 0,
        ST: 0,
        LT: 2,
        PE: 0,
        EP: 0,
        EN: 0,
        SD: 1,
    }
    assert len(await listing(server, usc, LT)) == 4  # dry_run changed nothing

    done = await server.stub.Prune(
        pb.PruneRequest(scope=usc, strategy=pb.PRUNE_STRATEGY_OLDEST_PERCENT, percent=50)
    )
    assert done.deleted_count == 3
    assert await listing(server, usc, LT) == [
        "Memory number 2 about topic 2",
        "Memory number 3 about topic 3",
    ]
    expired = await server.stub.Prune(
        pb.PruneRequest(scope=usc, strategy=pb.PRUNE_STRATEGY_EXPIRED)
    )
    assert expired.deleted_count == 0 and len(expired.per_tier) == 7


async def test_a_strategy_still_needs_its_own_arguments(
    server: RunningServer, user_id: str
) -> None:
    err = await rpc_error(
        server.stub.Prune(
            pb.PruneRequest(scope=scope(user_id), strategy=pb.PRUNE_STRATEGY_BY_FILTER)
        )
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
