"""What the core derives from a user's points and keeps (core/memory/derived.py,
term_counts.py): a repeated query counts nothing in the store, and what is kept ranks
exactly as what a restarted server counts afresh, across every way memories come and go.
Store calls are seen as the spans a traced server records."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memoryd.app import App, build_app
from memoryd.core.memory.derived import DerivedCache, Held
from memoryd.core.memory.term_counts import (
    MAX_CARRIED_TERMS,
    Counts,
    carried,
    key_of,
    live_condition,
    selecting,
)
from memoryd.core.models import (
    AddCommand,
    Lookup,
    MemoryRecord,
    PruneCommand,
    PruneStrategy,
    RetrieveQuery,
    Scope,
    Tier,
)
from memoryd.settings import Settings
from memoryd.stores.vectors.port import TERMS_FIELD, Filter, MatchAny, MatchValue
from memoryd.telemetry import Telemetry
from tests.support.clock import MovableClock
from tests.unit.unit_kit import HashEmbedder

USER = Scope(tenant="t1", user_id="ana")
OTHER = Scope(tenant="t1", user_id="ben")
WORDS = "coffee kittens recital garden report"
QUERIES = ["coffee", "garden kittens", "who waters the garden", "recital report", WORDS]
COUNTING = (".count", ".count_each")  # the store spans' names end so, whatever the adapter


class Server:
    """The real composition on the embedded stores, traced; `restart` opens it again on
    the same data (nothing kept in memory)."""

    def __init__(self, data_dir: Path, clock: MovableClock, **settings: Any) -> None:
        self._settings = Settings(data_dir=data_dir, **settings)
        self._clock = clock
        self.exporter = InMemorySpanExporter()
        self.app: App | None = None

    async def start(self) -> App:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.app = await build_app(
            self._settings,
            clock=self._clock,
            embedder=HashEmbedder(),
            telemetry=Telemetry(tracer_provider=provider),
        )
        return self.app

    async def restart(self) -> App:
        await self.stop()
        return await self.start()

    async def stop(self) -> None:
        if self.app is not None:
            await self.app.close()
            self.app = None

    def counts_made(self) -> int:
        """The store's count calls since the last call of this (the work kept counts save)."""
        made = sum(
            s.name.startswith("memoryd.store ") and s.name.endswith(COUNTING)
            for s in self.exporter.get_finished_spans()
        )
        self.exporter.clear()
        return made


@pytest.fixture
async def server(tmp_path: Path, clock: MovableClock) -> AsyncIterator[Server]:
    s = Server(tmp_path / "data", clock)
    await s.start()
    yield s
    await s.stop()


async def _add(app: App, text: str, scope: Scope = USER, **kw: Any) -> str:
    added = await app.engine.add(AddCommand(scope=scope, tier=Tier.LONG_TERM, content=text, **kw))
    return added.memory_id


async def _retrieve(app: App, query: str = WORDS) -> list[str]:
    found = await app.engine.retrieve(
        RetrieveQuery(scope=USER, query=query, tiers=[Tier.LONG_TERM], top_k=5)
    )
    return [r.id for r in found.items]


async def _ranked(app: App) -> list[list[MemoryRecord]]:
    """Each query's hits, with their scores and score components (the keyword component
    is the BM25 under the user's IDF: any count kept wrong shows there)."""
    out = []
    for query in QUERIES:
        found = await app.engine.retrieve(
            RetrieveQuery(scope=USER, query=query, tiers=[Tier.LONG_TERM], top_k=4)
        )
        out.append(found.items)
    return out


def _explained(ranked: list[list[MemoryRecord]]) -> list[list[tuple[str, float, Any]]]:
    return [[(r.id, r.score, r.components) for r in hits] for hits in ranked]


async def _assert_ranks_as_counted_afresh(server: Server) -> None:
    """What the server ranks with what it kept is what it ranks after a restart."""
    assert server.app is not None
    await _ranked(server.app)  # whatever can be kept, kept
    kept = _explained(await _ranked(server.app))
    assert _explained(await _ranked(await server.restart())) == kept


