"""The per-user BM25 counts kept between queries (core/memory/term_counts.py): a repeated
query counts nothing in the store, and what is kept is always what the store would count
now, across every way memories come and go."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import pytest

from clock import MovableClock
from memoryd.app import App
from memoryd.core.memory import term_counts
from memoryd.core.memory.term_counts import Counts, TermCounts, key_of, live_condition
from memoryd.core.memory.vector_memory import VectorMemory
from memoryd.core.models import (
    AddCommand,
    Lookup,
    PruneCommand,
    PruneStrategy,
    RetrieveQuery,
    Scope,
    Tier,
)
from memoryd.stores.vectors.port import TERMS_FIELD, Filter, MatchValue
from unit.unit_kit import AppFactory

USER = Scope(tenant="t1", user_id="ana")
OTHER = Scope(tenant="t1", user_id="ben")
WORDS = "coffee kittens recital garden report"


class StoreCalls:
    """Counts the store's count calls (the work the kept counts save)."""

    def __init__(self, memory: VectorMemory, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts = 0
        store = memory.store
        for name in ("count", "count_each"):
            monkeypatch.setattr(store, name, self._counting(getattr(store, name)))

    def _counting(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.counts += 1
            return method(*args, **kwargs)

        return call


def _memory(app: App) -> VectorMemory:
    assert app.memory is not None
    return app.memory


async def _add(app: App, text: str, scope: Scope = USER, **kw: Any) -> str:
    added = await app.engine.add(AddCommand(scope=scope, tier=Tier.LONG_TERM, content=text, **kw))
    return added.memory_id


async def _retrieve(app: App, query: str = WORDS) -> list[str]:
    found = await app.engine.retrieve(
        RetrieveQuery(scope=USER, query=query, tiers=[Tier.LONG_TERM], top_k=5)
    )
    return [r.id for r in found.items]


def _recounted(memory: VectorMemory, flt: Filter, terms: list[int]) -> dict[int, float]:
    """The IDF as the store counts it now, nothing kept."""
    live = memory.store.count(flt)
    return {
        t: math.log(1.0 + (live - df + 0.5) / (df + 0.5))
        for t, df in zip(terms, memory.store.count_each(flt, TERMS_FIELD, terms), strict=True)
    }


async def _assert_kept_counts_are_true(app: App) -> None:
    memory = _memory(app)
    flt = memory.scope_filter(USER, Tier.LONG_TERM)
    terms = list(memory._encoder.encode_query(WORDS).indices)
    assert memory._idf(flt, terms) == _recounted(memory, flt, terms)


async def test_a_repeated_query_counts_nothing_in_the_store(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = await make_app()
    for text in ("I love coffee", "the kittens sleep", "the recital was Saturday"):
        await _add(app, text)
    calls = StoreCalls(_memory(app), monkeypatch)
    first = await _retrieve(app)
    counted = calls.counts
    assert counted > 0
    again = await _retrieve(app)
    assert again == first and calls.counts == counted
    await _retrieve(app, "coffee garden")  # terms asked before: nothing to count either
    assert calls.counts == counted
    await _retrieve(app, "coffee tomatoes")  # a new term: counted, and only that
    assert calls.counts == counted + 1


async def test_another_users_writes_leave_a_users_kept_counts(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = await make_app()
    await _add(app, "I love coffee")
    other = await _add(app, "coffee and kittens", scope=OTHER)
    calls = StoreCalls(_memory(app), monkeypatch)
    await _retrieve(app)
    counted = calls.counts
    await _add(app, "more coffee for ben", scope=OTHER)
    await app.engine.delete(Lookup(scope=OTHER, tier=Tier.LONG_TERM, ids=[other]))
    await _retrieve(app)
    assert calls.counts == counted
    await _add(app, "the garden")  # the user's own write: counted again
    await _retrieve(app)
    assert calls.counts > counted
    await _assert_kept_counts_are_true(app)


async def test_kept_counts_follow_adds_deletes_prunes_and_imports(make_app: AppFactory) -> None:
    app = await make_app()
    ids = [await _add(app, f"note {i} about coffee and the garden") for i in range(6)]
    await _add(app, "kittens and coffee", scope=OTHER)  # another user's words never count
    await _retrieve(app)
    await _assert_kept_counts_are_true(app)

    await _add(app, "the recital report")
    await _assert_kept_counts_are_true(app)

    await app.engine.delete(Lookup(scope=USER, tier=Tier.LONG_TERM, ids=ids[:2]))
    await _assert_kept_counts_are_true(app)

    await app.engine.prune(
        PruneCommand(
            scope=USER, strategy=PruneStrategy.OLDEST_PERCENT, tiers=[Tier.LONG_TERM], percent=50
        )
    )
    await _assert_kept_counts_are_true(app)

    exported = [r async for page in _memory(app).export_pages(USER, Tier.LONG_TERM) for r in page]
    moved = [dataclasses.replace(r, id=f"{r.id[:-4]}beef") for r in exported]
    done = await app.engine.import_records(USER, moved)
    assert done.imported_count == len(moved)
    await _assert_kept_counts_are_true(app)


async def test_kept_counts_end_when_a_counted_memory_expires(
    make_app: AppFactory, clock: MovableClock
) -> None:
    app = await make_app()
    await _add(app, "coffee in the garden")
    await _add(app, "coffee with kittens", expires_at=clock() + 60)
    await _retrieve(app)
    await _assert_kept_counts_are_true(app)
    clock.advance(61)  # expired, not yet purged: no longer counted
    await _assert_kept_counts_are_true(app)
    memory = _memory(app)
    flt = memory.scope_filter(USER, Tier.LONG_TERM)
    assert memory.store.count(flt) == 1


async def test_kept_counts_are_rebuilt_when_lost(make_app: AppFactory) -> None:
    app = await make_app()
    await _add(app, "coffee in the garden")
    before = await _retrieve(app)
    memory = _memory(app)
    memory._counts = TermCounts()  # e.g. a restart: nothing kept
    assert await _retrieve(app) == before
    await _assert_kept_counts_are_true(app)


def test_the_key_leaves_the_clock_out_and_keeps_every_other_condition() -> None:
    def flt(now: float, user: str = "ana", extra: tuple[Any, ...] = ()) -> Filter:
        return Filter(must=[MatchValue("user_id", user), live_condition(now), *extra])

    assert key_of(flt(10.0)) == (key_of(flt(20.0))[0], 10.0)
    assert key_of(flt(10.0))[0] != key_of(flt(10.0, "ben"))[0]
    assert key_of(flt(10.0))[0] != key_of(flt(10.0, extra=(MatchValue("kind", "fact"),)))[0]
    everything = Filter(must=[MatchValue("user_id", "ana")])
    assert key_of(everything)[1] == -math.inf


def test_an_entry_holds_for_its_generation_until_the_first_counted_expiry() -> None:
    kept = TermCounts()
    kept.keep("k", Counts(generation=3, counted_at=10.0, valid_until=50.0, live=4), [7], [2])
    assert kept.get("k", 3, 10.0) is not None and kept.get("k", 3, 49.9) is not None
    assert kept.get("k", 4, 20.0) is None  # a write since: dropped
    assert kept.get("k", 3, 20.0) is None
    kept.keep("k", Counts(generation=3, counted_at=10.0, valid_until=50.0, live=4), [7], [2])
    assert kept.get("k", 3, 50.0) is None  # the first expiry came
    kept.keep("k", Counts(generation=3, counted_at=10.0, valid_until=50.0, live=4), [7], [2])
    assert kept.get("k", 3, 9.0) is None  # a clock before the count
    assert kept.get("k", None, 20.0) is None  # a store shared with other writers


def test_the_least_recently_used_filters_are_dropped_first() -> None:
    kept = TermCounts(max_entries=2)
    for key in ("a", "b"):
        kept.keep(key, Counts(1, 0.0, math.inf, 1), [], [])
    assert kept.get("a", 1, 0.0) is not None
    kept.keep("c", Counts(1, 0.0, math.inf, 1), [], [])
    assert kept.get("b", 1, 0.0) is None
    assert kept.get("a", 1, 0.0) is not None and kept.get("c", 1, 0.0) is not None
    assert term_counts.MAX_ENTRIES > 2 and len(kept) == 2


async def test_rankings_with_kept_counts_are_those_counted_afresh(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = await make_app()
    texts = [
        "I love coffee in the morning",
        "the kittens sleep in the garden",
        "the recital was on Saturday",
        "my report on the garden is due",
        "coffee with the kittens after the recital",
        "Ruth waters the garden when I travel",
    ]
    for i, text in enumerate(texts):
        await _add(app, text, scope=dataclasses.replace(USER, session_id=f"s{i % 2}"))
    queries = ["coffee", "garden kittens", "who waters the garden", "recital report", WORDS]

    async def ranked() -> list[list[tuple[str, float]]]:
        out = []
        for query in queries:
            found = await app.engine.retrieve(
                RetrieveQuery(scope=USER, query=query, tiers=[Tier.LONG_TERM], top_k=4)
            )
            out.append([(r.id, r.score) for r in found.items])
        return out

    await ranked()  # every count kept
    kept = await ranked()
    assert len(_memory(app)._counts) > 0
    monkeypatch.setattr(_memory(app).store, "generation", lambda *owner: None)  # keep nothing
    assert await ranked() == kept


def test_the_terms_kept_in_all_are_bounded() -> None:
    kept = TermCounts(max_entries=100, max_terms=10, max_total_terms=25)
    for n in range(5):
        kept.keep(f"user{n}", Counts(1, 0.0, math.inf, 10), list(range(8)), [1] * 8)
    assert kept.terms_held <= 25 and len(kept) == 3  # the oldest filters went first
    assert kept.get("user4", 1, 0.0) is not None and kept.get("user0", 1, 0.0) is None
    entry = kept.get("user4", 1, 0.0)
    assert entry is not None
    kept.keep("user4", entry, [100, 101, 102], [1, 1, 1])  # past max_terms: starts over
    assert len(entry.df) == 3 and kept.terms_held <= 25
