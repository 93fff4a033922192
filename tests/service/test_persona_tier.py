"""Persona facts over gRPC: key/value, unique per (key, value), refreshed, forgotten by key."""

from __future__ import annotations

from typing import Any

from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.clock import MovableClock
from tests.support.rpc import scope

P = pb.TIER_PERSONA


async def fact(s: RunningServer, user: str, key: str, value: str, **kw: Any) -> pb.AddResponse:
    return await s.stub.Add(pb.AddRequest(scope=scope(user), tier=P, key=key, content=value, **kw))


async def test_facts_are_unique_per_key_and_value_and_refreshed(
    start_server: ServerFactory, user_id: str
) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock)
    first = await fact(s, user_id, "likes", "coffee")
    await fact(s, user_id, "likes", "skiing")
    clock.advance(100)
    again = await fact(s, user_id, "likes", "coffee")
    assert again.operation == pb.OPERATION_DEDUPLICATED and again.memory_id == first.memory_id
    listed = await s.stub.Retrieve(pb.RetrieveRequest(scope=scope(user_id), tiers=[P]))
    by_value = {i.content: i for i in listed.items}
    assert set(by_value) == {"coffee", "skiing"}
    coffee = by_value["coffee"]
    assert coffee.updated_at.seconds - coffee.created_at.seconds >= 99


async def test_source_is_explicit_unless_said_auto(memoryd: RunningServer, user_id: str) -> None:
    await fact(memoryd, user_id, "name", "Ana")
    await fact(memoryd, user_id, "city", "Lisbon", source=pb.SOURCE_AUTO)
    listed = await memoryd.stub.Retrieve(pb.RetrieveRequest(scope=scope(user_id), tiers=[P]))
    sources = {i.key: i.source for i in listed.items}
    assert sources == {"name": pb.SOURCE_EXPLICIT, "city": pb.SOURCE_AUTO}


async def test_forgetting_a_key_returns_how_many_facts_went(
    memoryd: RunningServer, user_id: str
) -> None:
    await fact(memoryd, user_id, "likes", "coffee")
    await fact(memoryd, user_id, "likes", "skiing")
    await fact(memoryd, user_id, "name", "Ana")
    gone = await memoryd.stub.Delete(pb.DeleteRequest(scope=scope(user_id), tier=P, keys=["likes"]))
    assert gone.deleted_count == 2
    listed = await memoryd.stub.Retrieve(pb.RetrieveRequest(scope=scope(user_id), tiers=[P]))
    assert [i.key for i in listed.items] == ["name"]


async def test_get_by_key(memoryd: RunningServer, user_id: str) -> None:
    await fact(memoryd, user_id, "name", "Ana")
    got = await memoryd.stub.Get(pb.GetRequest(scope=scope(user_id), tier=P, keys=["name", "age"]))
    assert [(i.key, i.content) for i in got.items] == [("name", "Ana")]
    assert list(got.missing) == ["age"]


async def test_a_query_searches_facts_semantically(memoryd: RunningServer, user_id: str) -> None:
    await fact(memoryd, user_id, "diet", "vegetarian")
    await fact(memoryd, user_id, "hometown", "Porto")
    found = await memoryd.stub.Retrieve(
        pb.RetrieveRequest(scope=scope(user_id), tiers=[P], query="what food does the user eat")
    )
    assert found.items[0].key == "diet"


async def test_persona_needs_a_key(memoryd: RunningServer, user_id: str) -> None:
    from tests.support.rpc import bad_request_fields, rpc_error

    err = await rpc_error(
        memoryd.stub.Add(pb.AddRequest(scope=scope(user_id), tier=P, content="x"))
    )
    assert bad_request_fields(err) == ["key"]


async def test_other_users_facts_stay_private(memoryd: RunningServer) -> None:
    await fact(memoryd, "alice", "secret", "hidden")
    listed = await memoryd.stub.Retrieve(pb.RetrieveRequest(scope=scope("bob"), tiers=[P]))
    assert not listed.items
