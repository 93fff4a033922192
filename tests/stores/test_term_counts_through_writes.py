"""The per-user term counts carried through a write (core/memory/term_counts.py,
derived.py) are always what a fresh recount in the store gives, whatever the writes: adds
(some expiring, some in other tiers or of other users), deletes, prunes, two writers at
once. So rankings never change for keeping them. Through the real composition, on the
embedded store and on qdrant-client (local mode).
"""

from __future__ import annotations

import asyncio
import math
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memoryd.app import App
from memoryd.core.memory.payload import content_hash, embed_text_of, to_payload
from memoryd.core.memory.points import NewPoint
from memoryd.core.memory.term_counts import EXPIRES_FIELD, Counts, live_condition
from memoryd.core.memory.vector_memory import VectorMemory
from memoryd.core.models import (
    AddCommand,
    Kind,
    Lookup,
    MemoryRecord,
    PruneCommand,
    PruneStrategy,
    RetrieveQuery,
    Scope,
    Tier,
)
from memoryd.stores.vectors.port import TERMS_FIELD
from tests.support.clock import MovableClock
from tests.unit.test_term_counts import OTHER, QUERIES, USER, Server

OWNER = (USER.tenant, USER.user_id)
VOCABULARY = ["coffee", "kittens", "recital", "garden", "report", "tomatoes", "piano", "river"]


@pytest.fixture
def clock() -> MovableClock:
    return MovableClock(1_800_000_000.0)


@pytest.fixture(params=["edge", "qdrant"])
async def server(
    request: pytest.FixtureRequest, tmp_path: Path, clock: MovableClock
) -> AsyncIterator[Server]:
    """The embedded store, and qdrant-client in local mode (on disk: it restarts)."""
    settings: dict[str, Any] = {}
    if request.param == "qdrant":
        location = str(tmp_path / "qdrant")
        settings["vectors"] = {"backend": "qdrant"}
        settings["qdrant"] = {"location": location}
    s = Server(tmp_path / "data", clock, **settings)
    await s.start()
    yield s
    await s.stop()


@pytest.fixture
async def edge_server(tmp_path: Path, clock: MovableClock) -> AsyncIterator[Server]:
    s = Server(tmp_path / "data", clock)
    await s.start()
    yield s
    await s.stop()


def _memory(app: App) -> VectorMemory:
    assert app.memory is not None
    return app.memory


def kept_counts(app: App) -> list[Counts]:
    """The user's counts kept now (those that hold at the user's generation)."""
    _, held = _memory(app).derived.held(OWNER)
    return [h.value for h in held if isinstance(h.value, Counts)]


def assert_kept_counts_are_a_fresh_recount(app: App) -> int:
    """Every kept entry equals the store's counts of its filter at its clock; returns how
    many there were."""
    store = _memory(app).store
    entries = kept_counts(app)
    for counts in entries:
        assert counts.selects is not None
        flt = counts.selects
        if counts.counted_at > -math.inf:
            flt = flt.and_(live_condition(counts.counted_at))
        assert counts.live == store.count(flt)
        terms = sorted(counts.df)
        assert dict(zip(terms, store.count_each(flt, TERMS_FIELD, terms), strict=True)) == (
            counts.df
        )
        first, _ = store.scroll(flt, limit=1, order_by=EXPIRES_FIELD)
        until = first[0].payload[EXPIRES_FIELD] if first else math.inf
        assert counts.valid_until == until
    return len(entries)


async def keyword_scores(app: App) -> dict[tuple[str, str], float]:
    """Each query's hits' keyword component (BM25 under the user's IDF: a count kept wrong
    shows there), by (query, id): random texts tie, and ties are ordered by the store."""
    scores = {}
    for query in [*QUERIES, *VOCABULARY]:
        found = await app.engine.retrieve(
            RetrieveQuery(scope=USER, query=query, tiers=[Tier.LONG_TERM], top_k=10)
        )
        for hit in found.items:
            assert hit.components is not None
            scores[(query, hit.id)] = hit.components.keyword
    return scores


async def assert_ranks_as_counted_afresh(server: Server) -> None:
    """The keyword scores with what was kept are those after a restart (counted afresh)."""
    assert server.app is not None
    await keyword_scores(server.app)
    kept = await keyword_scores(server.app)
    afresh = await keyword_scores(await server.restart())
    both = kept.keys() & afresh.keys()
    assert len(both) > len(kept) / 2
    assert {k: kept[k] for k in both} == {k: afresh[k] for k in both}


def text(rng: random.Random) -> str:
    return " ".join(rng.sample(VOCABULARY, rng.randint(1, 4)))


async def retrieve(
    app: App, query: str, filters: dict[str, str] | None = None, kinds: list[Kind] | None = None
) -> None:
    await app.engine.retrieve(
        RetrieveQuery(
            scope=USER,
            query=query,
            tiers=[Tier.LONG_TERM],
            top_k=4,
            filters=filters or {},
            kinds=kinds or [],
        )
    )


