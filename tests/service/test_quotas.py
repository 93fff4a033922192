"""Long-term quotas: the seed scenarios at the real default of 10,000, and concurrency."""

from __future__ import annotations

import asyncio
import random
import uuid

import grpc

from memoryd.core.memory.payload import content_hash, to_payload
from memoryd.core.models import Kind, MemoryRecord, Scope, Tier
from memoryd.stores.vectors.port import Filter, MatchValue, VectorPoint
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.rpc import quota_failure, rpc_error, scope

LT = pb.TIER_LONG_TERM


def bulk_load(s: RunningServer, user_id: str, n: int) -> None:
    """Write n memories straight into the vector store, as a restore would: oldest first."""
    rng = random.Random(7)
    target = Scope(tenant="default", user_id=user_id)
    batch: list[VectorPoint] = []
    for i in range(n):
        record = MemoryRecord(
            id=str(uuid.uuid4()),
            tier=Tier.LONG_TERM,
            content=f"Memory {i}",
            kind=Kind.NOTE,
            created_at=1_700_000_000 + i,
            updated_at=1_700_000_000 + i,
        )
        digest = content_hash(target, Tier.LONG_TERM, "", record.content)
        vector = [rng.gauss(0, 1) for _ in range(s.app.vectors.dim)]
        batch.append(VectorPoint(record.id, vector, None, to_payload(record, target, digest, 1024)))
        if len(batch) == 1000:
            s.app.vectors.upsert(batch)
            batch = []
    s.app.vectors.upsert(batch)


def live_count(s: RunningServer, user_id: str) -> int:
    flt = Filter(
        must=[MatchValue("user_id", user_id), MatchValue("tier", "long_term")],
        must_not=[MatchValue("deleted", True)],
    )
    return s.app.vectors.count(flt)


async def test_at_the_default_quota_of_10000_an_add_is_refused(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    await asyncio.to_thread(bulk_load, s, user_id, 10_000)
    err = await rpc_error(
        s.stub.Add(pb.AddRequest(scope=scope(user_id), tier=LT, content="One more memory"))
    )
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = err.details() or ""
    assert "max: 10,000" in details and "delete old memories or upgrade" in details
    assert quota_failure(err).violations
    assert live_count(s, user_id) == 10_000


async def test_auto_prune_at_10000_drops_the_oldest_1000_and_adds(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    await asyncio.to_thread(bulk_load, s, user_id, 10_000)
    reply = await s.stub.Add(
        pb.AddRequest(scope=scope(user_id), tier=LT, content="New memory", auto_prune=True)
    )
    assert reply.operation == pb.OPERATION_ADD_WITH_PRUNE
    # RF-003 names both "1,000 deleted" and "total remains at 10,000", which cannot both
    # hold; the 10% is kept, so the tier ends under its limit: 10,000 - 1,000 + 1.
    assert live_count(s, user_id) == 9_001
    oldest = await s.stub.Retrieve(
        pb.RetrieveRequest(scope=scope(user_id), tiers=[LT], query="Memory 5", min_score=0.0)
    )
    assert all(i.content not in {f"Memory {n}" for n in range(1000)} for i in oldest.items)


async def test_fifty_concurrent_adders_never_pass_the_limit(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(long_term={"max_memories": 20})

    async def add(i: int) -> grpc.StatusCode:
        try:
            await s.stub.Add(
                pb.AddRequest(scope=scope(user_id), tier=LT, content=f"Concurrent fact {i}")
            )
            return grpc.StatusCode.OK
        except grpc.aio.AioRpcError as err:
            return err.code()

    codes = await asyncio.gather(*(add(i) for i in range(50)))
    assert codes.count(grpc.StatusCode.OK) == 20
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 30
    assert live_count(s, user_id) == 20
