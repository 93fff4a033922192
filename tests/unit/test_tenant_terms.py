"""Each tenant's keyword statistics (ADR 0601 and its addendums): what the users' term space
weighs a query by, counted in the background from the store's term index one tenant and
one user at a time, and kept up with writes; never mixed across tenants."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from functools import partial

import pytest

from memoryd.core.memory.tenant_terms import (
    Frequencies,
    Part,
    TenantParts,
    TenantTerms,
    UserPart,
    Written,
    bm25_idf,
)

Points = list[Sequence[int]]


class Store:
    """A store's tenants' users' points (their term ids), read as a recount reads them."""

    def __init__(self, tenants: dict[str, dict[str, Points]]) -> None:
        self.tenants = tenants
        self.reads = 0
        self.gate: threading.Event | None = None
        self.fail = False
        self.listed = threading.Event()  # a recount has listed a tenant's users
        # A recount that has read this user waits for `proceed` before the next.
        self.pause_after: str | None = None
        self.paused, self.proceed = threading.Event(), threading.Event()
        self.reading = threading.Event()  # a recount is reading a user

    def __call__(self) -> Iterator[TenantParts]:
        for tenant, users in list(self.tenants.items()):
            yield tenant, self._users(users)

    def _users(self, users: dict[str, Points]) -> Iterator[UserPart]:
        listed = list(users.items())
        self.listed.set()
        for user, points in listed:
            yield user, partial(self._read, points)
            if user == self.pause_after:
                self.paused.set()
                self.proceed.wait(10)

    def _read(self, points: Points) -> Part:
        self.reading.set()
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail:
            raise ConnectionError("store down")
        self.reads += 1
        held = [p for p in points if p]
        return len(held), Counter(t for p in held for t in p)

    def count(self, tenant: str | None) -> int:
        return sum(
            1
            for name, users in self.tenants.items()
            if tenant in (None, name)
            for points in users.values()
            for p in points
            if p
        )


def one_tenant(users: dict[str, Points]) -> Store:
    return Store({"acme": users})


def table(store: Store, **kwargs: int) -> TenantTerms:
    return TenantTerms(store, store.count, **kwargs)


def stats(points: float, df: list[float], store: float | None = None) -> Frequencies:
    return Frequencies(points, df, points if store is None else store)


def written(tenant: str, *points: Sequence[int], user: str = "alice") -> list[Written]:
    return [(tenant, user, p) for p in points]


def test_a_recount_counts_every_point_holding_a_term() -> None:
    store = one_tenant({"alice": [[1, 2], [2], []] * 300, "bob": [[2, 3]] * 600})
    terms = table(store, min_sample=10_000_000)
    assert terms.frequencies("acme", [1]) is None  # nothing counted yet: the engine's IDF
    assert terms.wait(10)
    assert terms.frequencies("acme", [1, 2, 3, 4]) == stats(1200, [300, 1200, 600, 0])
    assert store.reads == 2


def test_each_tenant_has_its_own_statistics_and_other_tenants_writes_leave_them() -> None:
    store = Store({"acme": {"alice": [[1, 2]] * 10}, "globex": {"gus": [[1]] * 30}})
    terms = table(store)
    terms.start()
    assert terms.wait(10)
    assert terms.frequencies("acme", [1, 2]) == stats(10, [10, 10], store=40)
    assert terms.frequencies("globex", [1, 2]) == stats(30, [30, 0], store=40)
    # globex writes acme's words: only the store's size moves (which the engine counts)
    terms.changed(written("globex", [2], [2, 9]))
    terms.changed([], written("globex", [1]))
    assert terms.frequencies("acme", [1, 2, 9]) == stats(10, [10, 10, 0], store=41)
    assert terms.frequencies("globex", [1, 2, 9]) == stats(31, [29, 2, 1], store=41)
    assert terms.frequencies("initech", [1]) is None  # no memories: nothing to weigh


