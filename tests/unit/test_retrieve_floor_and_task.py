"""Which memories a Retrieve lets through its relevance floor (ADR 0405): a caller's
metadata filter selects on its own, and a Retrieve that asks working memory with other
tiers reads their memories in the light of the task's state the query matched."""

from __future__ import annotations

from memoryd.app import App
from memoryd.core.engine import MemoryEngine
from memoryd.core.models import AddCommand, RetrieveQuery, Scope, Tier
from tests.unit.unit_kit import AppFactory

ME = Scope(tenant="t1", user_id="alice", task_id="trip")


async def _add(engine: MemoryEngine, tier: Tier, content: str, **kw: object) -> None:
    await engine.add(AddCommand(scope=ME, tier=tier, content=content, **kw))  # type: ignore[arg-type]


async def _contents(engine: MemoryEngine, **kw: object) -> list[str]:
    found = await engine.retrieve(RetrieveQuery(scope=ME, **kw))  # type: ignore[arg-type]
    return [i.content for i in found.items]


async def _sports_and_food(engine: MemoryEngine) -> None:
    await _add(engine, Tier.LONG_TERM, "skiing every winter", metadata={"category": "sports"})
    await _add(engine, Tier.LONG_TERM, "espresso after lunch", metadata={"category": "food"})


async def test_a_metadata_filter_selects_what_the_query_only_orders(engine: MemoryEngine) -> None:
    await _sports_and_food(engine)
    # "tastes" shares nothing with either memory: under the default floor of an
    # unfiltered query, nothing is relevant...
    assert await _contents(engine, query="tastes", tiers=[Tier.LONG_TERM]) == []
    # ...while a filter is the caller's own criterion: what it selects comes back, and
    # only that.
    filtered = await _contents(
        engine, query="tastes", tiers=[Tier.LONG_TERM], filters={"category": "sports"}
    )
    assert filtered == ["skiing every winter"]


async def test_an_explicit_min_score_still_applies_under_a_filter(engine: MemoryEngine) -> None:
    await _sports_and_food(engine)
    found = await _contents(
        engine,
        query="tastes",
        tiers=[Tier.LONG_TERM],
        filters={"category": "sports"},
        min_score=0.3,
    )
    assert found == []


async def test_the_filtered_floor_is_a_setting(make_app: AppFactory) -> None:
    app: App = await make_app(retrieval={"filtered_min_score": 0.3})
    await _sports_and_food(app.engine)
    found = await _contents(
        app.engine, query="tastes", tiers=[Tier.LONG_TERM], filters={"category": "sports"}
    )
    assert found == []


async def _hotel_trip(engine: MemoryEngine) -> None:
    await _add(engine, Tier.WORKING, "Lisbon Palace", key="hotel")
    await _add(engine, Tier.LONG_TERM, "Palace hotel breakfast")


async def test_long_term_memories_are_read_in_the_light_of_the_task_state_the_query_matched(
    engine: MemoryEngine,
) -> None:
    await _hotel_trip(engine)
    # Alone, the query shares nothing with the breakfast memory.
    assert await _contents(engine, query="Lisbon plans", tiers=[Tier.LONG_TERM]) == []
    # With working memory asked too, its entry "hotel: Lisbon Palace" (matched by "Lisbon")
    # grounds the query: the Palace breakfast is relevant to the task.
    found = await engine.retrieve(
        RetrieveQuery(scope=ME, query="Lisbon plans", tiers=[Tier.WORKING, Tier.LONG_TERM])
    )
    assert [(i.tier, i.content) for i in found.items] == [
        (Tier.WORKING, "Lisbon Palace"),
        (Tier.LONG_TERM, "Palace hotel breakfast"),
    ]
    parts = found.items[1].components
    assert parts is not None
    # What grounding added is shown apart from the query's own similarity.
    assert parts.dense == 0.0 and parts.grounding_lift > 0.3


async def test_task_state_the_query_does_not_match_grounds_nothing(engine: MemoryEngine) -> None:
    await _hotel_trip(engine)
    found = await _contents(engine, query="museum tickets", tiers=[Tier.WORKING, Tier.LONG_TERM])
    assert found == []


async def test_grounding_never_lowers_a_memory_s_score(engine: MemoryEngine) -> None:
    await _add(engine, Tier.WORKING, "Lisbon Palace", key="hotel")
    await _add(engine, Tier.LONG_TERM, "Lisbon plans for the weekend")
    alone = await engine.retrieve(
        RetrieveQuery(scope=ME, query="Lisbon plans", tiers=[Tier.LONG_TERM])
    )
    grounded = await engine.retrieve(
        RetrieveQuery(scope=ME, query="Lisbon plans", tiers=[Tier.WORKING, Tier.LONG_TERM])
    )
    score = {i.content: i.score for i in grounded.items}
    assert score["Lisbon plans for the weekend"] >= alone.items[0].score


async def test_grounding_is_a_setting(make_app: AppFactory) -> None:
    app: App = await make_app(retrieval={"task_grounding": False})
    await _hotel_trip(app.engine)
    found = await _contents(app.engine, query="Lisbon plans", tiers=[Tier.WORKING, Tier.LONG_TERM])
    assert found == ["Lisbon Palace"]