async def test_a_repeated_query_counts_nothing_in_the_store(server: Server) -> None:
    app = server.app
    assert app is not None
    for text in ("I love coffee", "the kittens sleep", "the recital was Saturday"):
        await _add(app, text)
    server.counts_made()
    first = await _retrieve(app)
    assert server.counts_made() > 0
    assert await _retrieve(app) == first and server.counts_made() == 0
    await _retrieve(app, "coffee garden")  # terms asked before: nothing to count either
    assert server.counts_made() == 0
    await _retrieve(app, "coffee tomatoes")  # a new term: counted, and only that
    assert server.counts_made() == 1


async def test_another_users_writes_leave_a_users_kept_counts(server: Server) -> None:
    app = server.app
    assert app is not None
    await _add(app, "I love coffee")
    other = await _add(app, "coffee and kittens", scope=OTHER)
    await _retrieve(app)
    server.counts_made()
    await _add(app, "more coffee for ben", scope=OTHER)
    await app.engine.delete(Lookup(scope=OTHER, tier=Tier.LONG_TERM, ids=[other]))
    await _retrieve(app)
    assert server.counts_made() == 0
    added = await _add(app, "the garden")  # the user's own Add: carried, still no count
    await _retrieve(app)
    assert server.counts_made() == 0
    await app.engine.delete(Lookup(scope=USER, tier=Tier.LONG_TERM, ids=[added]))
    await _retrieve(app)  # the user's own delete: counted again
    assert server.counts_made() > 0
    await _assert_ranks_as_counted_afresh(server)


async def test_kept_counts_follow_adds_deletes_prunes_and_imports(server: Server) -> None:
    assert server.app is not None
    # Each scores apart from the others (no ties, whose order is the store's).
    texts = [f"note {'so ' * i}about coffee and the garden" for i in range(6)]
    ids = [await _add(server.app, text) for text in texts]
    await _add(server.app, "kittens and coffee", scope=OTHER)  # another user's words never count
    await _assert_ranks_as_counted_afresh(server)

    await _add(server.app, "the recital report")
    await _assert_ranks_as_counted_afresh(server)

    await server.app.engine.delete(Lookup(scope=USER, tier=Tier.LONG_TERM, ids=ids[:2]))
    await _assert_ranks_as_counted_afresh(server)

    await server.app.engine.prune(
        PruneCommand(
            scope=USER, strategy=PruneStrategy.OLDEST_PERCENT, tiers=[Tier.LONG_TERM], percent=50
        )
    )
    await _assert_ranks_as_counted_afresh(server)

    memory = server.app.memory
    assert memory is not None
    exported = [r async for page in memory.export_pages(USER, Tier.LONG_TERM) for r in page]
    moved = [dataclasses.replace(r, id=f"{r.id[:-4]}beef") for r in exported]
    done = await server.app.engine.import_records(USER, moved)
    assert done.imported_count == len(moved)
    await _assert_ranks_as_counted_afresh(server)


async def test_kept_counts_end_when_a_counted_memory_expires(
    server: Server, clock: MovableClock
) -> None:
    assert server.app is not None
    await _add(server.app, "coffee in the garden")
    await _add(server.app, "coffee with kittens", expires_at=clock() + 60)
    await _assert_ranks_as_counted_afresh(server)
    before = await _ranked(server.app)
    clock.advance(61)  # expired, not yet purged: no longer counted
    after = await _ranked(server.app)
    assert _explained(after) != _explained(before)
    await _assert_ranks_as_counted_afresh(server)


async def test_every_hit_is_explained_alike_whether_counts_were_kept_or_not(
    server: Server,
) -> None:
    texts = [
        "I love coffee in the morning",
        "the kittens sleep in the garden",
        "the recital was on Saturday",
        "my report on the garden is due",
        "coffee with the kittens after the recital",
        "Ruth waters the garden when I travel",
    ]
    assert server.app is not None
    for i, text in enumerate(texts):
        await _add(server.app, text, scope=dataclasses.replace(USER, session_id=f"s{i % 2}"))
    await _assert_ranks_as_counted_afresh(server)


def test_the_key_leaves_the_clock_out_and_keeps_every_other_condition() -> None:
    def flt(now: float, user: str = "ana", extra: tuple[Any, ...] = ()) -> Filter:
        return Filter(must=[MatchValue("user_id", user), live_condition(now), *extra])

    assert key_of(flt(10.0)) == (key_of(flt(20.0))[0], 10.0)
    assert key_of(flt(10.0))[0] != key_of(flt(10.0, "ben"))[0]
    assert key_of(flt(10.0))[0] != key_of(flt(10.0, extra=(MatchValue("kind", "fact"),)))[0]
    everything = Filter(must=[MatchValue("user_id", "ana")])
    assert key_of(everything)[1] == -math.inf


