"""Per-user BM25 counts, kept between queries while nothing they count can have changed.

The per-user IDF of a query term (ADR 0400) needs two counts from the store: how many
memories the query's filter selects, and how many of those hold the term. Each count
walks the user's points in the engine (about 2 ms for 10,000 on qdrant-edge, whatever
the term), and they were made for every query. So the counts of each filter are kept and
reused while they are provably the same:

* the store's `generation` for the filter's user has not moved since they were read (no
  write touching the user's points, by any path, through this process's only handle on
  the collection; a store that other writers share answers None and nothing is kept);
* no memory they counted has expired since: an entry holds the time of the first expiry
  among the memories it counted and is dropped at that time (the filter's own clock);
* the filter is the same, its clock (the live condition `expires_at > now`) aside.

Terms are counted when first asked for and added to the entry, so a user's common words
are counted once per change of the store. The numbers are those the store would give for
the same filter at the same moment: rankings do not change.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from memoryd.stores.vectors.port import Filter, IsEmpty, MatchValue, Range

# Filters (one per user, tier and metadata filter) whose counts are kept, least recently used
# dropped first; the terms kept per filter before its entry starts over; and the terms kept
# in all (~100 bytes each: a bound on memory whatever filters callers send).
MAX_ENTRIES = 4096
MAX_TERMS = 20_000
MAX_TOTAL_TERMS = 200_000
EXPIRES_FIELD = "expires_at"


@dataclass
class Counts:
    """The counts of one filter at one store generation."""

    generation: int
    # The filter's clock when counted, and the first expiry after it among the counted
    # memories (inf: none expires): the counts hold for a clock in [counted_at, valid_until).
    counted_at: float
    valid_until: float
    live: int
    df: dict[int, int] = field(default_factory=dict)

    def holds(self, generation: int | None, now: float) -> bool:
        return generation == self.generation and self.counted_at <= now < self.valid_until


def live_condition(now: float) -> Filter:
    """Not expired at `now`: no `expires_at`, or one after `now`."""
    return Filter(should=[IsEmpty(EXPIRES_FIELD), Range(EXPIRES_FIELD, gt=now)])


def _clock_of(condition: object) -> float | None:
    """`now` if `condition` is `live_condition(now)`, else None."""
    if not isinstance(condition, Filter) or condition.must or condition.must_not:
        return None
    if len(condition.should) != 2 or condition.should[0] != IsEmpty(EXPIRES_FIELD):
        return None
    bound = condition.should[1]
    if not isinstance(bound, Range) or bound.gt is None:
        return None
    return bound.gt if bound == Range(EXPIRES_FIELD, gt=bound.gt) else None


def key_of(flt: Filter) -> tuple[str, float]:
    """What identifies `flt`'s counts (its conditions, the live condition's clock left out)
    and that clock (-inf when it has no live condition: nothing it counts expires)."""
    clock = -math.inf
    kept = []
    for condition in flt.must:
        now = _clock_of(condition)
        if now is None:
            kept.append(condition)
        else:
            clock = now
            kept.append(Filter(should=[IsEmpty(EXPIRES_FIELD)]))  # stands for "live"
    return repr(Filter(must=kept, should=flt.should, must_not=flt.must_not)), clock


def owner_of(flt: Filter) -> tuple[str, str] | None:
    """The (tenant, user_id) `flt` is limited to by top-level equalities, if any: whose
    writes can change what it counts."""
    values = {
        c.field: c.value
        for c in flt.must
        if isinstance(c, MatchValue) and c.field in ("tenant", "user_id")
    }
    tenant, user = values.get("tenant"), values.get("user_id")
    return (tenant, user) if isinstance(tenant, str) and isinstance(user, str) else None


class TermCounts:
    """Counts by filter key; safe to use from several threads."""

    def __init__(
        self,
        max_entries: int = MAX_ENTRIES,
        max_terms: int = MAX_TERMS,
        max_total_terms: int = MAX_TOTAL_TERMS,
    ) -> None:
        self._entries: OrderedDict[str, Counts] = OrderedDict()
        self._lock = threading.Lock()
        self._max_entries = max_entries
        self._max_terms = max_terms
        self._max_total = max_total_terms
        self._total = 0  # terms held by the entries kept

    def get(self, key: str, generation: int | None, now: float) -> Counts | None:
        """The entry for `key` if it holds at this generation and clock, else None."""
        if generation is None:
            return None
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if not entry.holds(generation, now):
                del self._entries[key]
                self._total -= len(entry.df)
                return None
            self._entries.move_to_end(key)
            return entry

    def keep(self, key: str, entry: Counts, terms: Sequence[int], counts: Sequence[int]) -> None:
        """Add the counts of `terms` to `entry` (read at `entry.generation`) and keep it."""
        with self._lock:
            held = self._entries.pop(key, None)
            if held is not None:
                self._total -= len(held.df)
            if len(entry.df) + len(terms) > self._max_terms:
                entry.df.clear()
            entry.df.update(zip(terms, counts, strict=True))
            self._entries[key] = entry
            self._total += len(entry.df)
            while len(self._entries) > 1 and (
                len(self._entries) > self._max_entries or self._total > self._max_total
            ):
                _, dropped = self._entries.popitem(last=False)
                self._total -= len(dropped.df)

    @property
    def terms_held(self) -> int:
        return self._total

    def __len__(self) -> int:
        return len(self._entries)
