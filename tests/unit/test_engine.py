"""The engine on its own: what Add, Retrieve, Get, Delete, Prune, Export/Import and Usage
promise, checked without a server, Redis or model weights."""

from __future__ import annotations

import pytest

from memoryd.core.engine import MemoryEngine
from memoryd.core.errors import InvalidArgument, QuotaExceeded
from memoryd.core.models import (
    AddCommand,
    ExportQuery,
    Kind,
    Lookup,
    Operation,
    PruneCommand,
    PruneStrategy,
    RetrieveQuery,
    Scope,
    Tier,
)
from tests.support.clock import MovableClock
from tests.unit.unit_kit import AppFactory

ME = Scope(tenant="t1", user_id="alice", task_id="task-1", session_id="s-1")


async def _add(engine: MemoryEngine, tier: Tier, content: str = "", **kw: object) -> str:
    result = await engine.add(AddCommand(scope=ME, tier=tier, content=content, **kw))  # type: ignore[arg-type]
    return result.memory_id


async def test_a_malformed_add_names_every_bad_field_and_writes_nothing(
    engine: MemoryEngine,
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await engine.add(
            AddCommand(
                scope=Scope(tenant="t1", user_id=""),
                tier=Tier.LONG_TERM,
                content=" ",
                importance=2.0,
            )
        )
    fields = {v.field for v in caught.value.violations}
    assert {"scope.user_id", "content", "importance"} <= fields
    usage = await engine.usage(Scope(tenant="t1", user_id="alice"))
    assert sum(t.count for t in usage.tiers) == 0


async def test_working_memory_needs_a_task_and_is_addressed_by_key(engine: MemoryEngine) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await engine.add(
            AddCommand(scope=Scope("t1", "alice"), tier=Tier.WORKING, key="k", content="v")
        )
    assert [v.field for v in caught.value.violations] == ["scope.task_id"]
    await _add(engine, Tier.WORKING, "Paris", key="destination")
    got = await engine.get(Lookup(scope=ME, tier=Tier.WORKING, keys=["destination", "nope"]))
    assert [i.content for i in got.items] == ["Paris"]
    assert got.missing == ["nope"]


async def test_keys_address_only_keyed_tiers(engine: MemoryEngine) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await engine.get(Lookup(scope=ME, tier=Tier.LONG_TERM, keys=["k"]))
    assert caught.value.violations[0].field == "keys"


async def test_a_body_belongs_to_its_own_tier_only(engine: MemoryEngine) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await engine.add(
            AddCommand(scope=ME, tier=Tier.LONG_TERM, content="x", document_json='{"a": 1}')
        )
    assert "document_json" in {v.field for v in caught.value.violations}


async def test_long_term_deduplicates_and_finds_by_shared_words(engine: MemoryEngine) -> None:
    first = await _add(engine, Tier.LONG_TERM, "User enjoys skiing in the Alps")
    again = await engine.add(
        AddCommand(scope=ME, tier=Tier.LONG_TERM, content="user enjoys  skiing in the alps")
    )
    assert (again.memory_id, again.operation) == (first, Operation.DEDUPLICATED)
    await _add(engine, Tier.LONG_TERM, "Prefers tea over coffee")
    found = await engine.retrieve(
        RetrieveQuery(scope=ME, query="skiing Alps", tiers=[Tier.LONG_TERM], top_k=5)
    )
    assert found.items[0].id == first
    assert all(0.0 <= i.score <= 1.0 for i in found.items)


async def test_retrieve_for_a_user_with_nothing_is_empty(engine: MemoryEngine) -> None:
    found = await engine.retrieve(RetrieveQuery(scope=Scope("t1", "nobody"), query="anything"))
    assert (found.items, found.total_count, found.embedding_ms) == ([], 0, 0.0)


async def test_working_items_come_first_in_a_multi_tier_retrieve(engine: MemoryEngine) -> None:
    await _add(engine, Tier.LONG_TERM, "The flight to Paris leaves Monday")
    await _add(engine, Tier.WORKING, "Paris", key="destination")
    found = await engine.retrieve(RetrieveQuery(scope=ME, query="flight to Paris", top_k=5))
    assert found.items[0].tier is Tier.WORKING
    assert Tier.LONG_TERM in {i.tier for i in found.items}


async def test_the_token_budget_cuts_the_last_item(engine: MemoryEngine) -> None:
    await _add(engine, Tier.LONG_TERM, "skiing " * 200)
    found = await engine.retrieve(
        RetrieveQuery(scope=ME, query="skiing", tiers=[Tier.LONG_TERM], token_budget=20)
    )
    assert found.truncated and found.token_count <= 20


async def test_tenants_never_see_each_other(engine: MemoryEngine) -> None:
    await _add(engine, Tier.LONG_TERM, "secret plan for the launch")
    other = Scope(tenant="t2", user_id="alice")
    found = await engine.retrieve(RetrieveQuery(scope=other, query="secret plan launch"))
    assert found.items == []


async def test_a_full_quota_refuses_with_its_limit_or_prunes_when_asked(
    make_app: AppFactory,
) -> None:
    app = await make_app(long_term={"max_memories": 3})
    engine = app.engine
    for i in range(3):
        await _add(engine, Tier.LONG_TERM, f"memory number {i}")
    with pytest.raises(QuotaExceeded) as caught:
        await _add(engine, Tier.LONG_TERM, "one too many")
    assert "max: 3" in str(caught.value) and "upgrade" in str(caught.value)
    pruned = await engine.add(
        AddCommand(scope=ME, tier=Tier.LONG_TERM, content="one too many", auto_prune=True)
    )
    assert pruned.operation is Operation.ADD_WITH_PRUNE


async def test_export_then_erase_then_import_gives_the_same_export(engine: MemoryEngine) -> None:
    await _add(engine, Tier.LONG_TERM, "Likes long walks", kind=Kind.PREFERENCE)
    await _add(engine, Tier.PERSONA, "Ada", key="name")
    query = ExportQuery(scope=ME)
    before = [r async for r in engine.export_records(query)]
    erased = await engine.prune(PruneCommand(scope=ME, strategy=PruneStrategy.ALL), "test")
    assert erased.deleted_count >= 2
    assert [r async for r in engine.export_records(query)] == []
    done = await engine.import_records(ME, before)
    assert done.imported_count == len(before)
    after = [r async for r in engine.export_records(query)]
    assert sorted((r.id, r.content, r.tier) for r in after) == sorted(
        (r.id, r.content, r.tier) for r in before
    )


async def test_expired_memories_are_never_returned(
    engine: MemoryEngine, clock: MovableClock
) -> None:
    await _add(engine, Tier.LONG_TERM, "temporary door code 4321", expires_at=clock() + 60)
    clock.advance(120)
    found = await engine.retrieve(
        RetrieveQuery(scope=ME, query="door code", tiers=[Tier.LONG_TERM])
    )
    assert found.items == []
