"""What the core derives from a user's stored points, kept while those points stay the same.

Three things are read from the vector store often and change only when the user writes:
the per-user term counts of retrieval (`term_counts`), an empty tier (counts with none
live) and the last turn placed in each session (the long-term tier). They share one
cache and one rule:

    an entry holds while its owner's store `generation` is the one it was derived at.

The generation is read *before* the store is (a write landing meanwhile moves it, and what
was read is then never kept); an entry derived from a write itself (the turn a write
placed) is kept at the generation that write made, and only when no other write moved it.
So are entries carried through a write: what held before a pure insert, updated with the
points it added (`held`, then `carry_written`; term_counts.py says how counts are). A
store that other writers share answers None and nothing is kept. An entry may also carry
a clock window (counts stop holding when the first memory they counted expires).
Generations only grow: an entry is never replaced by one derived at an older generation.

Bounded: the least recently used entries go first, past a number of entries or a total
weight (an entry of term counts weighs as many terms as it holds).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TypeAlias, TypeVar

# A user whose writes can change an entry (tenant, user_id); None: anyone's.
Owner: TypeAlias = "tuple[str, str] | None"
# The store's `generation` (VectorStore.generation): of one user, or of every write.
Generation: TypeAlias = "Callable[[str | None, str | None], int | None]"
V = TypeVar("V")

MAX_ENTRIES = 8192
# ~100 bytes per unit (a term count): a bound on memory whatever filters callers send.
MAX_WEIGHT = 200_000


@dataclass(frozen=True, slots=True)
class Held:
    """An entry as kept: its key, value, weight and clock window."""

    key: Hashable
    value: object
    weight: int = 1
    since: float = -math.inf
    until: float = math.inf


@dataclass(slots=True)
class _Entry:
    generation: int
    value: object
    weight: int
    # The clock window the value holds in (term counts: until the first counted expiry).
    since: float
    until: float


class DerivedCache:
    """One cache for every value derived from a user's points; safe to use from several
    threads (the term counts are read in a worker thread)."""

    def __init__(
        self, generation: Generation, max_entries: int = MAX_ENTRIES, max_weight: int = MAX_WEIGHT
    ) -> None:
        self._generation = generation
        self._entries: OrderedDict[tuple[Owner, Hashable], _Entry] = OrderedDict()
        # Each owner's keys (in `_entries`), so that a write finds its user's entries.
        self._keys: dict[Owner, dict[Hashable, None]] = {}
        self._lock = threading.Lock()
        self._max_entries = max_entries
        self._max_weight = max_weight
        self._weight = 0

    def generation(self, owner: Owner) -> int | None:
        """The store's generation for `owner` (every write when None): read it before
        deriving a value from the store, and keep the value with it."""
        return self._generation(*owner) if owner else self._generation(None, None)

    def get(self, owner: Owner, key: Hashable, kind: type[V], at: float = math.nan) -> V | None:
        """The value kept for (`owner`, `key`) if it still holds (its owner's generation
        has not moved; the clock `at`, when given, is inside its window), else None."""
        generation = self.generation(owner)
        if generation is None:
            return None
        with self._lock:
            entry = self._entries.get((owner, key))
            if entry is None:
                return None
            value = entry.value
            within = math.isnan(at) or entry.since <= at < entry.until
            if entry.generation != generation or not within or not isinstance(value, kind):
                self._drop((owner, key))
                return None
            self._entries.move_to_end((owner, key))
            return value

    def keep(
        self,
        owner: Owner,
        key: Hashable,
        value: object,
        generation: int | None,
        *,
        weight: int = 1,
        since: float = -math.inf,
        until: float = math.inf,
    ) -> None:
        """Keep `value`, derived from the store at `generation` (read before the store
        was), for the clock window [since, until); nothing when `generation` is None."""
        if generation is None:
            return
        with self._lock:
            held = self._entries.get((owner, key))
            if held is not None and held.generation > generation:
                return  # derived after a later write already (a read racing a write)
            self._drop((owner, key))
            self._entries[(owner, key)] = _Entry(generation, value, weight, since, until)
            self._keys.setdefault(owner, {})[key] = None
            self._weight += weight
            while len(self._entries) > 1 and (
                len(self._entries) > self._max_entries or self._weight > self._max_weight
            ):
                self._drop(next(iter(self._entries)))

    def held(self, owner: Owner) -> tuple[int | None, list[Held]]:
        """The owner's generation and the entries that hold at it (whatever their clock
        window): read before a write, to carry them through it (`carry_written`). The
        values are never changed in place (a reader copies an entry to add to it), so
        they stay what they were before the write."""
        generation = self.generation(owner)
        if generation is None:
            return None, []
        with self._lock:
            entries = [(k, self._entries[(owner, k)]) for k in self._keys.get(owner, ())]
            return generation, [
                Held(k, e.value, e.weight, e.since, e.until)
                for k, e in entries
                if e.generation == generation
            ]

    def carry_written(self, owner: Owner, entries: Sequence[Held], before: int | None) -> None:
        """Keep `entries` (`held` before one write, at generation `before`, and updated with
        what that write did) at the generation the write made, when it alone moved it (by
        one): after any other write they could be wrong, and are left to lapse."""
        now = self.generation(owner)
        if before is None or now != before + 1:
            return
        for e in entries:
            self.keep(owner, e.key, e.value, now, weight=e.weight, since=e.since, until=e.until)

    def keep_written(
        self, owner: Owner, values: Sequence[tuple[Hashable, object]], before: int | None
    ) -> None:
        """Keep `values`, derived from one write (what it placed); `before` is the owner's
        generation read before that write. Kept only when that write alone moved it (by
        one): another write meanwhile may have placed something after them."""
        now = self.generation(owner)
        if before is None or now != before + 1:
            return
        for key, value in values:
            self.keep(owner, key, value, now)

    def _drop(self, key: tuple[Owner, Hashable]) -> None:
        held = self._entries.pop(key, None)
        if held is not None:
            self._weight -= held.weight
            owner, inner = key
            keys = self._keys.get(owner)
            if keys is not None:
                keys.pop(inner, None)
                if not keys:
                    del self._keys[owner]

    @property
    def weight(self) -> int:
        return self._weight

    def __len__(self) -> int:
        return len(self._entries)
