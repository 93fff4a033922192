"""Engine-independent pieces shared by the vector store adapters."""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from memoryd.stores.vectors.port import (
    DENSE_VECTOR,
    MAX_FACET_VALUES,
    ORDERABLE_FIELDS,
    SPARSE_VECTOR,
    DenseVector,
    Filter,
    FilterScalar,
    HasId,
    ScoredPoint,
    SparseVector,
    StoreClosedError,
    StoredPoint,
    VectorPoint,
    VectorStoreError,
    WithVectors,
    canonical_id,
)

_ORDER_TOKEN_PREFIX = "ob:"


class LifecycleGate:
    """Lets operations run concurrently while the store is open; `close` waits for them.

    Without it a worker thread could call into an engine handle that another thread is
    closing (the engines do not guard against that themselves).
    """

    def __init__(self, what: str) -> None:
        self._what = what
        self._cond = threading.Condition()
        self._active = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @contextmanager
    def op(self) -> Iterator[None]:
        with self._cond:
            if self._closed:
                raise StoreClosedError(f"{self._what} is closed")
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                if self._active == 0:
                    self._cond.notify_all()

    def close(self) -> bool:
        """Refuse new operations and wait for running ones; False if already closed."""
        with self._cond:
            if self._closed:
                return False
            self._closed = True
            while self._active:
                self._cond.wait()
            return True


# --------------------------------------------------------------------------- validation


def check_dense(vector: Sequence[float] | DenseVector, dim: int) -> list[float]:
    # map() keeps both loops in C: this runs for every point of every upsert, on a thread
    # that holds the GIL while it does (13.9 -> 8.1 us for 384 values).
    values = list(map(float, vector))
    if len(values) != dim:
        raise ValueError(f"dense vector has dimension {len(values)}, the store expects {dim}")
    if not all(map(math.isfinite, values)):
        raise ValueError("dense vector contains NaN or infinity")
    return values


def check_points(points: Sequence[VectorPoint], dim: int) -> list[VectorPoint]:
    """Validated points with canonical ids; a later duplicate id wins, as in the engine."""
    by_id: dict[str, VectorPoint] = {}
    for point in points:
        pid = canonical_id(point.id)
        by_id[pid] = VectorPoint(
            id=pid,
            dense=check_dense(point.dense, dim),
            sparse=point.sparse,
            payload=dict(point.payload),
        )
    return list(by_id.values())


def check_limit(limit: int) -> None:
    if limit < 1:
        raise ValueError("limit must be >= 1")


def unique_ids(ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(canonical_id(i) for i in ids))


def nonempty_sparse(sparse: SparseVector | None) -> SparseVector | None:
    # An empty sparse query can match nothing, so it is treated as "no sparse query".
    return None if sparse is None or sparse.is_empty else sparse


def match_any_values(values: Sequence[str] | Sequence[int]) -> list[str] | list[int]:
    """The values of a MatchAny as one homogeneous list (engines accept str or int lists)."""
    if all(isinstance(v, str) for v in values):
        return [str(v) for v in values]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return [int(v) for v in values]
    raise ValueError("MatchAny values must be all strings or all integers")


def check_orderable(order_by: str) -> None:
    if order_by not in ORDERABLE_FIELDS:
        raise ValueError(
            f"cannot order by {order_by!r}: only {sorted(ORDERABLE_FIELDS)} have a range index"
        )


# --------------------------------------------------------------------------- ordered scroll


@dataclass(frozen=True, slots=True)
class OrderCursor:
    """Where an ordered scroll stopped.

    Qdrant returns no next-page offset for ordered scrolls; the next page starts *at*
    ``value`` (``start_from`` is inclusive) and excludes the points already returned with
    exactly that value, so ties spanning a page boundary are neither lost nor repeated.
    """

    field: str
    descending: bool
    value: float
    tie_ids: tuple[str, ...]

    def encode(self) -> str:
        raw = json.dumps(
            {"f": self.field, "d": self.descending, "v": self.value, "t": self.tie_ids}
        ).encode()
        return _ORDER_TOKEN_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii")

    @staticmethod
    def decode(token: str, field: str, descending: bool) -> OrderCursor:
        if not token.startswith(_ORDER_TOKEN_PREFIX):
            raise ValueError("offset token does not belong to an ordered scroll")
        try:
            data = json.loads(base64.urlsafe_b64decode(token[len(_ORDER_TOKEN_PREFIX) :]))
            cursor = OrderCursor(
                field=str(data["f"]),
                descending=bool(data["d"]),
                value=float(data["v"]),
                tie_ids=tuple(canonical_id(i) for i in data["t"]),
            )
        except (binascii.Error, ValueError, KeyError, TypeError):
            raise ValueError("malformed offset token") from None
        if cursor.field != field or cursor.descending != descending:
            raise ValueError("offset token was issued for a different ordering")
        return cursor

    @staticmethod
    def after_page(
        previous: OrderCursor | None,
        field: str,
        descending: bool,
        page: Sequence[tuple[str, float]],
    ) -> OrderCursor:
        """The cursor following ``page`` (non-empty list of ``(id, order value)``)."""
        last = page[-1][1]
        ties = [pid for pid, value in page if value == last]
        if previous is not None and previous.value == last:
            ties = [*previous.tie_ids, *ties]
        return OrderCursor(field, descending, last, tuple(ties))


