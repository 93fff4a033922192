"""Short-term memory over gRPC: a session's messages, TTL refreshed on write, newest 100."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from memoryd.stores.hot.port import SessionKey
from memoryd.stores.hot.redis_store import session_keys
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory, server_on
from tests.support.redis_server import RedisServer
from tests.support.rpc import scope

ST = pb.TIER_SHORT_TERM


@pytest.fixture(params=["in_process", "redis", "redis_cluster"])
async def memoryd(request: pytest.FixtureRequest, start_server: ServerFactory) -> RunningServer:
    """This hot-tier suite runs on every hot store: in-process, one Redis, a Redis Cluster."""
    return await server_on(request, start_server, request.param)


def session(user_id: str, session_id: str = "sess_abc123") -> pb.Scope:
    return scope(user_id, session_id=session_id)


async def say(
    s: RunningServer, sc: pb.Scope, content: str, role: pb.Role.ValueType = pb.ROLE_USER
) -> pb.AddResponse:
    return await s.stub.Add(pb.AddRequest(scope=sc, tier=ST, content=content, role=role))


async def test_add_returns_an_id(memoryd: RunningServer, user_id: str) -> None:
    reply = await say(memoryd, session(user_id), "User: How much is a flight to Paris?")
    assert reply.memory_id and reply.tier == ST and reply.operation == pb.OPERATION_ADD


async def test_the_session_ttl_is_3600_seconds_in_redis(
    start_server: ServerFactory,
    redis_server: RedisServer,
    redis_client: aioredis.Redis,
    user_id: str,
) -> None:
    s = await start_server(redis_url=redis_server.url)
    await say(s, session(user_id), "User: How much is a flight to Paris?")
    key = session_keys(SessionKey("default", user_id, "sess_abc123"))[0]
    ttl = await redis_client.ttl(key)
    assert 3590 <= ttl <= 3600


async def test_each_write_refreshes_the_ttl(
    start_server: ServerFactory,
    redis_server: RedisServer,
    redis_client: aioredis.Redis,
    user_id: str,
) -> None:
    s = await start_server(redis_url=redis_server.url)
    await say(s, session(user_id), "first")
    key = session_keys(SessionKey("default", user_id, "sess_abc123"))[0]
    await redis_client.expire(key, 100)
    await say(s, session(user_id), "second")
    assert await redis_client.ttl(key) > 3000


async def test_only_the_last_100_messages_are_kept(memoryd: RunningServer, user_id: str) -> None:
    for n in range(110):
        await say(memoryd, session(user_id), f"message number {n}")
    reply = await memoryd.stub.Retrieve(
        pb.RetrieveRequest(scope=session(user_id), tiers=[ST], top_k=100)
    )
    contents = [i.content for i in reply.items]
    assert len(contents) == 100 and reply.total_count == 100
    assert "message number 109" in contents and "message number 9" not in contents
    assert contents[0] == "message number 109"  # newest first


async def test_messages_sharing_words_with_the_query_come_first_then_newest(
    memoryd: RunningServer, user_id: str
) -> None:
    await say(memoryd, session(user_id), "I want to fly to Paris")
    await say(memoryd, session(user_id), "Hello there", pb.ROLE_ASSISTANT)
    await say(memoryd, session(user_id), "Also a hotel please")
    reply = await memoryd.stub.Retrieve(
        pb.RetrieveRequest(scope=session(user_id), tiers=[ST], query="flights to paris")
    )
    assert [i.content for i in reply.items] == [
        "I want to fly to Paris",
        "Also a hotel please",
        "Hello there",
    ]
    assert reply.items[0].role == pb.ROLE_USER and reply.items[2].role == pb.ROLE_ASSISTANT
    assert all(i.kind == pb.KIND_MESSAGE and i.session_id == "sess_abc123" for i in reply.items)


async def test_sessions_are_separate(memoryd: RunningServer, user_id: str) -> None:
    await say(memoryd, session(user_id, "s1"), "in one")
    reply = await memoryd.stub.Retrieve(
        pb.RetrieveRequest(scope=session(user_id, "s2"), tiers=[ST])
    )
    assert not reply.items


async def test_get_and_delete_a_message_by_id(memoryd: RunningServer, user_id: str) -> None:
    added = await say(memoryd, session(user_id), "forget me")
    got = await memoryd.stub.Get(
        pb.GetRequest(scope=session(user_id), tier=ST, ids=[added.memory_id])
    )
    assert [i.content for i in got.items] == ["forget me"]
    deleted = await memoryd.stub.Delete(
        pb.DeleteRequest(scope=session(user_id), tier=ST, ids=[added.memory_id])
    )
    assert deleted.deleted_count == 1
    got = await memoryd.stub.Get(
        pb.GetRequest(scope=session(user_id), tier=ST, ids=[added.memory_id])
    )
    assert list(got.missing) == [added.memory_id]


async def test_multi_tier_retrieve_returns_working_items_first(
    memoryd: RunningServer, user_id: str
) -> None:
    sc = scope(user_id, agent_id="a", task_id="t", session_id="s")
    await say(memoryd, sc, "Paris trip planning: which flights go to Paris?")
    await memoryd.stub.Add(
        pb.AddRequest(scope=sc, tier=pb.TIER_WORKING, key="trip_budget", content="Paris: 900 EUR")
    )
    # A stale key the query does not touch is not returned (issue 14).
    await memoryd.stub.Add(
        pb.AddRequest(scope=sc, tier=pb.TIER_WORKING, key="current_step", content="compile")
    )
    reply = await memoryd.stub.Retrieve(pb.RetrieveRequest(scope=sc, query="Paris trip planning"))
    assert [i.tier for i in reply.items] == [pb.TIER_WORKING, ST]
    assert reply.items[0].key == "trip_budget"
    assert reply.retrieval_ms > 0
