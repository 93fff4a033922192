"""The collection's keyword statistics (ADR 0601): what the users' term space weighs a query
by, counted in the background from the store's term index one user at a time, and kept up
with writes."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence

import pytest

from memoryd.core.memory.collection_terms import CollectionTerms, Part, bm25_idf


class Users:
    """A store's users' points (their term ids), read as a recount reads them."""

    def __init__(self, users: dict[str, list[Sequence[int]]]) -> None:
        self.users = users
        self.reads = 0
        self.gate: threading.Event | None = None
        self.fail = False

    def __call__(self) -> Iterator[Part]:
        for points in list(self.users.values()):
            if self.gate is not None:
                self.gate.wait(10)
            if self.fail:
                raise ConnectionError("store down")
            self.reads += 1
            held = [p for p in points if p]
            yield len(held), Counter(t for p in held for t in p)

    def count(self) -> int:
        return sum(1 for points in self.users.values() for p in points if p)


def table(users: Users, **kwargs: int) -> CollectionTerms:
    return CollectionTerms(users, users.count, **kwargs)


def test_a_recount_counts_every_point_holding_a_term() -> None:
    users = Users({"alice": [[1, 2], [2], []] * 300, "bob": [[2, 3]] * 600})
    terms = table(users, min_sample=10_000_000)
    assert terms.frequencies([1]) is None  # nothing counted yet: the engine's IDF stands
    assert terms.wait(10)
    assert terms.frequencies([1, 2, 3, 4]) == (1200.0, [300.0, 1200.0, 600.0, 0.0])
    assert users.reads == 2


def test_writes_change_the_counts_and_a_recount_follows_once_the_store_doubled() -> None:
    users = Users({"alice": [[1]] * 4000})
    terms = table(users)
    terms.start()
    assert terms.wait(10)
    reads = users.reads
    terms.changed([[1, 5]] * 10)
    assert terms.frequencies([1, 5]) == (4010.0, [4010.0, 10.0])
    # Replaced and deleted points whose terms are known leave the counts at once.
    terms.changed([[1]], [[1, 5]])
    assert terms.frequencies([1, 5]) == (4010.0, [4010.0, 9.0])
    terms.changed([], [[1, 5]])
    assert terms.frequencies([1, 5]) == (4009.0, [4009.0, 8.0])
    assert users.reads == reads  # a few writes: no recount
    terms.changed([[1]] * 4000)
    assert terms.wait(10)
    assert users.reads == reads + 1  # the store doubled: counted again
    # (the writes never reached `users`: the recount finds what the store holds)
    assert terms.frequencies([1]) == (4000.0, [4000.0])


def test_deletes_by_filter_start_a_recount_once_a_quarter_is_gone() -> None:
    users = Users({"alice": [[1]] * 2000, "bob": [[1]] * 2000})
    terms = table(users)
    terms.start()
    assert terms.wait(10)
    del users.users["bob"]
    terms.removed(500)
    terms.frequencies([1])
    assert terms.wait(10)
    assert users.reads == 2  # under a quarter: not yet
    terms.removed(500)
    terms.frequencies([1])
    assert terms.wait(10)
    assert terms.frequencies([1]) == (2000.0, [2000.0])


def test_past_the_limit_the_counted_users_are_a_sample_scaled_to_the_store() -> None:
    users = Users({f"u{n}": [[1], [1, 2]] * 500 for n in range(4)})  # 4,000 points
    terms = table(users, sample_limit=1000, min_sample=10_000_000)
    terms.start()
    assert terms.wait(10)
    assert users.reads == 1
    assert terms.frequencies([1, 2]) == (4000.0, [4000.0, 2000.0])
    # A sample stays one: new points wait for the next recount.
    terms.changed([[7]])
    assert terms.frequencies([7]) == (4000.0, [0.0])


def test_the_users_counted_so_far_stand_in_once_they_hold_enough_points() -> None:
    users = Users({"alice": [[1]] * 1500, "bob": [[2]] * 1500})
    terms = table(users, min_sample=1000)
    users.gate = threading.Event()
    terms.start()
    assert terms.frequencies([1]) is None
    users.gate.set()
    assert terms.wait(10)
    assert terms.frequencies([1]) == (3000.0, [1500.0])


def test_writes_during_a_recount_are_kept() -> None:
    users = Users({"alice": [[1]] * 10})
    terms = table(users)
    users.gate = threading.Event()
    terms.start()
    # A new user's points, written after the recount listed the users: kept from the write.
    users.users["bob"] = [[9], [9]]
    terms.changed([[9], [9]])
    users.gate.set()
    assert terms.wait(10)
    assert terms.frequencies([1, 9]) == (12.0, [10.0, 2.0])


def test_a_failed_recount_is_started_again_by_the_next_search() -> None:
    users = Users({"alice": [[1]] * 10})
    users.fail = True
    terms = table(users)
    terms.start()
    assert terms.wait(10)
    assert terms.frequencies([1]) is None  # starts another, which fails again
    assert terms.wait(10)
    users.fail = False
    assert terms.frequencies([1]) is None
    assert terms.wait(10)
    assert terms.frequencies([1]) == (10.0, [10.0])


def test_closing_stops_a_recount_and_starts_none() -> None:
    users = Users({"alice": [[1]] * 10, "bob": [[1]] * 10})
    terms = table(users)
    users.gate = threading.Event()
    terms.start()
    closing = threading.Thread(target=terms.close)
    closing.start()
    terms._closed.wait(10)  # close() has begun: it waits for the recount's user
    users.gate.set()
    closing.join(10)
    assert not closing.is_alive()
    assert terms.wait(10)
    assert users.reads == 1
    assert terms.frequencies([1]) is None


def test_idf_is_qdrants() -> None:
    # Qdrant's IDF modifier: ln(1 + (N - n + 0.5) / (n + 0.5))
    assert bm25_idf(100, 10) == pytest.approx(2.26375, abs=1e-5)
    assert bm25_idf(100, 100) < bm25_idf(100, 1)
