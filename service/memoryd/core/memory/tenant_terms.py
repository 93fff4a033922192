"""How many of a tenant's memories hold each keyword term, over every user of the tenant
(ADR 0601 and its second addendum).

In the users' term space (`term_space.py`) the engine's IDF of a term counts only the
querying user's memories of it, over the whole collection's size. Measured on the
long-conversation gate, the keyword ranking is better with statistics over many users (a
user's names and topics are rare across users, common within their own turns): this table
gives them back without walking anyone else's postings at query time. They are each
tenant's own, never the whole collection's: another tenant's writes must not move a
tenant's ranking, or its scores (`explain` shows them) would tell whether another tenant
holds a word. `UserTermSpace` weighs each query term by the tenant's IDF over the engine's.

What it holds, per tenant: `df` (points holding each encoder term id) and `total` (points
holding any), over every user of the tenant, or over a sample of its users when it is
large; and the store's points holding a term (what the engine's IDF counts over).

* a recount counts them from the store's term index, tenant by tenant (in random order)
  and within a tenant one user at a time (the store's `facet` of a user's `term_ids`: the
  index, not the payloads), in its own thread; past `sample_limit` points (or
  `terms_limit` entries: a word of several tenants is held once for each) it stops: the
  tenant it stops in is a sample of its users, scaled to its size, and the tenants after
  it have no statistics until a later recount;
* every write through this process changes them meanwhile: the points it adds, less the
  ones it replaces or deletes by id (read first); deletes by filter are only counted; a
  new tenant is counted from its writes when the last recount counted every tenant;
* a recount starts with the first write or keyword search (`start`: once the server
  answers), and again once the points upserted since the last one reach what it counted,
  or those deleted a quarter of it (at least `MIN_CHANGES` either way). Until the first
  finishes, a tenant it has counted stands in, and so does the tenant it is counting once
  `MIN_SAMPLE` of its points are; before that the engine's IDF stands.

Other processes' writes to a shared Qdrant server are seen at the next recount only;
IDF moves slowly with counts, so the table may lag without changing rankings much.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

log = logging.getLogger(__name__)

# Points counted per recount; past it the counted points are a sample of the store.
SAMPLE_LIMIT = 250_000
# (tenant, term) entries a recount keeps at most (~60 bytes each): many small tenants hold
# the same words each, so past it the counted tenants are a sample too.
TERMS_LIMIT = 1_000_000
# Points of a tenant a first recount must have counted before its partial counts are used.
MIN_SAMPLE = 20_000
# Points upserted or deleted that start another recount, at the least.
MIN_CHANGES = 1_000

# What a recount reads of one user: their points holding a term, and how many of them hold
# each term (the encoder's ids).
Part = tuple[int, Mapping[int, int]]
# A user, and how to read their part (the recount notes when it began).
UserPart = tuple[str, Callable[[], Part]]
# A tenant, and its users.
TenantParts = tuple[str, Iterable[UserPart]]
# A written point's tenant, user and term ids (the encoder's).
Written = tuple[str, str, Sequence[int]]


def bm25_idf(total: float, df: float) -> float:
    """A term's IDF as Qdrant's IDF modifier computes it."""
    return math.log(1.0 + (total - df + 0.5) / (df + 0.5))


class Frequencies(NamedTuple):
    """A tenant's statistics for some terms (scaled when counted over a sample)."""

    points: float  # the tenant's points holding a term
    df: list[float]  # of them, those holding each term asked
    store_points: float  # the store's points holding a term: what the engine's IDF counts


class _Counts:
    __slots__ = ("df", "total")

    def __init__(self) -> None:
        self.df: dict[int, int] = {}
        self.total = 0

    def merge(self, points: int, df: Mapping[int, int]) -> None:
        self.total += points
        mine = self.df
        for term, n in df.items():
            mine[term] = mine.get(term, 0) + n

    def add(self, ids: Sequence[int], sign: int) -> None:
        self.total += sign
        df = self.df
        for term in ids:
            df[term] = df.get(term, 0) + sign


@dataclass
class _Running:
    """A running recount, as searches and writes see it until it finishes."""

    thread: threading.Thread | None = None  # the thread counting
    counts: dict[str, _Counts] = field(default_factory=dict)  # its counts so far
    done: set[str] = field(default_factory=set)  # the tenants it has counted whole
    store_points: int | None = None  # the store's, counted at its start, kept up
    # Writes meanwhile, numbered: it keeps those of a user after it read the user (the
    # ones before, it read from the store; none runs meanwhile).
    during: list[tuple[int, Sequence[Written], Sequence[Written]]] = field(default_factory=list)


