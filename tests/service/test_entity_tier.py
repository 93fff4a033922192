"""The entity tier over gRPC, on both vector adapters: entities unique by name, relations
naming entities by name, contradictions closing old relations, one-hop relations on
Retrieve and Get, cascading deletes, quotas, and export/import, erasure and usage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
import pytest

from memoryd.settings import QuotaProfile
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.service.test_export_import import export, stream
from tests.support.clock import MovableClock
from tests.support.rpc import bad_request_fields, quota_failure, rpc_error, scope
from tests.support.vector_stores import QDRANT_LOCAL

E = pb.TIER_ENTITY


@pytest.fixture(params=["edge", "qdrant"])
def vectors(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The vector adapter's server settings."""
    return QDRANT_LOCAL if request.param == "qdrant" else {"vectors": {"backend": "edge"}}


@pytest.fixture
async def server(start_server: ServerFactory, vectors: dict[str, Any]) -> RunningServer:
    return await start_server(**vectors)


async def entity(s: RunningServer, user: str, name: str, **kw: Any) -> pb.AddResponse:
    fields: dict[str, Any] = {k: kw.pop(k) for k in ("type", "aliases", "description") if k in kw}
    return await s.stub.Add(
        pb.AddRequest(scope=scope(user), tier=E, entity=pb.Entity(name=name, **fields), **kw)
    )


async def relate(
    s: RunningServer, user: str, subject: str, predicate: str, obj: str, **kw: Any
) -> pb.AddResponse:
    relation = pb.Relation(subject=subject, predicate=predicate, object=obj)
    return await s.stub.Add(pb.AddRequest(scope=scope(user), tier=E, relation=relation, **kw))


async def get(
    s: RunningServer, user: str, *, ids: Sequence[str] = (), keys: Sequence[str] = ()
) -> pb.GetResponse:
    return await s.stub.Get(
        pb.GetRequest(scope=scope(user), tier=E, ids=list(ids), keys=list(keys))
    )


def links(item: pb.MemoryItem) -> set[tuple[str, str, str]]:
    return {(r.subject, r.predicate, r.object) for r in item.entity.relations}


async def test_an_entity_is_unique_by_name_and_learns_aliases_and_a_description(
    server: RunningServer, user_id: str
) -> None:
    first = await entity(server, user_id, "Ana García", type="person")
    assert first.operation == pb.OPERATION_ADD
    same = await entity(server, user_id, "  ana   garcía ")
    assert (same.operation, same.memory_id) == (pb.OPERATION_DEDUPLICATED, first.memory_id)
    more = await entity(server, user_id, "Ana García", aliases=["Anita"], description="my sister")
    assert (more.operation, more.memory_id) == (pb.OPERATION_UPDATED, first.memory_id)
    by_alias = await entity(server, user_id, "anita")
    assert by_alias.memory_id == first.memory_id
    [item] = (await get(server, user_id, keys=["ANITA"])).items
    assert (item.entity.name, item.entity.type, list(item.entity.aliases)) == (
        "Ana García",
        "person",
        ["Anita"],
    )
    assert item.content == "Ana García (person): my sister\nAlso known as: Anita"
    assert item.kind == pb.KIND_ENTITY and item.source == pb.SOURCE_EXPLICIT


async def test_a_relation_creates_the_entities_it_names_and_shows_on_both(
    server: RunningServer, user_id: str
) -> None:
    await entity(server, user_id, "Ana", type="person")
    reply = await relate(server, user_id, "ana", "works at", "Acme Corp")
    assert reply.operation == pb.OPERATION_ADD
    got = await get(server, user_id, keys=["Ana", "acme corp"])
    by_name = {i.entity.name: i for i in got.items}
    assert set(by_name) == {"Ana", "Acme Corp"}
    assert links(by_name["Ana"]) == {("Ana", "works at", "Acme Corp")}
    assert links(by_name["Acme Corp"]) == {("Ana", "works at", "Acme Corp")}
    assert by_name["Ana"].content.endswith("\nAna works at Acme Corp")
    [relation] = (await get(server, user_id, ids=[reply.memory_id])).items
    assert relation.kind == pb.KIND_RELATION and relation.relation.valid_from.seconds > 0
    assert not relation.relation.HasField("invalid_at")
    again = await relate(server, user_id, "Ana", "works_at", "ACME corp")
    assert (again.operation, again.memory_id) == (pb.OPERATION_DEDUPLICATED, reply.memory_id)


