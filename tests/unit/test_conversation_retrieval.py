"""Conversations through the engine: order, time, context windows and the working tier's
place in a multi-tier retrieve (issue 14, ADRs 0400-0401)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memoryd.core.engine import MemoryEngine
from memoryd.core.errors import InvalidArgument
from memoryd.core.models import AddCommand, Lookup, RenderQuery, RetrieveQuery, Scope, Tier
from tests.unit.unit_kit import AppFactory

USER = Scope(tenant="t1", user_id="ines")


def _at(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()


async def _say(
    engine: MemoryEngine, session: str, speaker: str, text: str, when: float | None = None
) -> str:
    scope = Scope(tenant=USER.tenant, user_id=USER.user_id, session_id=session)
    added = await engine.add(
        AddCommand(
            scope=scope,
            tier=Tier.LONG_TERM,
            content=text,
            metadata={"speaker": speaker},
            occurred_at=when,
        )
    )
    return added.memory_id


async def test_turns_keep_their_session_order_and_the_time_they_were_said(
    engine: MemoryEngine,
) -> None:
    said = _at(2023, 5, 14, 18)
    first = await _say(engine, "s1", "Ana", "Hi Ben", said)
    second = await _say(engine, "s1", "Ben", "Hi Ana", said + 1)
    other = await _say(engine, "s2", "Ana", "Back again")
    now_said = await engine.add(AddCommand(scope=USER, tier=Tier.LONG_TERM, content="A note"))
    got = await engine.get(
        Lookup(scope=USER, tier=Tier.LONG_TERM, ids=[first, second, other, now_said.memory_id])
    )
    by_id = {r.id: r for r in got.items}
    assert [by_id[i].position for i in (first, second, other)] == [1, 2, 1]
    assert by_id[first].occurred_at == said and by_id[second].occurred_at == said + 1
    assert by_id[first].created_at != said  # stored now, said then
    note = by_id[now_said.memory_id]
    assert note.position == 0 and note.occurred_at == note.created_at


async def test_a_context_window_returns_each_hit_with_its_neighbouring_turns(
    engine: MemoryEngine,
) -> None:
    turns = [
        ("Ana", "How was the weekend?"),
        ("Ben", "Quiet. Who is watching the kittens while you travel?"),
        ("Ana", "My neighbour Ruth, she used to be a vet tech."),
        ("Ben", "Lucky kittens."),
        ("Ana", "Anyway, the quarterly report is due Friday."),
    ]
    ids = [await _say(engine, "s1", who, text) for who, text in turns]
    found = await engine.retrieve(
        RetrieveQuery(
            scope=USER,
            query="who is watching the kittens",
            tiers=[Tier.LONG_TERM],
            top_k=1,
            context_window=1,
        )
    )
    [hit] = found.items
    assert hit.id == ids[2]  # the reply to the question that matches
    assert [c.id for c in hit.context] == [ids[1], ids[3]]  # before and after, in order
    plain = await engine.retrieve(
        RetrieveQuery(scope=USER, query="who is watching the kittens", tiers=[Tier.LONG_TERM])
    )
    assert all(not r.context for r in plain.items)


async def test_a_context_window_is_bounded(engine: MemoryEngine) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await engine.retrieve(RetrieveQuery(scope=USER, query="x", context_window=99))
    assert {v.field for v in caught.value.violations} == {"context_window"}


FILLER = [
    "The quarterly report is due on Friday",
    "We should repaint the kitchen before winter",
    "My sister adopted a grey cat called Pixel",
    "The train to the coast was late again",
    "Dinner at the new ramen place was great",
    "I finally fixed the bike's back wheel",
]


async def test_the_time_a_query_names_lifts_what_was_said_then(engine: MemoryEngine) -> None:
    # Scores are normalised over the candidates: a realistic pool, not two memories alone.
    for n, text in enumerate(FILLER):
        await _say(engine, "s0", "Ana", text, _at(2023, 3, 1 + n))
    may = await _say(engine, "s1", "Ana", "I went hiking in the hills", _at(2023, 5, 20))
    july = await _say(engine, "s2", "Ana", "I went hiking in the hills again", _at(2023, 7, 20))
    found = await engine.retrieve(
        RetrieveQuery(scope=USER, query="Where did Ana go hiking in May 2023?", top_k=2)
    )
    assert [r.id for r in found.items] == [may, july]  # a soft filter: July still comes
    found = await engine.retrieve(
        RetrieveQuery(scope=USER, query="Where did Ana go hiking in July 2023?", top_k=2)
    )
    assert [r.id for r in found.items] == [july, may]


async def test_a_turn_by_the_person_the_query_names_comes_first(engine: MemoryEngine) -> None:
    for n, text in enumerate(FILLER):
        await _say(engine, "s0", "Ben", text, _at(2023, 3, 1 + n))
    bens = await _say(engine, "s1", "Ben", "my favourite colour is green")
    anas = await _say(engine, "s2", "Ana", "my favourite colour is green too")
    found = await engine.retrieve(
        RetrieveQuery(scope=USER, query="What is Ana's favourite colour?", top_k=2)
    )
    assert [r.id for r in found.items] == [anas, bens]


async def test_working_entries_come_first_only_when_the_query_touches_them(
    engine: MemoryEngine,
) -> None:
    task = Scope(tenant=USER.tenant, user_id=USER.user_id, task_id="t-1")
    await engine.add(AddCommand(scope=task, tier=Tier.WORKING, key="step", content="compile"))
    await engine.add(AddCommand(scope=task, tier=Tier.WORKING, key="owner", content="Ben"))
    await engine.add(AddCommand(scope=task, tier=Tier.LONG_TERM, content="Ben likes green tea"))
    found = await engine.retrieve(RetrieveQuery(scope=task, query="what tea does Ben like"))
    assert [(r.tier, r.key) for r in found.items[:2]] == [
        (Tier.WORKING, "owner"),
        (Tier.LONG_TERM, ""),
    ]
    assert all(r.key != "step" for r in found.items)
    listing = await engine.retrieve(RetrieveQuery(scope=task, tiers=[Tier.WORKING]))
    assert {r.key for r in listing.items} == {"step", "owner"}  # no query: every entry


async def test_render_context_shows_a_hit_between_its_turns_within_the_budget(
    make_app: AppFactory,
) -> None:
    engine = (await make_app()).engine
    turns = [
        ("Ben", "Who is watching the kittens while you travel?"),
        ("Ana", "My neighbour Ruth, she used to be a vet tech."),
        ("Ben", "Lucky kittens, and lucky Ruth."),
    ]
    for who, text in turns:
        await _say(engine, "s1", who, text)
    query = RenderQuery(scope=USER, query="neighbour Ruth vet tech", top_k=1, context_window=1)
    rendered = await engine.render_context(query)
    lines = rendered.text.splitlines()
    items = [line for line in lines if line.startswith("<item")]
    assert len(items) == 3 and rendered.item_count == 3
    assert 'context="true"' in items[0] and "kittens while" in items[0]
    assert 'context="true"' not in items[1] and "Ruth" in items[1]
    assert 'context="true"' in items[2]
    tight = await engine.render_context(
        RenderQuery(
            scope=USER,
            query=query.query,
            top_k=1,
            context_window=1,
            token_budget=rendered.token_count - 5,
        )
    )
    assert tight.item_count == 1 and tight.truncated and "Ruth" in tight.text
    assert tight.token_count <= rendered.token_count - 5
