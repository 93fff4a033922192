"""Per-user BM25 counts, kept between queries while nothing they count can have changed.

The per-user IDF of a query term (ADR 0400) needs two counts from the store: how many
memories the query's filter selects, and how many of those hold the term. Each count
walks the user's points in the engine (about 2 ms for 10,000 on qdrant-edge, whatever
the term), and they were made for every query. So the counts of each filter are kept in
the cache of what is derived from a user's points (`derived.DerivedCache`: until the
user's store generation moves) and reused while they are provably the same:

* no write has touched the filter's user since they were read (the cache's rule);
* no memory they counted has expired since: an entry holds until the first expiry among
  the memories it counted (the filter's own clock);
* the filter is the same, its clock (the live condition `expires_at > now`) aside.

Terms are counted when first asked for and added to the entry, so a user's common words
are counted once per change of the store. The numbers are those the store would give for
the same filter at the same moment: rankings do not change. A filter found empty is kept
the same way (counts with none live), so the next query of an empty tier makes no store
call until the user's next write.

A write that only adds new points (an Add: `VectorMemory.insert(..., fresh=True)`) does not
void the user's counts: each is carried through it (`carried`), the new points it selects
added (live + 1; each counted term the point holds + 1; the window ends at the point's
expiry if that comes first), as `filter_eval.selects` decides. What it cannot decide, and
every other write (deletes, updates of existing points), voids them as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from memoryd.core.memory.derived import DerivedCache, Held, Owner
from memoryd.core.memory.filter_eval import selects
from memoryd.core.memory.tenant_terms import bm25_idf
from memoryd.stores.vectors.port import (
    TERMS_FIELD,
    Filter,
    IsEmpty,
    MatchValue,
    Range,
    VectorStore,
)

# The terms kept per filter before its entry starts over.
MAX_TERMS = 20_000
# The terms a write copies (on the event loop) to carry a user's counts through it: about
# 0.1 ms; a user with more counted than that gets the rest counted again.
MAX_CARRIED_TERMS = 20_000
EXPIRES_FIELD = "expires_at"


@dataclass
class Counts:
    """The counts of one filter: how many memories it selects (`live`) and how many of
    them hold each term counted so far (`df`). They hold for a clock (the filter's) in
    [counted_at, valid_until): until the first of the counted memories expires. Never
    changed once kept (a thread may be reading it, a write carrying it): copied instead.

    `selects` is the filter less its live condition (None: not known), to tell whether a
    new point counts."""

    counted_at: float
    valid_until: float
    live: int
    df: dict[int, int] = field(default_factory=dict)
    selects: Filter | None = None

    def idf(
        self, terms: Sequence[int], df: Mapping[int, int] | None = None
    ) -> dict[int, float] | None:
        """Each term's BM25 IDF (as Qdrant's IDF modifier computes it) from `df`, else from
        the entry's own counts; None if a term is not counted."""
        frequencies = self.df if df is None else df
        live = self.live
        idf = {}
        for term in terms:
            n = frequencies.get(term)
            if n is None:
                return None
            idf[term] = bm25_idf(live, n)
        return idf

    def with_inserted(self, points: Sequence[tuple[str, Mapping[str, Any]]]) -> Counts | None:
        """These counts after `points` (id, payload as stored) were added to the store,
        none of them replacing a point; None when that cannot be told here."""
        if self.selects is None:
            return None
        live, df, until = self.live, dict(self.df), self.valid_until
        for point_id, payload in points:
            chosen = selects(self.selects, point_id, payload)
            if chosen is None:
                return None
            expires = payload.get(EXPIRES_FIELD)
            if expires is not None and (
                isinstance(expires, bool) or not isinstance(expires, int | float)
            ):
                return None
            # Live at no clock the counts hold for: counted by none of them.
            if not chosen or (expires is not None and expires <= self.counted_at):
                continue
            terms = payload.get(TERMS_FIELD, [])
            if not isinstance(terms, list) or not all(type(t) is int for t in terms):
                return None
            live += 1
            for term in set(terms):
                if term in df:
                    df[term] += 1
            if expires is not None:
                until = min(until, float(expires))
        return replace(self, valid_until=until, live=live, df=df)


