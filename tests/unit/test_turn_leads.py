"""A turn of a session is embedded after the turn before it (ADR 0400, the lead): a reply
is understood with what it answers. Its keyword terms stay its own. (The vector of its own
text, which such a turn also keeps, is test_own_vectors.py's: switched off here.)"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Hashable
from pathlib import Path
from typing import Any

import pytest

from memoryd.app import App, build_app
from memoryd.cli.reindex import reindex
from memoryd.core.models import (
    AddCommand,
    ExportQuery,
    Kind,
    Lookup,
    MemoryRecord,
    Scope,
    Tier,
)
from memoryd.core.tiers.long_term import LongTermTier
from memoryd.settings import LongTermSettings, RetrievalSettings, Settings
from tests.support.clock import MovableClock
from tests.unit.unit_kit import LIVENESS_S, GatedEmbedder

USER = Scope(tenant="t1", user_id="ines")
LEAD_ALONE = RetrievalSettings(own_weight=0.0)


def _turn(session: str, speaker: str, text: str, user: Scope = USER) -> AddCommand:
    scope = Scope(tenant=user.tenant, user_id=user.user_id, session_id=session)
    return AddCommand(scope=scope, tier=Tier.LONG_TERM, content=text, metadata={"speaker": speaker})


@pytest.fixture
def embedder() -> GatedEmbedder:
    return GatedEmbedder()  # its gate is open: it only records what it embeds


@pytest.fixture
async def app(tmp_path: Path, clock: MovableClock, embedder: GatedEmbedder) -> AsyncIterator[App]:
    settings = Settings.explicit(data_dir=tmp_path / "data", retrieval=LEAD_ALONE)
    built = await build_app(settings, clock=clock, embedder=embedder)
    yield built
    await built.close()


def _embedded(embedder: GatedEmbedder) -> list[str]:
    return [text for call in embedder.calls for text in call]


async def test_a_reply_is_embedded_after_the_turn_it_answers_and_only_once(
    app: App, embedder: GatedEmbedder
) -> None:
    await app.engine.add(_turn("s1", "Ben", "Who is watching the kittens while you travel?"))
    await app.engine.add(_turn("s1", "Ana", "My neighbour Ruth, a retired vet tech."))
    await app.engine.add(_turn("s2", "Ana", "Back from the trip."))
    await app.engine.add(AddCommand(scope=USER, tier=Tier.LONG_TERM, content="A plain note"))
    assert _embedded(embedder) == [
        "Ben: Who is watching the kittens while you travel?",
        "Ben: Who is watching the kittens while you travel?\n"
        "Ana: My neighbour Ruth, a retired vet tech.",
        "Ana: Back from the trip.",  # another session: no lead
        "A plain note",  # no session: no lead
    ]


async def test_only_turns_lead_each_other_not_facts_of_a_session(
    app: App, embedder: GatedEmbedder
) -> None:
    session = Scope(tenant=USER.tenant, user_id=USER.user_id, session_id="s1")
    for fact in ("Ana likes tea", "Ana prefers green tea"):
        await app.engine.add(
            AddCommand(scope=session, tier=Tier.LONG_TERM, content=fact, kind=Kind.FACT)
        )
    await app.engine.add(_turn("s1", "Ben", "Tea or coffee?"))
    await app.engine.add(_turn("s1", "Ana", "Tea."))
    assert _embedded(embedder) == [
        "Ana likes tea",
        "Ana prefers green tea",  # a fact stands alone
        "Ben: Tea or coffee?",  # a turn after a fact has no lead
        "Ben: Tea or coffee?\nAna: Tea.",
    ]


async def _said_with(
    lead_chars: int, turns: list[AddCommand], tmp_path: Path, clock: MovableClock
) -> list[str]:
    """What the model embedded for `turns`, added one by one with `lead_chars`."""
    embedder = GatedEmbedder()
    settings = Settings.explicit(
        data_dir=tmp_path / "d",
        long_term=LongTermSettings(lead_chars=lead_chars),
        retrieval=LEAD_ALONE,
    )
    app = await build_app(settings, clock=clock, embedder=embedder)
    try:
        for turn in turns:
            await app.engine.add(turn)
    finally:
        await app.close()
    return _embedded(embedder)


async def test_the_lead_is_the_end_of_a_long_turn(tmp_path: Path, clock: MovableClock) -> None:
    turns = [_turn("s1", "Ben", "A long story, and then: any plans?"), _turn("s1", "Ana", "None.")]
    said = await _said_with(10, turns, tmp_path, clock)
    assert said[-1] == "Ben: any plans?\nAna: None."


async def test_a_long_transcript_line_lends_its_speakers_name_as_metadata_would(
    tmp_path: Path, clock: MovableClock
) -> None:
    scope = Scope(tenant=USER.tenant, user_id=USER.user_id, session_id="s1")
    turns = [
        AddCommand(scope=scope, tier=Tier.LONG_TERM, content=text, kind=Kind.MESSAGE)
        for text in ("Ben: A long story, and then: any plans?", "Ana: None.", "Ben: Lunch?")
    ]
    said = await _said_with(16, turns, tmp_path, clock)
    assert said[1:] == ["Ben: then: any plans?\nAna: None.", "Ana: None.\nBen: Lunch?"]


async def test_no_lead_when_switched_off(tmp_path: Path, clock: MovableClock) -> None:
    turns = [_turn("s1", "Ben", "Any plans?"), _turn("s1", "Ana", "None.")]
    said = await _said_with(0, turns, tmp_path, clock)
    assert said == ["Ben: Any plans?", "Ana: None."]


async def test_turns_of_one_batch_lead_each_other_in_order(
    app: App, embedder: GatedEmbedder
) -> None:
    await app.engine.add(_turn("s1", "Ben", "Hi."))
    results = await app.engine.add_batch(
        [_turn("s1", "Ana", "Hello."), _turn("s1", "Ben", "Plans?"), _turn("s1", "Ana", "None.")]
    )
    assert len(results) == 3
    assert _embedded(embedder)[1:] == [
        "Ben: Hi.\nAna: Hello.",
        "Ana: Hello.\nBen: Plans?",
        "Ben: Plans?\nAna: None.",
    ]
    assert len(embedder.calls) == 2  # the batch in one model call, none again under the lock


async def test_a_deleted_turn_lends_nothing_to_the_next(app: App, embedder: GatedEmbedder) -> None:
    first = await app.engine.add(_turn("s1", "Ben", "A secret I regret."))
    await app.engine.delete(Lookup(scope=USER, tier=Tier.LONG_TERM, ids=[first.memory_id]))
    second = await app.engine.add(_turn("s1", "Ana", "Noted."))
    assert _embedded(embedder)[-1] == "Ana: Noted."
    got = await app.engine.get(Lookup(scope=USER, tier=Tier.LONG_TERM, ids=[second.memory_id]))
    assert got.items[0].position == 2  # the deleted turn keeps its place


async def test_the_next_turn_of_a_conversation_finds_its_place_without_a_store_read(
    app: App, embedder: GatedEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reads of a session's last turn (its highest position); the keyword statistics'
    # background count scrolls the store too, whenever it runs, and is not counted.
    last_turn_reads: list[object] = []
    scroll = app.vectors.scroll

    def counted(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("order_by") == "position":
            last_turn_reads.append(args[0] if args else kwargs.get("filter"))
        return scroll(*args, **kwargs)

    monkeypatch.setattr(app.vectors, "scroll", counted)
    await app.engine.add(_turn("s1", "Ben", "Who feeds the cat?"))
    first_reads = len(last_turn_reads)
    assert first_reads >= 1  # a new session: its last turn is looked for
    second = await app.engine.add(_turn("s1", "Ana", "Ruth does."))
    third = await app.engine.add(_turn("s1", "Ben", "Since when?"))
    # The session's last turn was placed by this server and nothing changed since: no
    # later Add reads it from the store.
    assert len(last_turn_reads) == first_reads
    got = await app.engine.get(
        Lookup(scope=USER, tier=Tier.LONG_TERM, ids=[second.memory_id, third.memory_id])
    )
    assert sorted(i.position for i in got.items) == [2, 3]
    assert _embedded(embedder)[-1] == "Ana: Ruth does.\nBen: Since when?"


async def test_a_message_copied_into_the_session_meanwhile_is_the_next_turns_predecessor(
    app: App, embedder: GatedEmbedder
) -> None:
    await app.engine.add(_turn("s1", "Ben", "Who feeds the cat?"))
    session = Scope(tenant=USER.tenant, user_id=USER.user_id, session_id="s1")
    await app.engine.add(
        AddCommand(scope=session, tier=Tier.SHORT_TERM, content="Ruth does.", kind=Kind.MESSAGE)
    )
    await app.copier.drain()  # its durable copy lands in long-term memory, after the first
    third = await app.engine.add(_turn("s1", "Ben", "Since when?"))
    got = await app.engine.get(Lookup(scope=USER, tier=Tier.LONG_TERM, ids=[third.memory_id]))
    assert got.items[0].position == 3
    assert _embedded(embedder)[-1].endswith("Ruth does.\nBen: Since when?")


async def test_copies_of_one_session_placed_concurrently_never_share_a_position(
    app: App, embedder: GatedEmbedder, clock: MovableClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_term = app.engine._tiers[Tier.LONG_TERM]
    assert isinstance(long_term, LongTermTier)
    locks, asked, second_asks = long_term._locks, [], asyncio.Event()

    def noted(key: Hashable) -> asyncio.Lock:
        asked.append(key)
        if len(asked) == 2:
            second_asks.set()
        return locks(key)

    monkeypatch.setattr(long_term, "_locks", noted)
    session = Scope(tenant=USER.tenant, user_id=USER.user_id, session_id="s1")

    def message(text: str) -> MemoryRecord:
        return MemoryRecord(
            id=str(uuid.uuid4()),
            tier=Tier.SHORT_TERM,
            content=text,
            kind=Kind.MESSAGE,
            created_at=clock(),
        )

    first, second = message("Who feeds the cat?"), message("Ruth does.")
    # The first copy holds the user's lock, its embedding held in the model.
    held = await embedder.hold(lambda: long_term.add_messages([(session, first)]))
    waiting = asyncio.ensure_future(long_term.add_messages([(session, second)]))
    # When the second asks for the lock, all it reads before taking it, it has read.
    await asyncio.wait_for(second_asks.wait(), LIVENESS_S)
    embedder.release()
    assert await held == 1 and await waiting == 1
    got = await app.engine.get(Lookup(scope=USER, tier=Tier.LONG_TERM, ids=[first.id, second.id]))
    assert {i.content: i.position for i in got.items} == {"Who feeds the cat?": 1, "Ruth does.": 2}


async def _exported(app: App, turns: list[tuple[str, str]]) -> dict[str, MemoryRecord]:
    """Add `turns` (speaker, text) to USER's session s1; their export, by content."""
    for speaker, text in turns:
        await app.engine.add(_turn("s1", speaker, text))
    return {r.content: r async for r in app.engine.export_records(ExportQuery(scope=USER))}