async def test_a_newer_contradicting_relation_closes_the_old_one(
    start_server: ServerFactory, vectors: dict[str, Any], user_id: str
) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock, **vectors)
    old = await relate(s, user_id, "Ana", "works_at", "Acme")
    clock.advance(100)
    new = await relate(s, user_id, "Ana", "works_at", "Globex")
    [closed] = (await get(s, user_id, ids=[old.memory_id])).items
    assert closed.relation.invalid_at.seconds == int(clock.now)
    [current] = (await get(s, user_id, ids=[new.memory_id])).items
    assert not current.relation.HasField("invalid_at")
    [ana] = (await get(s, user_id, keys=["Ana"])).items
    assert links(ana) == {("Ana", "works_at", "Globex")}
    # Multi-valued predicates hold several objects at once.
    await relate(s, user_id, "Ana", "likes", "tea")
    await relate(s, user_id, "Ana", "likes", "coffee")
    [ana] = (await get(s, user_id, keys=["Ana"])).items
    assert {o for _, p, o in links(ana) if p == "likes"} == {"tea", "coffee"}


async def test_a_relation_older_than_the_current_one_is_stored_closed(
    start_server: ServerFactory, vectors: dict[str, Any], user_id: str
) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock, **vectors)
    current = await relate(s, user_id, "Ana", "lives_in", "Rome")
    past = pb.Relation(subject="Ana", predicate="lives_in", object="Lyon")
    past.valid_from.FromSeconds(int(clock.now) - 1000)
    reply = await s.stub.Add(pb.AddRequest(scope=scope(user_id), tier=E, relation=past))
    [lyon] = (await get(s, user_id, ids=[reply.memory_id])).items
    assert lyon.relation.invalid_at.seconds == int(clock.now)
    [rome] = (await get(s, user_id, ids=[current.memory_id])).items
    assert not rome.relation.HasField("invalid_at")


async def test_retrieve_finds_entities_with_their_current_relations(
    server: RunningServer, user_id: str
) -> None:
    await entity(server, user_id, "Michi", type="pet", description="a grey cat")
    await entity(server, user_id, "Rumi", type="project", description="a personal AI agent")
    await relate(server, user_id, "user", "owns", "Michi")
    found = await server.stub.Retrieve(
        pb.RetrieveRequest(scope=scope(user_id), tiers=[E], query="a cat")
    )
    assert found.items[0].entity.name == "Michi"
    assert links(found.items[0]) == {("user", "owns", "Michi")}
    assert all(i.kind == pb.KIND_ENTITY for i in found.items)
    relations = await server.stub.Retrieve(
        pb.RetrieveRequest(scope=scope(user_id), tiers=[E], kinds=[pb.KIND_RELATION])
    )
    assert [i.content for i in relations.items] == ["user owns Michi"]


async def test_deleting_an_entity_deletes_its_relations(
    server: RunningServer, user_id: str
) -> None:
    kept = await relate(server, user_id, "Ana", "knows", "Juan")
    gone = await relate(server, user_id, "Acme", "employs", "Juan")
    reply = await server.stub.Delete(pb.DeleteRequest(scope=scope(user_id), tier=E, keys=["Juan"]))
    assert reply.deleted_count == 3  # Juan and both his relations
    got = await get(server, user_id, ids=[kept.memory_id, gone.memory_id], keys=["Ana", "Juan"])
    assert [i.entity.name for i in got.items] == ["Ana"] and not links(got.items[0])
    assert set(got.missing) == {kept.memory_id, gone.memory_id, "Juan"}


