"""Each user's keyword terms of their own: the store's BM25 term ids shifted by the user.

A common word's sparse postings and its `term_ids` postings held every user's memories of
it, so a heavy user's keyword search and IDF counts walked everyone's postings of the
query's common words before the user filter dropped them. Here the ids a store holds are
the user's own (ADR 0601): each is the encoder's id plus a 32-bit salt of (tenant, user),
modulo 2^32. A shift is one to one, so a user's terms stay distinct; a posting list holds
one user's memories (and, rarely, another user's memory of another term whose shifted id
collides: the user filter drops it, and it adds one to that term's engine IDF count at
most).

`UserTermSpace` wraps a `VectorStore` and is one itself: the core above it works with the
encoder's ids only. Writes shift a point's sparse vector and `term_ids` by the point's
owner (its payload's tenant and user_id); keyword searches and `count_each` over
`term_ids` shift the query's ids by the filter's owner, which they must name; every point
read back is shifted back. The engine's IDF then counts only the user's own memories of
a term; a keyword search weighs each query term back to the IDF over every user of the
tenant, from the counts `TenantTerms` keeps (the ranking of a space shared by the
tenant's users: ADR 0601's addendums; never another tenant's counts).
The store's metadata says which space its ids are in
(`TERM_SPACE_KEY`): stores created before it keep the shared space until `memoryd
reindex` rewrites them.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import lru_cache, partial
from typing import Any

from memoryd.core.memory.tenant_terms import (
    Part,
    TenantParts,
    TenantTerms,
    UserPart,
    Written,
    bm25_idf,
)
from memoryd.core.memory.term_counts import owner_of, payload_owner
from memoryd.stores.vectors.port import (
    TERMS_FIELD,
    Filter,
    FilterScalar,
    IsEmpty,
    MatchValue,
    RrfParams,
    ScoredPoint,
    SparseVector,
    StoredPoint,
    VectorPoint,
    VectorStore,
    WithVectors,
    every_page,
)

__all__ = [
    "SHARED",
    "TERM_SPACE_KEY",
    "USER",
    "UserTermSpace",
    "in_term_space",
    "salt_of",
]

# The store metadata key, and its two values: one id space for everyone (stores created
# before ADR 0601) or each user's own.
TERM_SPACE_KEY = "term_space"
SHARED = "shared"
USER = "user"

_MASK = 0xFFFFFFFF
# Users whose own document frequencies are kept (carried through their writes), and the terms
# kept per user before their entry starts over.
MAX_USERS = 4_096
MAX_USER_TERMS = 20_000
# A user with this many points has their terms counted from the term index (`facet`);
# a smaller one, from their points (cheaper below it, measured at 1M points).
FACET_FROM = 3_000


@lru_cache(maxsize=65_536)
def salt_of(tenant: str, user_id: str) -> int:
    """The shift of (tenant, user_id)'s term ids: stable across processes and versions."""
    digest = hashlib.blake2b(f"{tenant}\x1f{user_id}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


def _shift(ids: Sequence[int], salt: int) -> list[int]:
    return [(int(i) + salt) & _MASK for i in ids]


def _payload_salt(payload: Mapping[str, Any]) -> int | None:
    owner = payload_owner(payload)
    return None if owner is None else salt_of(*owner)


def _filter_salt(flt: Filter | None, what: str) -> int:
    owner = None if flt is None else owner_of(flt)
    if owner is None:
        raise ValueError(f"{what} over term ids needs a filter naming its tenant and user_id")
    return salt_of(*owner)


def _unshift_payload(payload: dict[str, Any]) -> int | None:
    """Shifts `payload`'s term ids back in place; returns the salt (None: not shifted)."""
    salt = _payload_salt(payload)
    terms = payload.get(TERMS_FIELD)
    if salt is not None and isinstance(terms, list):
        payload[TERMS_FIELD] = _shift(terms, -salt)
    return salt


class UserTermSpace:
    """A `VectorStore` whose term ids are each user's own; the ids above it are the
    encoder's (module docstring).

    A keyword search weighs each query term by the tenant's IDF over the engine's: the
    engine's IDF here counts only the user's memories of a term (over the whole
    collection's size), and the ranking is better with every user's (ADR 0601); only the
    tenant's, so that no other tenant's data moves it. The tenant's counts come from
    `TenantTerms`; the user's, from a count of the user's own postings, kept and
    carried through the user's writes."""

    def __init__(self, store: VectorStore) -> None:
        self._store = store
        self.terms = TenantTerms(self._count_tenants_terms, self._count_with_terms)
        self._user_df: OrderedDict[tuple[str, str], tuple[int, dict[int, int]]] = OrderedDict()
        self._user_df_lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self._store.dim

    @property
    def collection(self) -> str:
        return self._store.collection

    def generation(self, tenant: str | None = None, user_id: str | None = None) -> int | None:
        return self._store.generation(tenant, user_id)

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        shifted = [_shifted(p) for p in points]
        owners = _owners(p.payload for p in points)
        with self._user_df_lock:
            kept = {o: self._user_df[o] for o in owners if o in self._user_df}
        before = {o: self._store.generation(*o) for o in kept}
        with self.terms.writing(owners):
            # What the write replaces, read first: the counts lose its terms (by id: cheap).
            replaced = self.retrieve([p.id for p in points])
            self._store.upsert(shifted)
            self.terms.changed(_written(points), _written(replaced))
        # A user whose own frequencies are kept: carried through the write, so that the
        # user's next question needs no count.
        for o, (generation, known) in kept.items():
            then, after = before[o], self._store.generation(*o)
            if then is None or after is None or generation != then or after != then + 1:
                continue  # another write moved it meanwhile: counted again when asked
            carried = dict(known)
            for sign, written in ((-1, replaced), (1, points)):
                for point in written:
                    if payload_owner(point.payload) == o:
                        for term in set(_terms_of(point.payload)):
                            if term in carried:
                                carried[term] += sign
            with self._user_df_lock:
                now = self._user_df.get(o)
                if now is not None and now[0] == generation and now[1] is known:
                    self._user_df[o] = (after, carried)

    def retrieve(
        self, ids: Sequence[str], *, with_vectors: WithVectors = False
    ) -> list[StoredPoint]:
        return [_unshifted(p) for p in self._store.retrieve(ids, with_vectors=with_vectors)]

    def delete(self, ids: Sequence[str]) -> None:
        gone = self.retrieve(ids)
        with self.terms.writing(_owners(p.payload for p in gone)):
            self._store.delete(ids)
            self.terms.changed([], _written(gone))

    def delete_where(self, filter: Filter) -> int:
        deleted = self._store.delete_where(filter)
        self.terms.removed(deleted)
        return deleted

    def set_payload(self, ids: Sequence[str], patch: Mapping[str, Any]) -> None:
        if TERMS_FIELD in patch or "tenant" in patch or "user_id" in patch:
            # Term ids are shifted by their point's owner: they change with a whole upsert.
            raise ValueError(f"set_payload cannot change {TERMS_FIELD}, tenant or user_id")
        self._store.set_payload(ids, patch)

    def count(self, filter: Filter | None = None) -> int:
        return self._store.count(filter)

    def count_each(self, filter: Filter, field: str, values: Sequence[int]) -> list[int]:
        if field == TERMS_FIELD:
            values = _shift(values, _filter_salt(filter, "count_each"))
        return self._store.count_each(filter, field, values)

    def facet(self, filter: Filter | None, field: str) -> dict[FilterScalar, int]:
        counts = self._store.facet(filter, field)
        if field != TERMS_FIELD:
            return counts
        salt = _filter_salt(filter, "facet")
        return {(int(v) - salt) & _MASK: n for v, n in counts.items()}

    def scroll(
        self,
        filter: Filter | None = None,
        *,
        limit: int = 100,
        offset: str | None = None,
        order_by: str | None = None,
        descending: bool = False,
        with_vectors: WithVectors = False,
        fields: Sequence[str] | None = None,
    ) -> tuple[list[StoredPoint], str | None]:
        points, after = self._store.scroll(
            filter,
            limit=limit,
            offset=offset,
            order_by=order_by,
            descending=descending,
            with_vectors=with_vectors,
            fields=None if fields is None else [*fields, TERMS_FIELD, "tenant", "user_id"],
        )
        return [_unshifted(p) for p in points], after

    def search(
        self,
        filter: Filter | None = None,
        *,
        dense: Sequence[float] | None = None,
        sparse: SparseVector | None = None,
        limit: int = 10,
        fusion: RrfParams | None = None,
        with_vectors: bool = False,
    ) -> list[ScoredPoint]:
        if sparse is not None and not sparse.is_empty:
            salt = _filter_salt(filter, "a keyword search")
            weights = self._weights(filter, sparse.indices)
            values = sparse.values
            if weights is not None:
                values = [v * w for v, w in zip(values, weights, strict=True)]
            sparse = SparseVector(_shift(sparse.indices, salt), values)
        hits = self._store.search(
            filter,
            dense=dense,
            sparse=sparse,
            limit=limit,
            fusion=fusion,
            with_vectors=with_vectors,
        )
        for hit in hits:
            _unshift_payload(hit.payload)
        return hits

    def read_meta(self) -> dict[str, Any] | None:
        return self._store.read_meta()

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        self._store.write_meta(meta)

    def flush(self) -> None:
        self._store.flush()

    def healthy(self) -> bool:
        return self._store.healthy()

    def close(self) -> None:
        self.terms.close()
        self._store.close()

    # ------------------------------------------------------------------ keyword weights

    def _weights(self, flt: Filter | None, terms: Sequence[int]) -> list[float] | None:
        """Each query term's IDF over the tenant's memories over the engine's (the user's
        over the store's size); None: no statistics yet (the engine's IDF alone)."""
        owner = None if flt is None else owner_of(flt)
        if owner is None:
            return None
        tenant = self.terms.frequencies(owner[0], terms)
        if tenant is None:
            return None
        mine = self._user_frequencies(owner, terms)
        # The tenant holds at least the user's own (a sample may have missed a rare term:
        # this bound keeps a user's distinctive words rare, as they are). The engine's
        # size cancels out: another tenant's writes change nothing here.
        return [
            bm25_idf(max(tenant.points, m), max(n, m)) / bm25_idf(max(tenant.store_points, m), m)
            if m > 0
            else 1.0
            for n, m in zip(tenant.df, mine, strict=True)
        ]

    def _user_frequencies(self, owner: tuple[str, str], terms: Sequence[int]) -> list[int]:
        """How many of the owner's points hold each term (what the engine's IDF counts):
        their own postings, kept while the store's generation of the owner holds."""
        generation = self._store.generation(*owner)  # before the count (derived.py)
        with self._user_df_lock:
            held = self._user_df.get(owner)
            known = held[1] if held is not None and held[0] == generation else {}
        missing = [t for t in dict.fromkeys(terms) if t not in known]
        if missing:
            counted = self._store.count_each(
                _owner_filter(owner), TERMS_FIELD, _shift(missing, salt_of(*owner))
            )
            known = {**known, **dict(zip(missing, counted, strict=True))}
            if generation is not None and len(known) <= MAX_USER_TERMS:
                with self._user_df_lock:
                    self._user_df[owner] = (generation, known)
                    self._user_df.move_to_end(owner)
                    while len(self._user_df) > MAX_USERS:
                        self._user_df.popitem(last=False)
        return [known[t] for t in terms]

    def _count_tenants_terms(self) -> Iterator[TenantParts]:
        """Each tenant's users' parts, tenants in random order (a prefix of them is a
        sample)."""
        tenants = [str(t) for t in self._store.facet(None, "tenant")]
        random.shuffle(tenants)
        for tenant in tenants:
            yield tenant, self._count_users_terms(tenant)

    def _count_users_terms(self, tenant: str) -> Iterator[UserPart]:
        """Each of the tenant's users, in random order (a prefix of them is a sample), with
        how to read their term frequencies."""
        users = list(self._store.facet(_tenant_filter(tenant), "user_id").items())
        random.shuffle(users)
        for user, points in users:
            yield str(user), partial(self._user_terms, (tenant, str(user)), points)

    def _user_terms(self, owner: tuple[str, str], points: int) -> Part:
        """The owner's points holding a term, and how many hold each (the encoder's ids):
        from the term index (`facet`: ~10 µs a point, but ~30 ms whatever the user's size
        at 1M points) or, for a small user, from a scroll of their points' terms (~50 µs a
        point)."""
        only_owner = _owner_filter(owner)
        if points >= FACET_FROM:
            df = self.facet(only_owner, TERMS_FIELD)
            held = self._store.count(_with_terms(only_owner))
            return held, {int(t): n for t, n in df.items()}
        counted: Counter[int] = Counter()
        held = 0
        for page in every_page(self, only_owner, limit=1000, fields=[]):
            for point in page:
                terms = _terms_of(point.payload)
                if terms:
                    held += 1
                    counted.update(terms)
        return held, counted

    def _count_with_terms(self, tenant: str | None) -> int:
        return self._store.count(_with_terms(None if tenant is None else _tenant_filter(tenant)))


def _tenant_filter(tenant: str) -> Filter:
    return Filter(must=[MatchValue("tenant", tenant)])


def _owner_filter(owner: tuple[str, str]) -> Filter:
    return Filter(must=[MatchValue("tenant", owner[0]), MatchValue("user_id", owner[1])])


def _with_terms(flt: Filter | None) -> Filter:
    """`flt`'s points that hold a term (what the engine's IDF counts)."""
    return Filter(must=[] if flt is None else [flt], must_not=[IsEmpty(TERMS_FIELD)])


def _owners(payloads: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    return {o for p in payloads if (o := payload_owner(p)) is not None}


def _written(points: Iterable[VectorPoint | StoredPoint]) -> list[Written]:
    """Each point's tenant, user and term ids, as `TenantTerms` counts them."""
    return [(*(payload_owner(p.payload) or ("", "")), _terms_of(p.payload)) for p in points]


def _terms_of(payload: Mapping[str, Any]) -> Sequence[int]:
    terms = payload.get(TERMS_FIELD)
    return terms if isinstance(terms, list) else ()


def _shifted(point: VectorPoint) -> VectorPoint:
    salt = _payload_salt(point.payload)
    if salt is None:
        raise ValueError(f"point {point.id} names no tenant and user_id: its terms have no space")
    payload = dict(point.payload)
    terms = payload.get(TERMS_FIELD)
    if isinstance(terms, list):
        payload[TERMS_FIELD] = _shift(terms, salt)
    sparse = point.sparse
    if sparse is not None:
        sparse = SparseVector(_shift(sparse.indices, salt), sparse.values)
    return replace(point, sparse=sparse, payload=payload)


def _unshifted(point: StoredPoint) -> StoredPoint:
    salt = _unshift_payload(point.payload)
    if salt is None or point.sparse is None:
        return point
    return replace(
        point, sparse=SparseVector(_shift(point.sparse.indices, -salt), point.sparse.values)
    )


def in_term_space(store: VectorStore, meta: Mapping[str, Any]) -> VectorStore:
    """`store` as the core sees it: wrapped when its metadata puts its ids in the users'
    own space."""
    return UserTermSpace(store) if meta.get(TERM_SPACE_KEY) == USER else store