async def test_an_import_embeds_its_turns_after_their_leads_as_when_added(
    app: App, embedder: GatedEmbedder
) -> None:
    exported = await _exported(app, [("Ben", "Plans?"), ("Ana", "None.")])
    added = _embedded(embedder)
    embedder.calls.clear()
    other = Scope(tenant="t1", user_id="other")
    result = await app.engine.import_records(other, list(exported.values()))
    assert result.imported_count == 2
    assert sorted(_embedded(embedder)) == sorted(added)


async def test_an_imported_turn_whose_lead_the_user_already_has_is_embedded_after_it(
    app: App, embedder: GatedEmbedder
) -> None:
    by_text = await _exported(app, [("Ben", "Plans?"), ("Ana", "None."), ("Ben", "Same.")])
    added = _embedded(embedder)
    other = Scope(tenant="t1", user_id="other")
    # The conversation comes back in two imports, its first turn alone, then the rest.
    await app.engine.import_records(other, [by_text["Plans?"]])
    embedder.calls.clear()
    result = await app.engine.import_records(other, [by_text["Same."], by_text["None."]])
    assert result.imported_count == 2
    assert sorted(_embedded(embedder)) == sorted(added[1:])


async def test_a_turn_the_user_has_is_embedded_again_after_its_previous_turn_imported_later(
    app: App,
) -> None:
    by_text = await _exported(app, [("Ben", "Plans?"), ("Ana", "None."), ("Ben", "Same.")])
    other = Scope(tenant="t1", user_id="other")
    # The conversation comes back last turn first: each import leads the turn after it.
    for text in ["Same.", "None.", "Plans?"]:
        await app.engine.import_records(other, [by_text[text]])
    assert _dense_by_content(app, other) == _dense_by_content(app, USER)


