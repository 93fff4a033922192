"""Turn keys (payload layout 2, ADR 0600): each turn carries one indexed key of its tenant,
user, session and position, by which the turns around a hit are looked up; a store written
before them gets them when it is opened, and its context windows keep working."""

from __future__ import annotations

import json
from pathlib import Path

from memoryd.app import App
from memoryd.core.engine import MemoryEngine
from memoryd.core.memory.layout import LAYOUT_KEY, PAYLOAD_LAYOUT
from memoryd.core.memory.payload import TURN_FIELD, turn_key
from memoryd.core.models import AddCommand, RetrieveQuery, Scope, Tier
from memoryd.stores.vectors.edge_store import EdgeVectorStore
from memoryd.stores.vectors.port import VectorPoint
from tests.unit.unit_kit import AppFactory, HashEmbedder

DIM = HashEmbedder.dim

ANA = Scope(tenant="t1", user_id="ana")
TURNS = [
    ("Ana", "How was the weekend?"),
    ("Ben", "Quiet. Who is watching the kittens while you travel?"),
    ("Ana", "My neighbour Ruth, she used to be a vet tech."),
    ("Ben", "Lucky kittens."),
    ("Ana", "Anyway, the quarterly report is due Friday."),
]
QUESTION = "who is watching the kittens"


async def _conversation(engine: MemoryEngine, user: Scope, session: str) -> list[str]:
    scope = Scope(tenant=user.tenant, user_id=user.user_id, session_id=session)
    ids = []
    for speaker, text in TURNS:
        added = await engine.add(
            AddCommand(
                scope=scope, tier=Tier.LONG_TERM, content=text, metadata={"speaker": speaker}
            )
        )
        ids.append(added.memory_id)
    return ids


async def _context_of_best(engine: MemoryEngine, user: Scope) -> tuple[str, list[str]]:
    found = await engine.retrieve(
        RetrieveQuery(scope=user, query=QUESTION, tiers=[Tier.LONG_TERM], top_k=1, context_window=1)
    )
    [hit] = found.items
    return hit.id, [c.id for c in hit.context]


def _as_written_before_turn_keys(vectors_dir: Path, dim: int) -> None:
    """Rewrite every point without its turn key, and the metadata without the layout."""
    store = EdgeVectorStore(vectors_dir, dim)
    try:
        points, _ = store.scroll(limit=1000, with_vectors=True)
        assert points and all(TURN_FIELD in p.payload for p in points)
        store.upsert(
            [
                VectorPoint(
                    id=p.id,
                    dense=[float(x) for x in p.dense] if p.dense is not None else [],
                    sparse=p.sparse,
                    payload={k: v for k, v in p.payload.items() if k != TURN_FIELD},
                )
                for p in points
            ]
        )
        meta = store.read_meta() or {}
        meta.pop(LAYOUT_KEY, None)
        store.write_meta(meta)
    finally:
        store.close()


def _stored(vectors_dir: Path, dim: int) -> tuple[list[dict[str, object]], dict[str, object]]:
    store = EdgeVectorStore(vectors_dir, dim)
    try:
        points, _ = store.scroll(limit=1000)
        return [dict(p.payload) for p in points], dict(store.read_meta() or {})
    finally:
        store.close()


async def test_every_turn_is_stored_with_the_key_of_its_user_session_and_position(
    make_app: AppFactory, tmp_path: Path
) -> None:
    app: App = await make_app(data_dir=tmp_path / "data")
    await _conversation(app.engine, ANA, "s1")
    await app.engine.add(AddCommand(scope=ANA, tier=Tier.LONG_TERM, content="A note"))
    await app.close()

    payloads, meta = _stored(tmp_path / "data" / "vectors", DIM)
    turns = [p for p in payloads if p.get("session_id")]
    assert len(turns) == len(TURNS)
    assert sorted(str(p[TURN_FIELD]) for p in turns) == sorted(
        turn_key("t1", "ana", "s1", position) for position in range(1, len(TURNS) + 1)
    )
    assert next(p for p in payloads if not p.get("session_id")).get(TURN_FIELD) is None
    assert meta[LAYOUT_KEY] == PAYLOAD_LAYOUT


async def test_a_store_written_before_turn_keys_gets_them_on_open_and_keeps_its_context_windows(
    make_app: AppFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    app: App = await make_app(data_dir=data)
    ids = await _conversation(app.engine, ANA, "s1")
    await app.close()
    _as_written_before_turn_keys(data / "vectors", DIM)

    reopened: App = await make_app(data_dir=data)
    assert await _context_of_best(reopened.engine, ANA) == (ids[2], [ids[1], ids[3]])
    await reopened.close()
    payloads, meta = _stored(data / "vectors", DIM)
    for p in payloads:
        assert p[TURN_FIELD] == turn_key("t1", "ana", "s1", int(str(p["position"])))
    assert meta[LAYOUT_KEY] == PAYLOAD_LAYOUT


async def test_the_turns_around_a_hit_are_its_users_though_others_share_the_session_id(
    engine: MemoryEngine,
) -> None:
    ben = Scope(tenant="t1", user_id="ben")
    other_tenant = Scope(tenant="t2", user_id="ana")
    await _conversation(engine, ben, "s1")
    await _conversation(engine, other_tenant, "s1")
    ids = await _conversation(engine, ANA, "s1")
    assert await _context_of_best(engine, ANA) == (ids[2], [ids[1], ids[3]])


def test_a_new_embedded_store_maps_its_dense_vectors_without_reading_them_in(
    tmp_path: Path,
) -> None:
    # Memory "cold": vectors stay on disk until a search touches them (RSS per memory,
    # ADR 0600); the engine records the placement in the shard's own configuration.
    EdgeVectorStore(tmp_path / "vectors", DIM).close()
    config = json.loads((tmp_path / "vectors" / "memories" / "edge_config.json").read_text())
    assert config["vectors"]["dense"]["memory"] == "cold"