def parse_id_offset(token: str | None) -> str | None:
    if token is None:
        return None
    if token.startswith(_ORDER_TOKEN_PREFIX):
        raise ValueError("offset token belongs to an ordered scroll; pass the same order_by")
    try:
        return canonical_id(token)
    except ValueError:
        raise ValueError("malformed offset token") from None


# --------------------------------------------------------------------------- results
# Both engines return records with the same shape (id, payload, a dict of named vectors,
# an order value); only their sparse vector class differs, so it is passed in.


def vector_names(with_vectors: WithVectors) -> list[str] | bool:
    if with_vectors == "dense":
        return [DENSE_VECTOR]
    return [DENSE_VECTOR, SPARSE_VECTOR] if with_vectors else False


def facet_counts(hits: Iterable[tuple[Any, int]]) -> dict[FilterScalar, int]:
    counts = {value: int(count) for value, count in hits}
    if len(counts) > MAX_FACET_VALUES:
        raise VectorStoreError(f"a facet holds over {MAX_FACET_VALUES} values")
    return counts


def payload_keys(fields: Sequence[str] | None, order_by: str | None = None) -> list[str] | bool:
    """What a scroll reads of each payload: all of it, or `fields` (and the ordering
    field, which the next page's cursor needs)."""
    if fields is None:
        return True
    return list(dict.fromkeys([*fields, *([order_by] if order_by else [])]))


def order_value(value: object) -> float:
    if value is None:  # the engine sets it on every ordered scroll result
        raise VectorStoreError("ordered scroll returned a point without an order value")
    return float(value)  # type: ignore[arg-type]


# One packer per vector length: `struct` casts each Python float to a C float in one C
# loop, the same IEEE rounding as numpy's float64 -> float32 cast (bit for bit), in half
# the time numpy.asarray takes on a list (which inspects each item's type first).
_PACKERS: dict[int, struct.Struct] = {}


def dense_array(raw: object) -> DenseVector | None:
    """An engine's dense vector (a list of floats) as one float32 array (read-only): a
    single conversion in C, not one Python float per dimension."""
    if isinstance(raw, list):
        packer = _PACKERS.get(len(raw))
        if packer is None:
            packer = _PACKERS.setdefault(len(raw), struct.Struct(f"{len(raw)}f"))
        try:
            return np.frombuffer(packer.pack(*raw), dtype=np.float32)
        except (struct.error, OverflowError):  # not plain floats: numpy decides
            return np.asarray(raw, dtype=np.float32)
    if isinstance(raw, np.ndarray):
        return np.asarray(raw, dtype=np.float32)
    return None


def split_vectors(
    vector: object, sparse_type: type[Any]
) -> tuple[DenseVector | None, SparseVector | None]:
    if not isinstance(vector, dict):
        return None, None
    dense_raw = vector.get(DENSE_VECTOR)
    sparse_raw = vector.get(SPARSE_VECTOR)
    dense = dense_array(dense_raw)
    sparse = None
    if isinstance(sparse_raw, sparse_type):
        sparse = SparseVector(
            [int(i) for i in sparse_raw.indices], [float(v) for v in sparse_raw.values]
        )
    return dense, sparse


def stored_point(
    point_id: object,
    payload: Mapping[str, Any] | None,
    vector: object,
    with_vectors: WithVectors,
    sparse_type: type[Any],
) -> StoredPoint:
    dense, sparse = split_vectors(vector, sparse_type) if with_vectors else (None, None)
    return StoredPoint(
        id=canonical_id(str(point_id)), payload=dict(payload or {}), dense=dense, sparse=sparse
    )


def scored_point(
    point_id: object,
    score: float,
    payload: Mapping[str, Any] | None,
    vector: object,
    with_vectors: bool,
    sparse_type: type[Any],
) -> ScoredPoint:
    dense = split_vectors(vector, sparse_type)[0] if with_vectors else None
    return ScoredPoint(
        id=canonical_id(str(point_id)),
        score=float(score),
        payload=dict(payload or {}),
        dense_vector=dense,
    )


def without_ties(filter: Filter | None, cursor: OrderCursor | None) -> Filter:
    """`filter`, minus the points an ordered scroll already returned at the cursor's value."""
    effective = filter or Filter()
    if cursor is None or not cursor.tie_ids:
        return effective
    return Filter(
        must=effective.must,
        should=effective.should,
        must_not=[*effective.must_not, HasId(cursor.tie_ids)],
    )


def ordered_page(
    records: Sequence[Any],
    limit: int,
    to_point: Callable[[Any], StoredPoint],
    cursor: OrderCursor | None,
    order_by: str,
    descending: bool,
) -> tuple[list[StoredPoint], str | None]:
    """A page of an ordered scroll asked for `limit + 1` records (the extra one tells
    whether another page exists), and the offset of the next page."""
    page = records[:limit]
    points = [to_point(r) for r in page]
    if len(records) <= limit:
        return points, None
    keyed = [(p.id, order_value(r.order_value)) for p, r in zip(points, page, strict=True)]
    return points, OrderCursor.after_page(cursor, order_by, descending, keyed).encode()
