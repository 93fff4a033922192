"""Each user's keyword terms of their own: the store's BM25 term ids shifted by the user.

A common word's sparse postings and its `term_ids` postings held every user's memories of
it, so a heavy user's keyword search and IDF counts walked everyone's postings of the
query's common words before the user filter dropped them, and the engine's IDF of a term
(`Modifier.IDF`) counted every user's memories: one user's writes moved another's
keyword ranking. Here the ids a store holds are the user's own (ADR 0601): each is the
encoder's id plus a 32-bit salt of (tenant, user), modulo 2^32. A shift is one to one,
so a user's terms stay distinct; a posting list holds one user's memories (and, rarely,
another user's memory of another term whose shifted id collides: the user filter drops
it, and it adds one to that term's engine IDF count at most).

`UserTermSpace` wraps a `VectorStore` and is one itself: the core above it works with the
encoder's ids only. Writes shift a point's sparse vector and `term_ids` by the point's
owner (its payload's tenant and user_id); keyword searches and `count_each` over
`term_ids` shift the query's ids by the filter's owner, which they must name; every point
read back is shifted back. The store's metadata says which space its ids are in
(`TERM_SPACE_KEY`): stores created before it keep the shared space until `memoryd
reindex` rewrites them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

from memoryd.core.memory.term_counts import owner_of
from memoryd.stores.vectors.port import (
    TERMS_FIELD,
    Filter,
    RrfParams,
    ScoredPoint,
    SparseVector,
    StoredPoint,
    VectorPoint,
    VectorStore,
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


@lru_cache(maxsize=65_536)
def salt_of(tenant: str, user_id: str) -> int:
    """The shift of (tenant, user_id)'s term ids: stable across processes and versions."""
    digest = hashlib.blake2b(f"{tenant}\x1f{user_id}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


def _shift(ids: Sequence[int], salt: int) -> list[int]:
    return [(int(i) + salt) & _MASK for i in ids]


def _payload_salt(payload: Mapping[str, Any]) -> int | None:
    tenant, user = payload.get("tenant"), payload.get("user_id")
    return salt_of(tenant, user) if isinstance(tenant, str) and isinstance(user, str) else None


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
    encoder's (module docstring)."""

    def __init__(self, store: VectorStore) -> None:
        self._store = store

    @property
    def dim(self) -> int:
        return self._store.dim

    @property
    def collection(self) -> str:
        return self._store.collection

    def generation(self, tenant: str | None = None, user_id: str | None = None) -> int | None:
        return self._store.generation(tenant, user_id)

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        self._store.upsert([_shifted(p) for p in points])

    def retrieve(self, ids: Sequence[str], *, with_vectors: bool = False) -> list[StoredPoint]:
        return [_unshifted(p) for p in self._store.retrieve(ids, with_vectors=with_vectors)]

    def delete(self, ids: Sequence[str]) -> None:
        self._store.delete(ids)

    def delete_where(self, filter: Filter) -> int:
        return self._store.delete_where(filter)

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

    def scroll(
        self,
        filter: Filter | None = None,
        *,
        limit: int = 100,
        offset: str | None = None,
        order_by: str | None = None,
        descending: bool = False,
        with_vectors: bool = False,
    ) -> tuple[list[StoredPoint], str | None]:
        points, after = self._store.scroll(
            filter,
            limit=limit,
            offset=offset,
            order_by=order_by,
            descending=descending,
            with_vectors=with_vectors,
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
            sparse = SparseVector(_shift(sparse.indices, salt), sparse.values)
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
        self._store.close()


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