class Generations:
    """Store generations as a test moves them: one per user, and one of every write."""

    def __init__(self) -> None:
        self.of: dict[tuple[str, str], int] = {}
        self.shared = False  # a store other writers share: no generation

    def __call__(self, tenant: str | None, user_id: str | None) -> int | None:
        if self.shared:
            return None
        if tenant is None or user_id is None:
            return sum(self.of.values())
        return self.of.get((tenant, user_id), 0)

    def write(self, owner: tuple[str, str]) -> None:
        self.of[owner] = self.of.get(owner, 0) + 1


ANA, BEN = ("t1", "ana"), ("t1", "ben")


def test_an_entry_holds_while_its_owners_generation_stays_and_inside_its_clock_window() -> None:
    generations = Generations()
    cache = DerivedCache(generations)
    cache.keep(ANA, "k", "counted", generations(*ANA), since=10.0, until=50.0)
    assert cache.get(ANA, "k", str, at=10.0) == "counted"
    assert cache.get(ANA, "k", str, at=49.9) == "counted"
    assert cache.get(ANA, "k", str) == "counted"  # no clock asked
    generations.write(BEN)
    assert cache.get(ANA, "k", str, at=20.0) == "counted"  # another user's write
    assert cache.get(ANA, "k", str, at=50.0) is None  # past its window: dropped
    cache.keep(ANA, "k", "counted", generations(*ANA), since=10.0, until=50.0)
    assert cache.get(ANA, "k", str, at=9.0) is None  # a clock before it was counted
    cache.keep(ANA, "k", "counted", generations(*ANA))
    generations.write(ANA)
    assert cache.get(ANA, "k", str) is None  # the owner wrote: dropped
    generations.shared = True
    cache.keep(ANA, "k", "counted", generations(*ANA))
    assert len(cache) == 0  # nothing is kept of a store shared with other writers


def test_a_value_read_before_a_write_landed_is_never_kept_as_current() -> None:
    generations = Generations()
    cache = DerivedCache(generations)
    read_at = generations(*ANA)
    generations.write(ANA)  # lands while the value is derived
    cache.keep(ANA, "k", "stale", read_at)
    assert cache.get(ANA, "k", str) is None


def test_what_a_write_placed_is_kept_only_when_that_write_alone_moved_the_generation() -> None:
    generations = Generations()
    cache = DerivedCache(generations)
    before = generations(*ANA)
    generations.write(ANA)
    cache.keep_written(ANA, [("s1", "turn 1")], before)
    assert cache.get(ANA, "s1", str) == "turn 1"
    before = generations(*ANA)
    generations.write(ANA)
    generations.write(ANA)  # another write meanwhile: it may have placed a later turn
    cache.keep_written(ANA, [("s1", "turn 2")], before)
    assert cache.get(ANA, "s1", str) is None


def test_the_least_recently_used_entries_go_first_past_the_entries_or_the_weight() -> None:
    generations = Generations()
    cache = DerivedCache(generations, max_entries=2, max_weight=25)
    for key in ("a", "b"):
        cache.keep(ANA, key, key, 0)
    assert cache.get(ANA, "a", str) == "a"
    cache.keep(ANA, "c", "c", 0)
    assert cache.get(ANA, "b", str) is None
    assert cache.get(ANA, "a", str) == "a" and cache.get(ANA, "c", str) == "c"
    cache.keep(BEN, "heavy", "h", 0, weight=20)
    assert cache.weight <= 25 and len(cache) == 2
    assert cache.get(BEN, "heavy", str) == "h" and cache.get(ANA, "a", str) is None


def test_entries_held_before_a_write_are_carried_only_when_that_write_alone_moved_it() -> None:
    generations = Generations()
    cache = DerivedCache(generations)
    cache.keep(ANA, "k", "before", generations(*ANA), weight=3, since=1.0, until=9.0)
    cache.keep(BEN, "k", "ben's", generations(*BEN))
    before, held = cache.held(ANA)
    assert held == [Held("k", "before", 3, 1.0, 9.0)]  # the owner's alone
    generations.write(ANA)
    cache.carry_written(ANA, [Held("k", "after", 3, 1.0, 8.0)], before)
    assert cache.get(ANA, "k", str, at=5.0) == "after"
    assert cache.get(ANA, "k", str, at=8.5) is None  # the window the carried entry got
    assert cache.get(BEN, "k", str) == "ben's"

    cache.keep(ANA, "k", "before", generations(*ANA))
    before, held = cache.held(ANA)
    generations.write(ANA)
    generations.write(ANA)  # another write meanwhile: what it did is not in the entry
    cache.carry_written(ANA, [Held("k", "after")], before)
    assert cache.get(ANA, "k", str) is None
    generations.write(ANA)
    assert cache.held(ANA) == (generations(*ANA), [])  # a stale entry is never held