def _holding(points: Sequence[Written]) -> int:
    return sum(1 for _, _, ids in points if ids)


def _unread(
    points: Sequence[Written], write: int, read_after: Mapping[tuple[str, str], int]
) -> list[Written]:
    """The points of write number `write` that a recount did not read: of users it read
    before the write, or never read."""
    return [w for w in points if write > read_after.get((w[0], w[1]), 0)]


class TenantTerms:
    """The table (module docstring). Thread-safe: writes and searches run in the store's
    worker threads, the recount in its own."""

    def __init__(
        self,
        read_tenants: Callable[[], Iterable[TenantParts]],
        count_store: Callable[[str | None], int],
        sample_limit: int = SAMPLE_LIMIT,
        min_sample: int = MIN_SAMPLE,
        terms_limit: int = TERMS_LIMIT,
    ) -> None:
        """`read_tenants`: every tenant's parts; `count_store(tenant)`: the points holding
        a term, of a tenant or (None) of the store."""
        self._read_tenants = read_tenants
        self._count_store = count_store
        self._sample_limit = sample_limit
        self._min_sample = min_sample
        self._terms_limit = terms_limit
        self._lock = threading.Lock()
        # A user's writes and a recount's read of that user take turns (`writing`).
        self._turn = threading.Condition(self._lock)
        self._writing: Counter[tuple[str, str]] = Counter()  # users with writes under way
        self._reading: tuple[str, str] | None = None  # the user a recount reads, or waits for
        self._tenants: dict[str, _Counts] | None = None  # None: no recount has finished
        self._scaled: dict[str, float] = {}  # tenants counted over a sample: size / counted
        self._complete = False  # the last recount counted every tenant
        self._store_points = 0
        self._running: _Running | None = None
        self._writes = 0  # writes numbered (`_Running.during`)
        self._upserted = 0  # points upserted since the last recount began
        self._removed = 0  # and deleted
        self._counted = 0
        self._closed = threading.Event()

    # ------------------------------------------------------------------ writes

    @contextmanager
    def writing(self, owners: Iterable[tuple[str, str]]) -> Iterator[None]:
        """Around a write of these users' points and its `changed`: a recount never reads a
        user while a write of theirs is under way, so it counts each write once (read from
        the store, or added from `changed`). Waits while a recount reads one of them."""
        users = set(owners)
        with self._turn:
            self._turn.wait_for(lambda: self._reading not in users)
            self._writing.update(users)
        try:
            yield
        finally:
            with self._turn:
                self._writing.subtract(users)
                for user in users:
                    if self._writing[user] <= 0:
                        del self._writing[user]
                self._turn.notify_all()

    def changed(self, added: Sequence[Written], removed: Sequence[Written] = ()) -> None:
        """Points written with these tenants and term ids, and the points they replaced or
        deletes removed, as they were."""
        delta = _holding(added) - _holding(removed)
        with self._lock:
            if self._tenants is not None:
                self._store_points += delta
                self._apply(self._tenants, added, removed)
            running = self._running
            if running is not None:
                self._writes += 1
                running.during.append((self._writes, added, removed))
                if running.store_points is not None:
                    running.store_points += delta
            self._upserted += len(added)
            self._start_if_due()

    def removed(self, points: int) -> None:
        """Points deleted whose terms are not known (deletes by filter)."""
        with self._lock:
            self._removed += points

    def _apply(
        self, tenants: dict[str, _Counts], added: Sequence[Written], removed: Sequence[Written]
    ) -> None:
        for sign, points in ((1, added), (-1, removed)):
            for tenant, _, ids in points:
                if not ids or tenant in self._scaled:
                    continue  # a sample stays one: its new points wait for the next recount
                counts = tenants.get(tenant)
                if counts is None:
                    if not self._complete:
                        continue  # a tenant the recount did not reach
                    counts = tenants[tenant] = _Counts()  # a new tenant: counted from here
                counts.add(ids, sign)

    # ------------------------------------------------------------------ reads

    def frequencies(self, tenant: str, terms: Sequence[int]) -> Frequencies | None:
        """The tenant's statistics for `terms`; None while it has none (the engine's IDF
        stands). Starts a recount when one is due."""
        with self._lock:
            self._start_if_due()
            if self._tenants is not None:
                counts = self._tenants.get(tenant)
                scale, store = self._scaled.get(tenant, 1.0), self._store_points
            else:
                running = self._running
                counts = None if running is None else running.counts.get(tenant)
                if running is None or counts is None or running.store_points is None:
                    return None
                if tenant not in running.done and counts.total < self._min_sample:
                    return None
                scale, store = 1.0, running.store_points
            if counts is None:
                return None
            return Frequencies(
                counts.total * scale, [counts.df.get(t, 0) * scale for t in terms], float(store)
            )

    @property
    def _thread(self) -> threading.Thread | None:
        """The running recount's thread, if one runs."""
        running = self._running
        return None if running is None else running.thread

    def start(self) -> None:
        """Starts the first recount now (a server, as its store opens)."""
        with self._lock:
            self._start_if_due()

    def wait(self, timeout: float | None = None) -> bool:
        """Waits for a running recount (tests, benchmarks); True when none runs."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return self._thread is None

    def close(self) -> None:
        self._closed.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)

    # ------------------------------------------------------------------ recount

    def _start_if_due(self) -> None:
        if self._thread is not None or self._closed.is_set():
            return
        if self._tenants is not None:
            # Adds are counted as they come: a recount is for what they cannot tell (a
            # point upserted again, deletes). Once the store has doubled, or lost a
            # quarter, since the last one: a store's scrolls add up to twice its size.
            due = max(MIN_CHANGES, self._counted)
            if self._upserted < due and self._removed < max(MIN_CHANGES, self._counted // 4):
                return
        self._upserted = self._removed = 0
        running = self._running = _Running()
        running.thread = threading.Thread(
            target=self._recount, args=(running,), name="memoryd-term-recount", daemon=True
        )
        running.thread.start()

    def _recount(self, running: _Running) -> None:
        started = time.monotonic()
        tenants = running.counts
        scaled: dict[str, float] = {}
        read_after: dict[tuple[str, str], int] = {}  # a user's writes it read: up to this one
        counted, entries, complete = 0, 0, True
        try:
            store_points = self._count_store(None)
            with self._lock:
                running.store_points = store_points
            for tenant, parts in self._read_tenants():
                counts = _Counts()
                with self._lock:
                    tenants[tenant] = counts
                for user, read in parts:
                    if self._closed.is_set():
                        self._stopped()
                        return
                    before = self._turn_to_read((tenant, user))
                    try:
                        points, df = read()
                    finally:
                        with self._turn:
                            self._reading = None
                            self._turn.notify_all()
                    with self._lock:
                        held = len(counts.df)
                        counts.merge(points, df)
                        read_after[(tenant, user)] = before
                    counted += points
                    entries += len(counts.df) - held
                    if counted >= self._sample_limit or entries >= self._terms_limit:
                        complete = False
                        break
                if not complete:
                    # The tenant it stopped in: its counted users are a sample of it.
                    size = self._count_store(tenant)
                    if counts.total and size > counts.total:
                        scaled[tenant] = size / counts.total
                    break
                with self._lock:
                    running.done.add(tenant)
        except Exception:  # a store down or closed: the next search starts another
            if not self._closed.is_set():
                log.warning("recounting the keyword terms failed", exc_info=True)
            self._stopped()
            return
        with self._lock:
            self._complete, self._scaled = complete, scaled
            # Writes during the recount that it did not read: those of a user after it read
            # the user, and those of users it never read (new ones).
            for n, added, removed in running.during:
                self._apply(tenants, _unread(added, n, read_after), _unread(removed, n, read_after))
            self._counted = counted
            # Every tenant counted: the store's points are theirs, exactly (a count taken
            # beside concurrent writes is not). Else the count at the start, kept up.
            self._store_points = (
                sum(c.total for c in tenants.values()) if complete else running.store_points or 0
            )
            self._tenants, self._running = tenants, None
        log.info(
            "keyword statistics of %d memories counted in %.1f s (%d tenants%s)",
            store_points,
            time.monotonic() - started,
            len(tenants),
            "" if complete else f"; stopped at {counted} points, a sample",
        )

    def _turn_to_read(self, user: tuple[str, str]) -> int:
        """Waits until no write of `user` is under way (new ones wait meanwhile) and marks
        the user read; returns the number of the last write so far."""
        with self._turn:
            self._reading = user
            while self._writing[user] and not self._closed.is_set():
                self._turn.wait(0.1)
            return self._writes

    def _stopped(self) -> None:
        with self._lock:
            self._running = None
            self._removed = max(self._removed, MIN_CHANGES)  # due again
