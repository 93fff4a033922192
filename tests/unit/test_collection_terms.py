"""The collection's keyword statistics (ADR 0601): what the users' term space weighs a query
by, counted in the background from the store's pages and kept up with writes."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from memoryd.core.memory.collection_terms import CollectionTerms, bm25_idf


class Pages:
    """A store's points' term ids, read a page at a time (offsets are list positions)."""

    def __init__(self, points: list[Sequence[int]]) -> None:
        self.points = points
        self.reads = 0
        self.gate: threading.Event | None = None
        self.fail = False

    def __call__(self, offset: str | None, limit: int) -> tuple[list[Sequence[int]], str | None]:
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail:
            raise ConnectionError("store down")
        self.reads += 1
        start = int(offset or 0)
        end = start + limit
        return self.points[start:end], (str(end) if end < len(self.points) else None)

    def count(self) -> int:
        return len(self.points)


def table(pages: Pages, **kwargs: int) -> CollectionTerms:
    return CollectionTerms(pages, pages.count, **kwargs)


def test_the_first_recount_counts_every_point_holding_a_term() -> None:
    pages = Pages([[1, 2], [2], [], [2, 3]] * 600)  # 2,400 points, 1,800 with terms
    terms = table(pages, min_sample=10_000_000)
    assert terms.frequencies([1]) is None  # nothing counted yet: the engine's IDF stands
    assert terms.wait(10)
    assert terms.frequencies([1, 2, 3, 4]) == (1800.0, [600.0, 1800.0, 600.0, 0.0])
    assert pages.reads == 3  # pages of 1,000


def test_writes_are_added_and_a_recount_follows_once_they_reach_half_the_count() -> None:
    pages = Pages([[1]] * 4000)
    terms = table(pages)
    terms.start()
    assert terms.wait(10)
    reads = pages.reads
    terms.changed([[1, 5]] * 10)
    assert terms.frequencies([1, 5]) == (4010.0, [4010.0, 10.0])
    assert pages.reads == reads  # a few writes: no recount
    # Replaced and deleted points whose terms are known leave the counts at once.
    terms.changed([[1]], [[1, 5]])
    assert terms.frequencies([1, 5]) == (4010.0, [4010.0, 9.0])
    terms.changed([], [[1, 5]])
    assert terms.frequencies([1, 5]) == (4009.0, [4009.0, 8.0])
    # Deletes by filter are only counted: the next recount finds them gone.
    del pages.points[:2000]
    terms.removed(2000)
    terms.frequencies([1])  # due: 2,000 deleted of 4,000 counted
    assert terms.wait(10)
    assert pages.reads > reads
    assert terms.frequencies([1]) == (2000.0, [2000.0])  # the written ones were not scrolled


def test_past_the_limit_the_counted_points_are_a_sample_scaled_to_the_store() -> None:
    pages = Pages([[1], [1, 2]] * 2000)  # 4,000 points
    terms = table(pages, sample_limit=1000, min_sample=10_000_000)
    terms.start()
    assert terms.wait(10)
    total, df = terms.frequencies([1, 2])  # type: ignore[misc]
    assert total == 4000.0
    assert df == [4000.0, 2000.0]
    # A sample stays one: new points wait for the next recount.
    terms.changed([[7]])
    assert terms.frequencies([7]) == (4000.0, [0.0])


def test_a_first_recounts_pages_stand_in_once_they_hold_enough_points() -> None:
    pages = Pages([[1], [2]] * 1500)
    terms = table(pages, min_sample=1000)
    pages.gate = threading.Event()
    terms.start()
    assert terms.frequencies([1]) is None
    pages.gate.set()
    assert terms.wait(10)
    assert terms.frequencies([1]) == (3000.0, [1500.0])


def test_writes_during_a_recount_are_kept() -> None:
    pages = Pages([[1]] * 10)
    terms = table(pages)
    pages.gate = threading.Event()
    terms.start()
    terms.changed([[9], [9]])  # the scroll has not read anything yet: not seen by it
    pages.gate.set()
    assert terms.wait(10)
    assert terms.frequencies([1, 9]) == (12.0, [10.0, 2.0])


def test_a_failed_recount_is_started_again_by_the_next_search() -> None:
    pages = Pages([[1]] * 10)
    pages.fail = True
    terms = table(pages)
    terms.start()
    assert terms.wait(10)
    assert terms.frequencies([1]) is None  # starts another, which fails again
    assert terms.wait(10)
    pages.fail = False
    assert terms.frequencies([1]) is None
    assert terms.wait(10)
    assert terms.frequencies([1]) == (10.0, [10.0])


def test_closing_stops_a_recount_and_starts_none() -> None:
    pages = Pages([[1]] * 5000)
    terms = table(pages)
    pages.gate = threading.Event()
    terms.start()
    closing = threading.Thread(target=terms.close)
    closing.start()
    terms._closed.wait(10)  # close() has begun: it waits for the recount's page
    pages.gate.set()
    closing.join(10)
    assert not closing.is_alive()
    assert terms.wait(10)
    assert pages.reads == 1
    assert terms.frequencies([1]) is None


def test_idf_is_qdrants() -> None:
    # Qdrant's IDF modifier: ln(1 + (N - n + 0.5) / (n + 0.5))
    assert bm25_idf(100, 10) == pytest.approx(2.26375, abs=1e-5)
    assert bm25_idf(100, 100) < bm25_idf(100, 1)