def test_writes_change_the_counts_and_a_recount_follows_once_the_store_doubled() -> None:
    store = one_tenant({"alice": [[1]] * 4000})
    terms = table(store)
    terms.start()
    assert terms.wait(10)
    reads = store.reads
    terms.changed(written("acme", *[[1, 5]] * 10))
    assert terms.frequencies("acme", [1, 5]) == stats(4010, [4010, 10])
    # Replaced and deleted points whose terms are known leave the counts at once.
    terms.changed(written("acme", [1]), written("acme", [1, 5]))
    assert terms.frequencies("acme", [1, 5]) == stats(4010, [4010, 9])
    terms.changed([], written("acme", [1, 5]))
    assert terms.frequencies("acme", [1, 5]) == stats(4009, [4009, 8])
    assert store.reads == reads  # a few writes: no recount
    terms.changed(written("acme", *[[1]] * 4000))
    assert terms.wait(10)
    assert store.reads == reads + 1  # the store doubled: counted again
    # (the writes never reached `store`: the recount finds what the store holds)
    assert terms.frequencies("acme", [1]) == stats(4000, [4000])


def test_a_new_tenant_is_counted_from_its_writes_once_every_tenant_was_counted() -> None:
    store = one_tenant({"alice": [[1]] * 10})
    terms = table(store)
    terms.start()
    assert terms.wait(10)
    terms.changed(written("globex", [1, 2], [2]))
    assert terms.frequencies("globex", [1, 2]) == stats(2, [1, 2], store=12)


def test_deletes_by_filter_start_a_recount_once_a_quarter_is_gone() -> None:
    store = one_tenant({"alice": [[1]] * 2000, "bob": [[1]] * 2000})
    terms = table(store)
    terms.start()
    assert terms.wait(10)
    del store.tenants["acme"]["bob"]
    terms.removed(500)
    terms.frequencies("acme", [1])
    assert terms.wait(10)
    assert store.reads == 2  # under a quarter: not yet
    terms.removed(500)
    terms.frequencies("acme", [1])
    assert terms.wait(10)
    assert terms.frequencies("acme", [1]) == stats(2000, [2000])


def test_past_the_limit_the_counted_users_are_a_sample_scaled_to_their_tenant() -> None:
    store = one_tenant({f"u{n}": [[1], [1, 2]] * 500 for n in range(4)})  # 4,000 points
    terms = table(store, sample_limit=1000, min_sample=10_000_000)
    terms.start()
    assert terms.wait(10)
    assert store.reads == 1
    assert terms.frequencies("acme", [1, 2]) == stats(4000, [4000, 2000])
    # A sample stays one: new points wait for the next recount.
    terms.changed(written("acme", [7]))
    assert terms.frequencies("acme", [7]) == stats(4000, [0], store=4001)


def test_past_the_limit_the_tenants_not_reached_have_no_statistics_until_a_recount() -> None:
    store = Store({"acme": {"alice": [[1]] * 1000}, "globex": {"gus": [[1]] * 1000}})
    terms = table(store, sample_limit=1000)
    terms.start()
    assert terms.wait(10)
    assert terms.frequencies("acme", [1]) == stats(1000, [1000], store=2000)
    assert terms.frequencies("globex", [1]) is None
    # nor from writes: globex may hold more than this process wrote
    terms.changed(written("globex", [1]))
    assert terms.frequencies("globex", [1]) is None


def test_past_a_number_of_tenants_terms_the_rest_are_not_counted_either() -> None:
    # each tenant holds its own copy of a shared word: memory grows with tenants x words
    store = Store({f"t{n}": {"u": [[1, 2, 3]] * 5} for n in range(10)})
    terms = table(store, terms_limit=7)
    terms.start()
    assert terms.wait(10)
    assert store.reads == 3  # 9 entries once three tenants are counted
    assert sum(terms.frequencies(f"t{n}", [1]) is not None for n in range(10)) == 3


def test_a_tenant_counted_so_far_stands_in_during_the_first_recount() -> None:
    store = Store({"acme": {"alice": [[1]] * 1500}, "globex": {"gus": [[2]] * 1500}})
    terms = table(store, min_sample=1_000_000)
    store.gate = threading.Event()
    terms.start()
    assert terms.frequencies("acme", [1]) is None
    store.gate.set()
    assert terms.wait(10)
    assert terms.frequencies("acme", [1]) == stats(1500, [1500], store=3000)


