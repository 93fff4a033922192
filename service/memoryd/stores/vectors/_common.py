"""Engine-independent pieces shared by the vector store adapters."""

from __future__ import annotations

import base64
import binascii
import json
import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from memoryd.stores.vectors.port import (
    ORDERABLE_FIELDS,
    SparseVector,
    StoreClosedError,
    VectorPoint,
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


def check_dense(vector: Sequence[float], dim: int) -> list[float]:
    values = [float(x) for x in vector]
    if len(values) != dim:
        raise ValueError(f"dense vector has dimension {len(values)}, the store expects {dim}")
    if not all(math.isfinite(x) for x in values):
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
