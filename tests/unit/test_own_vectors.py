"""A turn embedded after a lead also keeps the vector of its own text (ADR 0409): a
statement that stands alone is not diluted by what came before it. The vector is written
with the turn (in one model call with its lead's), by imports and by reindex; the ranking
blends its cosine into the one it ranks by; nobody reads it back as a memory's data."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from memoryd.app import App, build_app
from memoryd.cli.reindex import reindex
from memoryd.core.memory.own_vector import OWN_FIELD, pack, unpack_all
from memoryd.core.models import AddCommand, ExportQuery, Kind, Lookup, Scope, Tier
from memoryd.core.retrieval import bm25
from memoryd.core.retrieval.candidates import CandidatePool
from memoryd.settings import RetrievalSettings, Settings
from memoryd.stores.vectors.port import StoredPoint
from tests.support.clock import MovableClock
from tests.unit.unit_kit import DIM, GatedEmbedder, HashEmbedder

USER = Scope(tenant="t1", user_id="yusra")
TURNS = [
    ("Mia", "Did you see the match? That referee ruined the whole second half."),
    ("Yusra", "I finally caved and bought a used camper van today."),
    ("Mia", "No way! Where will you take it first?"),
]


def _turn(speaker: str, text: str, session: str = "s1", user: Scope = USER) -> AddCommand:
    scope = Scope(tenant=user.tenant, user_id=user.user_id, session_id=session)
    return AddCommand(scope=scope, tier=Tier.LONG_TERM, content=text, metadata={"speaker": speaker})


def _settings(tmp_path: Path, own_weight: float = 0.3) -> Settings:
    return Settings.explicit(
        data_dir=tmp_path / "data", retrieval=RetrievalSettings(own_weight=own_weight)
    )


@pytest.fixture
def embedder() -> GatedEmbedder:
    return GatedEmbedder()


@pytest.fixture
async def app(tmp_path: Path, clock: MovableClock, embedder: GatedEmbedder) -> AsyncIterator[App]:
    built = await build_app(_settings(tmp_path), clock=clock, embedder=embedder)
    yield built
    await built.close()


def _stored(app: App, user: Scope = USER) -> dict[str, StoredPoint]:
    """The user's points by their content, as the store holds them."""
    points, _ = app.vectors.scroll(limit=100)
    return {
        str(p.payload["content"]): p
        for p in points
        if p.payload.get("user_id") == user.user_id and "content" in p.payload
    }


def unpack(payload: Mapping[str, Any], dim: int) -> npt.NDArray[np.float32] | None:
    """The own vector one payload keeps, as the ranking reads it, or None."""
    kept, rows = unpack_all([payload], dim)
    return rows[0] if kept else None


def _cosine_to(point: StoredPoint, text: str) -> float:
    own = unpack(point.payload, DIM)
    assert own is not None
    return float(np.dot(own, np.asarray(HashEmbedder().embed([text])[0])))


async def test_a_turn_after_another_keeps_its_own_texts_vector(
    app: App, embedder: GatedEmbedder
) -> None:
    for speaker, text in TURNS[:2]:
        await app.engine.add(_turn(speaker, text))
    stored = _stored(app)
    first, second = stored[TURNS[0][1]], stored[TURNS[1][1]]
    assert OWN_FIELD not in first.payload  # the session's first turn has no lead: one vector
    assert _cosine_to(second, f"Yusra: {TURNS[1][1]}") > 0.999  # its text alone, not the lead
    # Both of the second turn's texts went to the model in one call.
    assert embedder.calls[-1] == [
        f"Mia: {TURNS[0][1]}\nYusra: {TURNS[1][1]}",
        f"Yusra: {TURNS[1][1]}",
    ]


async def test_a_batch_of_turns_embeds_every_lead_and_own_text_in_one_call(
    app: App, embedder: GatedEmbedder
) -> None:
    await app.engine.add_batch([_turn(s, t) for s, t in TURNS])
    assert len(embedder.calls) == 1  # none again under the lock
    assert sorted(embedder.calls[0]) == sorted(
        [f"Mia: {TURNS[0][1]}"]
        + [f"{TURNS[i - 1][0]}: {TURNS[i - 1][1]}\n{s}: {t}" for i, (s, t) in enumerate(TURNS) if i]
        + [f"{s}: {t}" for s, t in TURNS[1:]]
    )
    assert [OWN_FIELD in p.payload for p in _stored(app).values()].count(True) == 2


async def test_facts_and_turns_without_a_lead_keep_no_second_vector(app: App) -> None:
    session = Scope(tenant=USER.tenant, user_id=USER.user_id, session_id="s1")
    await app.engine.add(
        AddCommand(scope=session, tier=Tier.LONG_TERM, content="Yusra owns a van", kind=Kind.FACT)
    )
    await app.engine.add(AddCommand(scope=USER, tier=Tier.LONG_TERM, content="A plain note"))
    await app.engine.add(_turn("Yusra", "Hello.", session="s2"))
    assert not any(OWN_FIELD in p.payload for p in _stored(app).values())