def carried(held: Sequence[Held], points: Sequence[tuple[str, Mapping[str, Any]]]) -> list[Held]:
    """The counts among `held` (a user's entries before a write) after the write added
    `points` (id, payload as stored) and replaced none; those that cannot be told, or past
    MAX_CARRIED_TERMS, are left out (they lapse with the write, as any entry of another
    kind)."""
    after = []
    budget = MAX_CARRIED_TERMS
    for entry in held:
        value = entry.value
        if not isinstance(value, Counts) or len(value.df) > budget:
            continue
        budget -= len(value.df)
        updated = value.with_inserted(points)
        if updated is not None:
            weight = 1 + len(updated.df)
            after.append(Held(entry.key, updated, weight, updated.counted_at, updated.valid_until))
    return after


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


def selecting(flt: Filter) -> Filter | None:
    """`flt` without its live condition (what a new point must meet besides being live at
    the counts' clock); None when it has more than one."""
    rest = [c for c in flt.must if _clock_of(c) is None]
    if len(flt.must) - len(rest) > 1:
        return None
    return Filter(must=rest, should=flt.should, must_not=flt.must_not)


def payload_owner(payload: Mapping[str, Any]) -> tuple[str, str] | None:
    """The (tenant, user_id) a stored point's payload belongs to, if it names both."""
    tenant, user = payload.get("tenant"), payload.get("user_id")
    return (tenant, user) if isinstance(tenant, str) and isinstance(user, str) else None


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
    """The counts of each filter, read from `store` and kept in `cache`."""

    def __init__(self, store: VectorStore, cache: DerivedCache, max_terms: int = MAX_TERMS) -> None:
        self._store = store
        self._cache = cache
        self._max_terms = max_terms

    def known(self, flt: Filter) -> Counts | None:
        """The counts kept for `flt`, if nothing they count has changed since (no store
        call: cheap enough for the event loop)."""
        key, now = key_of(flt)
        return self._cache.get(owner_of(flt), ("counts", key), Counts, now)

    def generation(self, flt: Filter) -> int | None:
        return self._cache.generation(owner_of(flt))

    def found_empty(self, flt: Filter, generation: int | None) -> None:
        """`flt` selected no memory when read at `generation`."""
        key, now = key_of(flt)
        self._keep(owner_of(flt), key, Counts(now, math.inf, 0, selects=selecting(flt)), generation)

    def idf(self, flt: Filter, terms: Sequence[int]) -> dict[int, float]:
        """BM25 inverse document frequency of each query term among the memories `flt`
        selects (this user's, so other users' words never weigh on the ranking): counted
        in the store as far as the counts kept for `flt` do not hold them. Blocking: the
        store is called directly (run it in a worker thread)."""
        key, now = key_of(flt)
        owner = owner_of(flt)
        # Read before counting: a write landing meanwhile moves it, and what was counted
        # is then never kept.
        generation = self._cache.generation(owner)
        entry = self._cache.get(owner, ("counts", key), Counts, now)
        if entry is None:
            live = self._store.count(flt)
            # The first of the counted memories to expire ends the counts' validity.
            expiring, _ = self._store.scroll(flt, limit=1, order_by=EXPIRES_FIELD)
            first = expiring[0].payload.get(EXPIRES_FIELD) if expiring else None
            until = float(first) if isinstance(first, int | float) else math.inf
            entry = Counts(now, until, live, selects=selecting(flt))
        known = {t: n for t in terms if (n := entry.df.get(t)) is not None}
        missing = [t for t in terms if t not in known]
        if missing:
            counted = self._store.count_each(flt, TERMS_FIELD, missing)
            known.update(zip(missing, counted, strict=True))
            # A copy: the kept entry may be read, or carried through a write, meanwhile.
            df = {} if len(entry.df) + len(missing) > self._max_terms else dict(entry.df)
            df.update(zip(missing, counted, strict=True))
            entry = replace(entry, df=df)
        self._keep(owner, key, entry, generation)
        idf = entry.idf(terms, known)
        assert idf is not None  # every term is in `known`
        return idf

    def _keep(self, owner: Owner, key: str, entry: Counts, generation: int | None) -> None:
        self._cache.keep(
            owner,
            ("counts", key),
            entry,
            generation,
            weight=1 + len(entry.df),
            since=entry.counted_at,
            until=entry.valid_until,
        )