async def test_bad_entity_requests_name_their_field(server: RunningServer, user_id: str) -> None:
    cases = [
        (pb.AddRequest(scope=scope(user_id), tier=E, content="Ana"), "entity"),
        (pb.AddRequest(scope=scope(user_id), tier=E, entity=pb.Entity(name=" ")), "entity.name"),
        (
            pb.AddRequest(
                scope=scope(user_id),
                tier=E,
                entity=pb.Entity(name="Ana"),
                relation=pb.Relation(subject="a", predicate="b", object="c"),
            ),
            "entity",
        ),
        (
            pb.AddRequest(
                scope=scope(user_id), tier=E, relation=pb.Relation(subject="a", object="c")
            ),
            "relation.predicate",
        ),
        (
            pb.AddRequest(
                scope=scope(user_id),
                tier=pb.TIER_LONG_TERM,
                content="x",
                entity=pb.Entity(name="A"),
            ),
            "entity",
        ),
    ]
    for request, field in cases:
        err = await rpc_error(server.stub.Add(request))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in bad_request_fields(err), (request, bad_request_fields(err))
    listed = await server.stub.Retrieve(pb.RetrieveRequest(scope=scope(user_id), tiers=[E]))
    assert not listed.items


def small_quota(entities: int, relations: int) -> dict[str, object]:
    profile = {"entity_max_entities": entities, "entity_max_relations": relations}
    return {"quotas": {"profiles": {"default": profile}}}