async def test_with_no_share_in_the_ranking_no_turn_is_embedded_twice(
    tmp_path: Path, clock: MovableClock, embedder: GatedEmbedder
) -> None:
    app = await build_app(_settings(tmp_path, own_weight=0.0), clock=clock, embedder=embedder)
    try:
        await app.engine.add_batch([_turn(s, t) for s, t in TURNS])
        assert len(embedder.calls[0]) == len(TURNS)
        assert not any(OWN_FIELD in p.payload for p in _stored(app).values())
    finally:
        await app.close()


async def test_the_vector_is_not_a_memorys_data(app: App) -> None:
    added = [await app.engine.add(_turn(s, t)) for s, t in TURNS]
    got = await app.engine.get(
        Lookup(scope=USER, tier=Tier.LONG_TERM, ids=[a.memory_id for a in added])
    )
    exported = [r async for r in app.engine.export_records(ExportQuery(scope=USER))]
    for record in [*got.items, *exported]:
        assert OWN_FIELD not in record.metadata
        assert "own" not in repr(record.metadata)


async def test_an_import_gives_its_turns_their_own_vectors_again(app: App) -> None:
    for speaker, text in TURNS:
        await app.engine.add(_turn(speaker, text))
    exported = [r async for r in app.engine.export_records(ExportQuery(scope=USER))]
    other = Scope(tenant="t1", user_id="other")
    assert (await app.engine.import_records(other, exported)).imported_count == 3
    imported = _stored(app, other)
    assert OWN_FIELD not in imported[TURNS[0][1]].payload
    assert _cosine_to(imported[TURNS[2][1]], f"Mia: {TURNS[2][1]}") > 0.999


@pytest.mark.parametrize("own_weight", [0.3, 0.0])
async def test_a_reindex_computes_the_own_vectors_again_or_drops_them(
    tmp_path: Path, clock: MovableClock, embedder: GatedEmbedder, own_weight: float
) -> None:
    app = await build_app(_settings(tmp_path), clock=clock, embedder=embedder)
    try:
        for speaker, text in TURNS:
            await app.engine.add(_turn(speaker, text))
    finally:
        await app.close()
    settings = _settings(tmp_path, own_weight=own_weight)
    assert reindex(settings, GatedEmbedder(), lambda done, total: None) == 3
    app = await build_app(settings, clock=clock, embedder=GatedEmbedder())
    try:
        stored = _stored(app)
        owned = [OWN_FIELD in stored[t].payload for _, t in TURNS]
        assert owned == [False, own_weight > 0, own_weight > 0]
        if own_weight:
            assert _cosine_to(stored[TURNS[1][1]], f"Yusra: {TURNS[1][1]}") > 0.999
    finally:
        await app.close()


def test_the_ranked_cosine_blends_the_lead_and_the_own_vector() -> None:
    rng = np.random.default_rng(7)
    query, lead, own = (v / np.linalg.norm(v) for v in rng.normal(size=(3, DIM)) ** 2)
    pool = CandidatePool(bm25.BM25Encoder(), {}, query, own_weight=0.25)
    with_own, alone = pool.add_all([("a", {OWN_FIELD: pack(own.tolist())}, lead), ("b", {}, lead)])
    lead_cosine, own_cosine = float(lead @ query), float(own @ query)
    assert alone.own_cosine is None and alone.ranked_cosine == pytest.approx(lead_cosine)
    assert with_own.own_cosine == pytest.approx(own_cosine, abs=0.01)
    assert with_own.ranked_cosine == pytest.approx(0.75 * lead_cosine + 0.25 * own_cosine, abs=0.01)
    assert with_own.cosine == alone.cosine  # relevance and the score floor keep the lead's


def test_a_packed_vector_keeps_its_direction_and_a_foreign_one_is_ignored() -> None:
    vector = np.random.default_rng(3).normal(size=384)
    packed = {OWN_FIELD: pack(vector.tolist())}
    back = unpack(packed, 384)
    assert back is not None
    assert float(back @ (vector / np.linalg.norm(vector))) > 0.999
    assert len(packed[OWN_FIELD]) == 512  # 384 bytes, base64
    assert unpack(packed, 768) is None  # another embedder's: not compared
    assert unpack({OWN_FIELD: "not base64!"}, 384) is None
    assert unpack({OWN_FIELD: 7}, 384) is None
    assert unpack({}, 384) is None


def test_many_payloads_are_unpacked_as_one_matrix_each_row_naming_its_payload() -> None:
    rng = np.random.default_rng(5)
    first, second = rng.normal(size=384), rng.normal(size=384)
    payloads = [
        {OWN_FIELD: pack(first.tolist())},
        {},  # keeps none
        {OWN_FIELD: pack(rng.normal(size=768).tolist())},  # another embedder's
        {OWN_FIELD: pack([0.0] * 384)},  # no direction
        {OWN_FIELD: "not base64!"},
        {OWN_FIELD: pack(second.tolist())},
    ]
    rows, matrix = unpack_all(payloads, 384)
    assert rows == [0, 5]
    assert matrix.shape == (2, 384)
    assert float(matrix[1] @ (second / np.linalg.norm(second))) > 0.999
    assert unpack_all([{}, {}], 384)[0] == []
