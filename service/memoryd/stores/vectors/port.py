"""The vector store port: what the core needs from a vector engine, in store-neutral terms.

The core knows nothing of Qdrant. It speaks in `VectorPoint`s, a small `Filter` language
and `RrfParams`; each adapter translates these into its own engine's model. Every method
is synchronous and blocking: the core calls adapters from worker threads
(`asyncio.to_thread`), so adapters must be safe to call from several threads at once. (An
adapter whose searches keep the GIL throughout says so with its own optional trait,
`searches_keep_the_gil`; the core then runs its searches on the event loop.)

Conventions shared by every adapter (the contract tests pin them down):

* One collection with a named dense vector ``dense`` (cosine) and a named sparse vector
  ``bm25`` whose query-time IDF is applied by the engine (Qdrant ``Modifier.IDF``).
* Point ids are UUID strings; adapters return them in canonical lowercase form.
* Timestamps in payloads are float epoch seconds; ``PAYLOAD_INDEXES`` lists the indexed
  fields. Only float-indexed fields can be used as a scroll ``order_by`` key.
* Scores are the engine's raw scores: cosine similarity for dense-only search, the
  IDF-weighted dot product for sparse-only search, and the reciprocal-rank-fusion score
  (see `rrf_contribution`) for hybrid search. Normalising to 0..1 is the core's job.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

DENSE_VECTOR = "dense"
SPARSE_VECTOR = "bm25"
# Payload field holding a memory's distinct BM25 term ids (integers), so that the core
# can count how many of a user's memories hold a query term (per-user IDF).
TERMS_FIELD = "term_ids"
# What a read returns of each point's vectors: none (False), both (True), or the dense one
# only ("dense": what ranking reads; it skips building the sparse vector of every point).
WithVectors: TypeAlias = bool | Literal["dense"]
# The most distinct values one `facet` returns (a user's vocabulary is far below it).
MAX_FACET_VALUES = 1_000_000
# A dense vector read back from a store: float32, as the engines hold it (no per-element
# conversion to Python floats; the core computes with it as it is).
DenseVector: TypeAlias = npt.NDArray[np.float32]


class IndexKind(enum.Enum):
    """How a payload field is indexed."""

    TENANT_KEYWORD = "tenant_keyword"  # keyword index with is_tenant=True
    KEYWORD = "keyword"
    INTEGER = "integer"  # exact-match lookups only
    FLOAT = "float"
    BOOL = "bool"


# Immutable on purpose: adapters create exactly these indexes when they open a collection.
# Each costs RAM on every point (~0.15 KiB per memory for a keyword index, whatever its
# values), so a field is indexed only where a filter without it reads many payloads:
# `tier` and `deleted` are in every tier's filter, `content_hash` in every Add's dedup,
# `session_id` in the last-turn lookup across a store. `kind`, `key`, `agent_id`,
# `task_id` and `updated_at` are not (ADR 0600, "index set"): their filters always name a
# user, whose own points are few enough to check.
PAYLOAD_INDEXES: tuple[tuple[str, IndexKind], ...] = (
    ("tenant", IndexKind.TENANT_KEYWORD),
    ("user_id", IndexKind.TENANT_KEYWORD),
    ("tier", IndexKind.KEYWORD),
    ("content_hash", IndexKind.KEYWORD),
    ("session_id", IndexKind.KEYWORD),
    # Tenant, user, session and position of a turn in one key (core/memory/payload.py).
    ("turn", IndexKind.KEYWORD),
    (TERMS_FIELD, IndexKind.INTEGER),
    ("created_at", IndexKind.FLOAT),
    ("expires_at", IndexKind.FLOAT),
    # When a memory was said or happened (temporal queries), and its place in its session
    # (float so that the last position can be found by an ordered scroll).
    ("occurred_at", IndexKind.FLOAT),
    ("position", IndexKind.FLOAT),
    ("deleted", IndexKind.BOOL),
)

# Qdrant can only order a scroll by a field with a range-capable index.
ORDERABLE_FIELDS: frozenset[str] = frozenset(
    name for name, kind in PAYLOAD_INDEXES if kind is IndexKind.FLOAT
)


# --------------------------------------------------------------------------- errors


class VectorStoreError(Exception):
    """The vector engine failed an operation."""


class VectorStoreUnavailable(VectorStoreError):
    """The vector engine cannot be reached (server down, network error)."""


class StoreClosedError(VectorStoreUnavailable):
    """The store was closed; no further operations are possible."""


class IncompatibleStoreError(VectorStoreError):
    """The existing collection was built with a different configuration (e.g. dimension)."""


# --------------------------------------------------------------------------- points


@dataclass(frozen=True, slots=True)
class SparseVector:
    """A sparse vector: parallel lists of term indices and their weights."""

    indices: Sequence[int]
    values: Sequence[float]

    def __post_init__(self) -> None:
        if len(self.indices) != len(self.values):
            raise ValueError("sparse vector indices and values differ in length")
        if len(set(self.indices)) != len(self.indices):
            raise ValueError("sparse vector indices must be unique")
        if any(i < 0 for i in self.indices):
            raise ValueError("sparse vector indices must be non-negative")

    @property
    def is_empty(self) -> bool:
        return len(self.indices) == 0


@dataclass(frozen=True, slots=True)
class VectorPoint:
    """A point to upsert."""

    id: str
    dense: Sequence[float] | DenseVector
    sparse: SparseVector | None = None
    payload: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StoredPoint:
    """A point read back from the store. Vectors are present only when asked for.

    Cosine collections store dense vectors normalised to unit length, so ``dense`` is the
    normalised form of what was upserted.
    """

    id: str
    payload: dict[str, Any]
    dense: DenseVector | None = None
    sparse: SparseVector | None = None


@dataclass(frozen=True, slots=True)
class ScoredPoint:
    """A search hit."""

    id: str
    score: float
    payload: dict[str, Any]
    dense_vector: DenseVector | None = None


# --------------------------------------------------------------------------- fusion


def rrf_contribution(rank: int, weight: float, k: int) -> float:
    """Score one source adds for a point at 0-based ``rank``, as Qdrant computes it.

    Qdrant's weighted RRF is ``1 / ((rank + 1) / weight + k - 1)``; with weight 1 it is
    the classic ``1 / (k + rank)`` (0-based rank). Both adapters get exactly this from
    their engine; it is exposed so the core can normalise fused scores.
    """
    return 1.0 / ((rank + 1) / weight + k - 1)


@dataclass(frozen=True, slots=True)
class RrfParams:
    """Reciprocal rank fusion of the dense and sparse prefetches.

    ``prefetch_limit`` is how many candidates each source contributes before fusion;
    ``None`` means ``max(3 * limit, 30)``.
    """

    k: int = 60
    dense_weight: float = 1.0
    sparse_weight: float = 1.0
    prefetch_limit: int | None = None

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError("RRF k must be >= 1")
        if self.dense_weight <= 0 or self.sparse_weight <= 0:
            raise ValueError("RRF weights must be > 0 (drop the query vector to disable one)")
        if self.prefetch_limit is not None and self.prefetch_limit < 1:
            raise ValueError("prefetch_limit must be >= 1")

    def prefetch_limit_for(self, limit: int) -> int:
        if self.prefetch_limit is not None:
            return self.prefetch_limit
        return max(3 * limit, 30)

    @property
    def is_unweighted(self) -> bool:
        return self.dense_weight == 1.0 and self.sparse_weight == 1.0

    def max_score(self) -> float:
        """Fused score of a point ranked first by both sources (the best possible)."""
        return rrf_contribution(0, self.dense_weight, self.k) + rrf_contribution(
            0, self.sparse_weight, self.k
        )


# --------------------------------------------------------------------------- filters

FilterScalar: TypeAlias = str | int | bool


@dataclass(frozen=True, slots=True)
class MatchValue:
    """Payload ``field`` equals ``value``. Dotted keys reach into objects: ``metadata.x``
    (see `field_path` for a key taken literally)."""

    field: str
    value: FilterScalar


@dataclass(frozen=True, slots=True)
class MatchAny:
    """Payload ``field`` equals one of ``values`` (strings or integers)."""

    field: str
    values: Sequence[str] | Sequence[int]


@dataclass(frozen=True, slots=True)
class Range:
    """Numeric range on a payload field; unset bounds are open."""

    field: str
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None

    def __post_init__(self) -> None:
        if self.gt is None and self.gte is None and self.lt is None and self.lte is None:
            raise ValueError("Range needs at least one bound")


@dataclass(frozen=True, slots=True)
class IsEmpty:
    """The field is missing, null or an empty array."""

    field: str


@dataclass(frozen=True, slots=True)
class IsNull:
    """The field is present and explicitly null."""

    field: str


@dataclass(frozen=True, slots=True)
class HasId:
    """The point id is one of ``ids``."""

    ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class Filter:
    """All of ``must``, at least one of ``should`` (if any), none of ``must_not``.

    A `Filter` is itself a condition, so groups nest: ``Filter(should=[Filter(...), ...])``.
    """

    must: Sequence[Condition] = ()
    should: Sequence[Condition] = ()
    must_not: Sequence[Condition] = ()

    @property
    def is_empty(self) -> bool:
        return not (self.must or self.should or self.must_not)

    def and_(self, *conditions: Condition) -> Filter:
        """A copy of this filter that also requires ``conditions``."""
        return Filter(must=[*self.must, *conditions], should=self.should, must_not=self.must_not)


Condition: TypeAlias = MatchValue | MatchAny | Range | IsEmpty | IsNull | HasId | Filter


def field_path(parent: str, key: str) -> str:
    """The payload path of `key` inside the object `parent`, naming the key literally: it
    is quoted, so `a.b`, `a[0]` or `2024` are keys, never a path into nested values (Qdrant
    JSON paths; both engines read quoted keys). A quoted key cannot hold `"` or `\\`."""
    if not key or '"' in key or "\\" in key:
        raise ValueError(f"payload key {key!r} cannot be named in a filter")
    return f'{parent}."{key}"'


# --------------------------------------------------------------------------- helpers


# A UUID in its canonical form (what `str(uuid.UUID(...))` gives), as engines return ids.
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def canonical_id(point_id: str) -> str:
    """The canonical UUID string for ``point_id``; raises ValueError if it is not a UUID."""
    if isinstance(point_id, str) and _CANONICAL_UUID.fullmatch(point_id):
        return point_id  # already canonical: no parse (every point read passes here)
    try:
        return str(uuid.UUID(str(point_id)))
    except ValueError:
        raise ValueError(f"point id {point_id!r} is not a UUID") from None


# --------------------------------------------------------------------------- the port


class VectorStore(Protocol):
    """A single collection of memories with dense + sparse vectors and a JSON payload."""

    @property
    def dim(self) -> int:
        """Dimension of the dense vector."""
        ...

    @property
    def collection(self) -> str: ...

    def generation(self, tenant: str | None = None, user_id: str | None = None) -> int | None:
        """A number that moves by one with every write (`upsert`, `delete`, `delete_where`,
        `set_payload`) once it is done; with `tenant` and `user_id`, with every write that
        may touch that user's points (an adapter may move it for more writes than that,
        never fewer). None when writers this handle never sees may change the collection
        (a shared server): then it promises nothing.

        Part of the port, not an adapter's performance trait: it is the store's answer to
        "has anything I read changed since?", which only the store can give (like an
        entity tag), and what the core keeps between requests is correct only through it
        (core/memory/derived.py). Every adapter can answer it (None costs nothing), and the
        contract suite checks it. Cheap and non-blocking: it may be called on the event
        loop."""
        ...

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        """Insert or replace points (whole point: vectors and payload). Durable on return."""
        ...

    def retrieve(
        self, ids: Sequence[str], *, with_vectors: WithVectors = False
    ) -> list[StoredPoint]:
        """The points with these ids, in request order; unknown ids are skipped."""
        ...

    def delete(self, ids: Sequence[str]) -> None:
        """Delete points by id; unknown ids are ignored."""
        ...

    def delete_where(self, filter: Filter) -> int:
        """Delete every point matching ``filter``; returns how many were deleted.

        Refuses an empty filter (ValueError) so a bug cannot wipe every tenant.
        """
        ...

    def set_payload(self, ids: Sequence[str], patch: Mapping[str, Any]) -> None:
        """Set top-level payload keys on existing points (a key's old value is replaced
        whole, other keys are kept); unknown ids are ignored."""
        ...

    def count(self, filter: Filter | None = None) -> int:
        """Exact number of points matching ``filter``."""
        ...

    def count_each(self, filter: Filter, field: str, values: Sequence[int]) -> list[int]:
        """For each of ``values``, the exact number of points matching ``filter`` whose
        ``field`` (an integer-indexed payload field) holds it: `count` of ``filter`` and
        `MatchValue(field, value)`, with the filter translated once."""
        ...

    def facet(self, filter: Filter | None, field: str) -> dict[FilterScalar, int]:
        """How many points matching ``filter`` hold each value of ``field`` (a keyword or
        integer payload index): every value held, counted exactly. Reads the index, not
        the payloads; refused past `MAX_FACET_VALUES` values."""
        ...

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
        """One page of matching points and an opaque token for the next page (None at end).

        Without ``order_by`` the order is by id. With ``order_by`` (a field in
        ``ORDERABLE_FIELDS``) points are ordered by that field, ascending unless
        ``descending``; points lacking the field are not returned. Pass the returned
        token back with the same filter and ordering. ``fields``: the payload keys to
        read (None: all), for a scan that needs few of them. ``with_vectors`` "dense":
        the dense vector only, for a read that ranks (no sparse vector is built).
        """
        ...

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
        """Best ``limit`` points matching ``filter``, best first.

        Dense only: cosine. Sparse only: IDF-weighted dot product (points sharing no term
        are not returned). Both: the two run as prefetches fused by RRF inside the engine
        (``fusion``, default `RrfParams()`). An empty sparse vector counts as absent (alone
        it matches nothing, so the answer is []); giving neither vector raises ValueError.
        """
        ...

    def read_meta(self) -> dict[str, Any] | None:
        """The metadata last written with `write_meta`, or None."""
        ...

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        """Replace the store metadata (JSON-compatible), e.g. embedder name and dimension."""
        ...

    def flush(self) -> None:
        """Persist everything written so far."""
        ...

    def healthy(self) -> bool:
        """Cheap liveness check; never raises."""
        ...

    def close(self) -> None:
        """Flush and release the store; idempotent. Later calls raise StoreClosedError."""
        ...


def every_page(
    store: VectorStore,
    filter: Filter | None = None,
    *,
    limit: int,
    fields: Sequence[str] | None = None,
) -> Iterator[list[StoredPoint]]:
    """Every point `filter` matches, one scroll page at a time (never all in memory); the
    next page is read once the caller is done with this one. Blocking: for worker threads
    and offline commands (`VectorMemory.points` is the event loop's)."""
    offset: str | None = None
    while True:
        points, offset = store.scroll(filter, limit=limit, offset=offset, fields=fields)
        if not points:
            return
        yield points
        if offset is None:
            return
