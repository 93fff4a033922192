"""How many of the store's memories hold each keyword term, over every user (ADR 0601).

In the users' term space (`term_space.py`) the engine's IDF of a term counts only the
querying user's memories of it, over the whole collection's size. Measured on the
long-conversation gate, the keyword ranking is better with the collection's statistics (a
user's names and topics are rare across users, common within their own turns): this table
gives them back without walking anyone else's postings at query time. `UserTermSpace`
weighs each query term by the collection's IDF over the engine's.

What it holds: `df` (points holding each encoder term id) and `total` (points holding any),
over a set of points that is the whole store when it is small, else a sample of it:

* a recount counts them from the store's term index, one user at a time (the store's
  `facet` of a user's `term_ids`: the index, not the payloads), in its own thread; past
  `sample_limit` points it stops, and the users counted (in random order) are a sample
  whose frequencies are scaled to the store's size;
* every write through this process changes them meanwhile: the points it adds, less the
  ones it replaces or deletes by id (read first); deletes by filter are only counted;
* a recount starts with the first write or keyword search (`start`: once the server
  answers), and again once the points upserted since the last one reach what it counted,
  or those deleted a quarter of it (at least `MIN_CHANGES` either way). Until the first
  finishes, the users counted so far (a sample too) stand in once they hold `MIN_SAMPLE`
  points; before that there are no statistics and the engine's IDF stands.

Other processes' writes to a shared Qdrant server are seen at the next recount only;
IDF moves slowly with counts, so the table may lag without changing rankings much.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

log = logging.getLogger(__name__)

# Points counted per recount; past it the counted points are a sample of the store.
SAMPLE_LIMIT = 250_000
# Points a first recount must have counted before its partial counts are used.
MIN_SAMPLE = 20_000
# Points upserted or deleted that start another recount, at the least.
MIN_CHANGES = 1_000

# What a recount reads, one part of the store (a user) at a time: its points holding a
# term, and how many of them hold each term (the encoder's ids).
Part = tuple[int, Mapping[int, int]]


def bm25_idf(total: float, df: float) -> float:
    """A term's IDF as Qdrant's IDF modifier computes it."""
    return math.log(1.0 + (total - df + 0.5) / (df + 0.5))


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

    def add(self, terms: Iterable[Sequence[int]], sign: int = 1) -> None:
        df = self.df
        for ids in terms:
            if ids:
                self.total += sign
                for term in ids:
                    df[term] = df.get(term, 0) + sign


class CollectionTerms:
    """The table (module docstring). Thread-safe: writes and searches run in the store's
    worker threads, the recount in its own."""

    def __init__(
        self,
        read_parts: Callable[[], Iterable[Part]],
        count_store: Callable[[], int],
        sample_limit: int = SAMPLE_LIMIT,
        min_sample: int = MIN_SAMPLE,
    ) -> None:
        self._read_parts = read_parts
        self._count_store = count_store
        self._sample_limit = sample_limit
        self._min_sample = min_sample
        self._lock = threading.Lock()
        self._counts: _Counts | None = None  # None: no recount has finished
        self._partial: _Counts | None = None  # the running recount's counts so far
        # Writes while a recount runs: (added, removed) term ids.
        self._during: list[tuple[Sequence[Sequence[int]], Sequence[Sequence[int]]]] = []
        self._scale = 1.0  # the store's size over the points counted (>1: a sample)
        self._upserted = 0  # points upserted since the last recount began
        self._removed = 0  # and deleted
        self._counted = 0
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    # ------------------------------------------------------------------ writes

    def changed(
        self, added: Sequence[Sequence[int]], removed: Sequence[Sequence[int]] = ()
    ) -> None:
        """Points written with these term ids (the encoder's), and the points they replaced
        or deletes removed, as they were."""
        with self._lock:
            # A sample stays one: the new points wait for the next recount.
            if self._counts is not None and self._scale == 1.0:
                self._counts.add(added)
                self._counts.add(removed, -1)
            if self._thread is not None:
                self._during.append((added, removed))
            self._upserted += len(added)
            self._start_if_due()

    def removed(self, points: int) -> None:
        """Points deleted whose terms are not known (deletes by filter)."""
        with self._lock:
            self._removed += points

    # ------------------------------------------------------------------ reads

    def frequencies(self, terms: Sequence[int]) -> tuple[float, list[float]] | None:
        """The collection's size and each term's document frequency in it (scaled when
        counted over a sample); None while there are no statistics yet. Starts a recount
        when one is due."""
        with self._lock:
            self._start_if_due()
            counts, scale = self._counts, self._scale
            if counts is None:
                partial = self._partial
                if partial is None or partial.total < self._min_sample:
                    return None
                counts, scale = partial, 1.0
            return counts.total * scale, [counts.df.get(t, 0) * scale for t in terms]

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
        if self._counts is not None:
            # Adds are counted as they come: a recount is for what they cannot tell (a
            # point upserted again, deletes). Once the store has doubled, or lost a
            # quarter, since the last one: a store's scrolls add up to twice its size.
            due = max(MIN_CHANGES, self._counted)
            if self._upserted < due and self._removed < max(MIN_CHANGES, self._counted // 4):
                return
        self._upserted = self._removed = 0
        self._during = []
        self._partial = _Counts()
        self._thread = threading.Thread(
            target=self._recount, name="memoryd-term-recount", daemon=True
        )
        self._thread.start()

    def _recount(self) -> None:
        started = time.monotonic()
        counts, complete = _Counts(), True
        try:
            for points, df in self._read_parts():
                if self._closed.is_set():
                    self._stopped()
                    return
                with self._lock:
                    counts.merge(points, df)
                    self._partial = counts
                if counts.total >= self._sample_limit:
                    complete = False
                    break
            # The store's points holding a term: the counted ones, or a sample of them.
            size = self._count_store()
        except Exception:  # a store down or closed: the next search starts another
            if not self._closed.is_set():
                log.warning("recounting the collection's keyword terms failed", exc_info=True)
            self._stopped()
            return
        with self._lock:
            if complete:
                # Writes during the recount: those of users already counted were not (and
                # the others are counted twice, a small error until the next recount).
                for added, removed in self._during:
                    counts.add(added)
                    counts.add(removed, -1)
                counts.total = size
            self._during = []
            self._counted = counts.total
            self._scale = 1.0 if complete or not counts.total else max(1.0, size / counts.total)
            self._counts, self._partial, self._thread = counts, None, None
        log.info(
            "keyword statistics of %d memories counted in %.1f s (%d terms%s)",
            size,
            time.monotonic() - started,
            len(counts.df),
            "" if complete else f"; from a sample of {counts.total}",
        )

    def _stopped(self) -> None:
        with self._lock:
            self._partial, self._thread = None, None
            self._removed = max(self._removed, MIN_CHANGES)  # due again