async def test_a_turn_the_user_has_between_two_imported_turns_is_led_by_the_first(
    app: App,
) -> None:
    by_text = await _exported(app, [("Ben", "Plans?"), ("Ana", "None."), ("Ben", "Same.")])
    other = Scope(tenant="t1", user_id="other")
    await app.engine.import_records(other, [by_text["None."]])
    await app.engine.import_records(other, [by_text["Plans?"], by_text["Same."]])
    assert _dense_by_content(app, other) == _dense_by_content(app, USER)


def _dense_by_content(app: App, user: Scope) -> dict[str, tuple[float, ...]]:
    points, _ = app.vectors.scroll(limit=100, with_vectors=True)
    return {
        str(p.payload["content"]): tuple(float(x) for x in (p.dense if p.dense is not None else ()))
        for p in points
        if p.payload.get("user_id") == user.user_id
    }


async def test_an_imported_turn_after_a_deleted_one_has_no_lead(
    app: App, embedder: GatedEmbedder
) -> None:
    by_text = await _exported(app, [("Ben", "Plans?"), ("Ana", "None.")])
    other = Scope(tenant="t1", user_id="other")
    await app.engine.import_records(other, [by_text["Plans?"]])
    [first] = [r async for r in app.engine.export_records(ExportQuery(scope=other))]
    await app.engine.delete(Lookup(scope=other, tier=Tier.LONG_TERM, ids=[first.id]))
    embedder.calls.clear()
    await app.engine.import_records(other, [by_text["None."]])
    assert _embedded(embedder) == ["Ana: None."]


async def test_a_reindex_embeds_each_turn_after_its_lead_again(
    tmp_path: Path, clock: MovableClock, embedder: GatedEmbedder
) -> None:
    settings = Settings.explicit(data_dir=tmp_path / "d", retrieval=LEAD_ALONE)
    app = await build_app(settings, clock=clock, embedder=embedder)
    try:
        for speaker, text in [("Ben", "Plans?"), ("Ana", "None."), ("Ben", "Same.")]:
            await app.engine.add(_turn("s1", speaker, text))
    finally:
        await app.close()
    again = GatedEmbedder()
    assert reindex(settings, again, lambda done, total: None) == 3
    assert sorted(_embedded(again)) == sorted(_embedded(embedder))