def test_a_value_derived_before_a_write_never_replaces_one_carried_through_it() -> None:
    generations = Generations()
    cache = DerivedCache(generations)
    read_at = generations(*ANA)  # a reader starts...
    before, _ = cache.held(ANA)
    generations.write(ANA)
    cache.carry_written(ANA, [Held("k", "carried")], before)
    cache.keep(ANA, "k", "read before the write", read_at)  # ...and ends after it
    assert cache.get(ANA, "k", str) == "carried"


def _counts(flt: Filter, now: float, live: int, df: dict[int, int], until: float) -> Counts:
    return Counts(now, until, live, df, selecting(flt))


def _point(n: int, terms: list[int], expires: object = None, **payload: Any) -> Any:
    body = {"tenant": "t1", "user_id": "ana", "tier": "long_term", "deleted": False}
    body |= {"expires_at": expires, TERMS_FIELD: terms, **payload}
    return (f"00000000-0000-0000-0000-{n:012d}", body)


def test_a_new_point_the_filter_selects_adds_to_the_live_count_and_to_its_counted_terms() -> None:
    flt = Filter(
        must=[MatchValue("user_id", "ana"), live_condition(10.0)],
        must_not=[MatchValue("deleted", True)],
    )
    counts = _counts(flt, 10.0, 4, {1: 2, 2: 0}, 50.0)
    after = counts.with_inserted([_point(1, [1, 3, 1]), _point(2, [2], expires=30.0)])
    assert after == _counts(flt, 10.0, 6, {1: 3, 2: 1}, 30.0)  # term 3 was never counted
    assert counts == _counts(flt, 10.0, 4, {1: 2, 2: 0}, 50.0)  # a copy: never in place
    # Not selected (deleted; another user; expired at the counts' clock): nothing changes.
    assert counts.with_inserted([_point(3, [1], deleted=True)]) == counts
    assert counts.with_inserted([_point(4, [1], user_id="ben")]) == counts
    assert counts.with_inserted([_point(5, [1], expires=10.0)]) == counts
    # An empty tier's entry (none live) gets its first.
    empty = _counts(flt, 10.0, 0, {}, math.inf)
    assert empty.with_inserted([_point(6, [1])]) == _counts(flt, 10.0, 1, {}, math.inf)


def test_what_the_evaluator_cannot_tell_is_never_carried() -> None:
    flt = Filter(must=[MatchValue("user_id", "ana"), MatchAny("metadata.tags[]", ["x"])])
    counts = _counts(flt, -math.inf, 1, {}, math.inf)
    assert counts.with_inserted([_point(1, [1])]) is None
    plain = _counts(Filter(must=[MatchValue("user_id", "ana")]), -math.inf, 1, {}, math.inf)
    assert plain.with_inserted([_point(2, [1], expires="soon")]) is None
    assert Counts(0.0, math.inf, 0).with_inserted([_point(3, [1])]) is None  # no filter
    held = [Held("counts", counts), Held("counts2", plain), Held("turn", "a last turn")]
    assert [h.key for h in carried(held, [_point(4, [1])])] == ["counts2"]


def test_a_write_carries_counts_up_to_a_number_of_terms_and_leaves_the_rest_to_lapse() -> None:
    flt = Filter(must=[MatchValue("user_id", "ana")])
    big = _counts(flt, -math.inf, 1, {t: 1 for t in range(MAX_CARRIED_TERMS - 10)}, math.inf)
    small = _counts(flt, -math.inf, 1, {1: 1}, math.inf)
    held = [Held("big", big), Held("too many", big), Held("small", small)]
    after = carried(held, [_point(1, [1])])
    assert [h.key for h in after] == ["big", "small"]
    assert [h.weight for h in after] == [1 + len(big.df), 2]