async def test_after_adds_deletes_and_prunes_the_kept_counts_equal_a_fresh_recount(
    server: Server, clock: MovableClock
) -> None:
    assert server.app is not None
    app = server.app
    rng = random.Random(28)
    ids: list[str] = []
    carried = 0
    for step in range(120):
        roll = rng.random()
        if roll < 0.45:
            expires = clock() + rng.choice([5, 30, 600]) if rng.random() < 0.3 else None
            kind = rng.choice([Kind.NOTE, Kind.FACT])
            added = await app.engine.add(
                AddCommand(
                    scope=rng.choice([USER, USER, USER, OTHER]),
                    tier=Tier.LONG_TERM,
                    content=f"{text(rng)} {step}",
                    kind=kind,
                    expires_at=expires,
                    metadata={"topic": rng.choice(["a", "b"])},
                )
            )
            ids.append(added.memory_id)
            before = len(kept_counts(app))
            carried += before > 0
        elif roll < 0.8:
            await retrieve(
                app,
                text(rng),
                filters={"topic": "a"} if rng.random() < 0.3 else None,
                kinds=[Kind.FACT] if rng.random() < 0.3 else None,
            )
        elif roll < 0.9 and ids:
            gone = rng.sample(ids, min(len(ids), 2))
            await app.engine.delete(Lookup(scope=USER, tier=Tier.LONG_TERM, ids=gone))
        elif roll < 0.93:
            await app.engine.prune(
                PruneCommand(
                    scope=USER,
                    strategy=PruneStrategy.OLDEST_PERCENT,
                    tiers=[Tier.LONG_TERM],
                    percent=20,
                )
            )
        else:
            clock.advance(rng.choice([1, 10, 40]))
        assert_kept_counts_are_a_fresh_recount(app)
    assert carried > 20  # adds found counts to carry (not vacuous)
    await assert_ranks_as_counted_afresh(server)


async def test_an_add_to_an_empty_tier_makes_its_kept_empty_entry_count_one(
    server: Server,
) -> None:
    assert server.app is not None
    app = server.app
    await retrieve(app, "coffee")  # found empty: kept as none live
    assert [c.live for c in kept_counts(app)] == [0]
    await app.engine.add(AddCommand(scope=USER, tier=Tier.LONG_TERM, content="coffee beans"))
    assert [c.live for c in kept_counts(app)] == [1]
    assert assert_kept_counts_are_a_fresh_recount(app) == 1
    server.counts_made()
    await retrieve(app, "coffee")
    assert server.counts_made() == 1  # only the term, never the live count again


async def test_a_write_to_another_user_leaves_this_users_entries_alone(
    edge_server: Server,
) -> None:
    """On the embedded store, whose generations are per user (qdrant-client's local mode
    has one for every write: there another user's write voids them, as before)."""
    assert edge_server.app is not None
    app = edge_server.app
    await app.engine.add(AddCommand(scope=USER, tier=Tier.LONG_TERM, content="coffee beans"))
    await retrieve(app, "coffee garden")
    kept = kept_counts(app)
    assert kept
    await app.engine.add(AddCommand(scope=OTHER, tier=Tier.LONG_TERM, content="coffee garden"))
    assert kept_counts(app) == kept
    assert all(a is b for a, b in zip(kept_counts(app), kept, strict=True))  # not even copied


def _new_point(memory: VectorMemory, scope: Scope, content: str, now: float) -> NewPoint:
    record = MemoryRecord(
        id=str(uuid.uuid4()),
        tier=Tier.LONG_TERM,
        content=content,
        kind=Kind.NOTE,
        created_at=now,
        updated_at=now,
    )
    digest = content_hash(scope, Tier.LONG_TERM, "", content)
    payload = to_payload(record, scope, digest, 1 << 20)
    return NewPoint(record, payload, embed_text_of(payload))


async def test_two_writers_of_one_user_at_once_never_leave_wrong_counts(
    server: Server, clock: MovableClock
) -> None:
    """Inserts straight through the gateway (no user lock between them), racing each other
    and queries that count and keep meanwhile."""
    assert server.app is not None
    app = server.app
    memory = _memory(app)
    rng = random.Random(7)
    for i in range(5):
        await memory.insert([_new_point(memory, USER, f"{text(rng)} {i}", clock())], fresh=True)

    async def writer(name: str) -> None:
        for i in range(25):
            point = _new_point(memory, USER, f"{text(rng)} {name}{i}", clock())
            await memory.insert([point], fresh=True)

    async def reader() -> None:
        for _ in range(25):
            await retrieve(app, text(rng))

    for _ in range(3):
        await asyncio.gather(writer("a"), writer("b"), reader(), reader())
        assert_kept_counts_are_a_fresh_recount(app)
        await retrieve(app, " ".join(VOCABULARY))
        await memory.insert([_new_point(memory, USER, "lamp by the river", clock())], fresh=True)
        assert assert_kept_counts_are_a_fresh_recount(app) > 0  # carried when alone
    await assert_ranks_as_counted_afresh(server)