async def test_a_full_entity_tier_refuses_with_the_quota_error(
    start_server: ServerFactory, vectors: dict[str, Any], user_id: str
) -> None:
    s = await start_server(**vectors, **small_quota(3, 2))
    for name in ("A", "B", "C"):
        await entity(s, user_id, name)
    err = await rpc_error(entity(s, user_id, "D"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max: 3 entities" in (err.details() or "")
    assert "delete old entities or upgrade" in (err.details() or "")
    assert quota_failure(err).violations[0].subject == f"entity:{user_id}"
    # A relation that needs a new entity is refused whole: nothing is written.
    err = await rpc_error(relate(s, user_id, "A", "knows", "Z"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await relate(s, user_id, "A", "knows", "B")
    await relate(s, user_id, "B", "knows", "C")
    err = await rpc_error(relate(s, user_id, "C", "knows", "A"))
    assert "max: 2 relations" in (err.details() or "")
    usage = await s.stub.Usage(pb.UsageRequest(scope=scope(user_id)))
    [tier] = [t for t in usage.tiers if t.tier == E]
    assert (tier.count, tier.max_count, tier.percent) == (3, 3, 100.0)
    assert any(a.tier == E and a.level == "critical" for a in usage.alerts)


async def test_auto_prune_drops_the_oldest_entities_with_their_relations(
    start_server: ServerFactory, vectors: dict[str, Any], user_id: str
) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock, **vectors, **small_quota(3, 10))
    for name in ("A", "B", "C"):
        await entity(s, user_id, name)
        clock.advance(1)
    await relate(s, user_id, "B", "knows", "A")
    reply = await entity(s, user_id, "D", auto_prune=True)
    assert reply.operation == pb.OPERATION_ADD_WITH_PRUNE
    got = await get(s, user_id, keys=["A", "B", "C", "D"])
    assert sorted(i.entity.name for i in got.items) == ["B", "C", "D"]
    assert not any(links(i) for i in got.items)  # B's relation went with A
    # A relation keeps the entities it links out of the prune.
    linked = await relate(s, user_id, "B", "knows", "E", auto_prune=True)
    assert linked.operation == pb.OPERATION_ADD_WITH_PRUNE
    names = {i.entity.name for i in (await get(s, user_id, keys=["B", "C", "D", "E"])).items}
    assert names == {"B", "D", "E"}


async def test_entities_and_relations_leave_in_an_export_and_come_back_linked(
    start_server: ServerFactory, vectors: dict[str, Any], user_id: str
) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock, **vectors)
    await entity(s, user_id, "Ana", type="person", aliases=["Anita"])
    await relate(s, user_id, "Ana", "works_at", "Acme")
    clock.advance(10)
    await relate(s, user_id, "Ana", "works_at", "Globex")
    dump = await export(s, user_id, tiers=[E])
    assert dump.header.total == 5 and len(dump.items) == 5
    other = f"{user_id}-copy"
    reply = await s.stub.Import(stream(other, dump))
    assert (reply.imported_count, reply.skipped_count) == (5, 0)
    [ana] = (await get(s, other, keys=["anita"])).items
    assert links(ana) == {("Ana", "works_at", "Globex")}
    closed = [i for i in (await export(s, other, tiers=[E])).items if i.relation.object == "Acme"]
    assert closed[0].relation.HasField("invalid_at")
    again = await s.stub.Import(stream(other, dump))
    assert (again.imported_count, again.skipped_count) == (0, 5)


async def test_erasure_and_prune_all_remove_the_entity_tier(
    server: RunningServer, user_id: str
) -> None:
    await relate(server, user_id, "Ana", "knows", "Juan")
    erased = await server.stub.Prune(
        pb.PruneRequest(scope=scope(user_id), strategy=pb.PRUNE_STRATEGY_ALL)
    )
    assert {c.tier: c.count for c in erased.per_tier}[E] == 3
    listed = await server.stub.Retrieve(pb.RetrieveRequest(scope=scope(user_id), tiers=[E]))
    assert not listed.items


async def test_entities_are_persistent_retention_leaves_them(
    start_server: ServerFactory, vectors: dict[str, Any], user_id: str
) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock, **vectors)
    await relate(s, user_id, "Ana", "knows", "Juan")
    clock.advance(3 * 365 * 86_400)
    report = await s.app.maintenance.run_once()
    assert E not in {pb.Tier.Value(f"TIER_{t.name}") for t in report.archived_by_tier}
    strategies: list[tuple[pb.PruneStrategy.ValueType, dict[str, Any]]] = [
        (pb.PRUNE_STRATEGY_EXPIRED, {}),
        (pb.PRUNE_STRATEGY_ARCHIVE_OLDER_THAN, {"older_than_days": 1}),
    ]
    for strategy, extra in strategies:
        reply = await s.stub.Prune(
            pb.PruneRequest(scope=scope(user_id), tiers=[E], strategy=strategy, **extra)
        )
        assert reply.deleted_count == reply.archived_count == 0
    got = await get(s, user_id, keys=["Ana", "Juan"])
    assert len(got.items) == 2


async def test_oldest_percent_prunes_entities_with_their_relations(
    start_server: ServerFactory, vectors: dict[str, Any], user_id: str
) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock, **vectors)
    for name in ("A", "B", "C", "D"):
        await entity(s, user_id, name)
        clock.advance(1)
    await relate(s, user_id, "C", "knows", "A")
    request = pb.PruneRequest(
        scope=scope(user_id), tiers=[E], strategy=pb.PRUNE_STRATEGY_OLDEST_PERCENT, percent=25
    )
    dry = await s.stub.Prune(pb.PruneRequest(dry_run=True, **_fields(request)))
    done = await s.stub.Prune(request)
    # 25% of 4 entities (A, with its relation) and of 1 relation (that same one).
    assert dry.deleted_count == done.deleted_count == 2
    names = {i.entity.name for i in (await get(s, user_id, keys=["A", "B", "C", "D"])).items}
    assert names == {"B", "C", "D"}


def _fields(request: pb.PruneRequest) -> dict[str, Any]:
    return {
        "scope": request.scope,
        "tiers": list(request.tiers),
        "strategy": request.strategy,
        "percent": request.percent,
    }


async def test_the_default_quotas_are_rt006s(server: RunningServer, user_id: str) -> None:
    await entity(server, user_id, "Ana")
    usage = await server.stub.Usage(pb.UsageRequest(scope=scope(user_id)))
    [tier] = [t for t in usage.tiers if t.tier == E]
    assert (tier.count, tier.max_count, tier.percent) == (1, 5_000, 100 / 5_000)
    assert QuotaProfile().entity_max_relations == 10_000