def test_a_large_tenant_stands_in_once_enough_of_it_is_counted() -> None:
    store = one_tenant({"alice": [[1]] * 1500, "bob": [[2]] * 1500})
    terms = table(store, min_sample=1000)
    store.pause_after = "alice"  # alice is counted; bob waits
    terms.start()
    assert store.paused.wait(10)
    assert terms.frequencies("acme", [1, 2]) == stats(1500, [1500, 0], store=3000)
    store.proceed.set()
    assert terms.wait(10)
    assert terms.frequencies("acme", [1, 2]) == stats(3000, [1500, 1500])


def test_writes_during_a_recount_are_kept() -> None:
    store = one_tenant({"alice": [[1]] * 10})
    terms = table(store)
    store.gate = threading.Event()
    terms.start()
    assert store.listed.wait(10)
    # A new user's points, written after the recount listed the users: kept from the write.
    store.tenants["acme"]["bob"] = [[9], [9]]
    terms.changed(written("acme", [9], [9]))
    store.gate.set()
    assert terms.wait(10)
    assert terms.frequencies("acme", [1, 9]) == stats(12, [10, 2])


def test_a_write_during_a_recount_counts_once_whether_its_user_was_read_before_or_after() -> None:
    store = one_tenant({"alice": [[1]] * 10, "bob": [[1]] * 10})
    terms = table(store)
    store.pause_after = "alice"
    terms.start()
    assert store.paused.wait(10)
    for user in ("alice", "bob"):  # alice was read before her write, bob is read after his
        store.tenants["acme"][user].append([9])
        terms.changed(written("acme", [9], user=user))
    store.proceed.set()
    assert terms.wait(10)
    assert terms.frequencies("acme", [1, 9]) == stats(22, [20, 2])


def test_a_recount_reads_a_user_only_between_their_writes() -> None:
    store = one_tenant({"alice": [[1]] * 10})
    terms = table(store)
    alice = [("acme", "alice")]
    with terms.writing(alice):  # a write under way when the recount comes to alice
        terms.start()
        assert not store.reading.wait(0.2)  # it waits for the write to end
        store.tenants["acme"]["alice"].append([9])
        terms.changed(written("acme", [9]))
    assert terms.wait(10)
    assert terms.frequencies("acme", [9]) == stats(11, [1])  # read, and not added again


def test_a_users_write_waits_while_a_recount_reads_them() -> None:
    store = one_tenant({"alice": [[1]] * 10})
    terms = table(store)
    store.gate = threading.Event()
    terms.start()
    assert store.reading.wait(10)
    entered = threading.Event()

    def write() -> None:
        with terms.writing([("acme", "alice")]):
            entered.set()
            store.tenants["acme"]["alice"].append([9])
            terms.changed(written("acme", [9]))

    writer = threading.Thread(target=write)
    writer.start()
    assert not entered.wait(0.2)  # alice is being read
    store.gate.set()
    writer.join(10)
    assert entered.is_set()
    assert terms.wait(10)
    assert terms.frequencies("acme", [9]) == stats(11, [1])  # not read: added from the write


def test_a_failed_recount_is_started_again_by_the_next_search() -> None:
    store = one_tenant({"alice": [[1]] * 10})
    store.fail = True
    terms = table(store)
    terms.start()
    assert terms.wait(10)
    assert terms.frequencies("acme", [1]) is None  # starts another, which fails again
    assert terms.wait(10)
    store.fail = False
    assert terms.frequencies("acme", [1]) is None
    assert terms.wait(10)
    assert terms.frequencies("acme", [1]) == stats(10, [10])


def test_closing_stops_a_recount_and_starts_none() -> None:
    store = one_tenant({"alice": [[1]] * 10, "bob": [[1]] * 10})
    terms = table(store)
    store.gate = threading.Event()
    terms.start()
    assert store.reading.wait(10)
    closing = threading.Thread(target=terms.close)
    closing.start()
    terms._closed.wait(10)  # close() has begun: it waits for the user being read
    store.gate.set()
    closing.join(10)
    assert not closing.is_alive()
    assert terms.wait(10)
    assert store.reads == 1
    assert terms.frequencies("acme", [1]) is None


def test_idf_is_qdrants() -> None:
    # Qdrant's IDF modifier: ln(1 + (N - n + 0.5) / (n + 0.5))
    assert bm25_idf(100, 10) == pytest.approx(2.26375, abs=1e-5)
    assert bm25_idf(100, 100) < bm25_idf(100, 1)
