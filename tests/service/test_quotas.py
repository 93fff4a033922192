"""Long-term quotas under concurrency; the seed's quota scenarios at the real default of 10,000
are in test_seed_scenarios.py (with `bulk_load` and `live_count` from here)."""

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
from tests.support.rpc import scope

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
