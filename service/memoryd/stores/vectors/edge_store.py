"""`VectorStore` on qdrant-edge: the Qdrant engine in-process (the embedded default).

Layout under ``path``: ``<collection>/`` is the edge shard (segments + WAL) and
``<collection>.meta.json`` holds the store metadata.

* Durability: the WAL is on, so an acknowledged `upsert` survives a process kill
  (``kill -9``); `flush` additionally persists segments (and bounds WAL replay).
* No HNSW graph is ever built: a filtered brute-force scan over the tenant/user keyword
  index is fast enough. Payload indexes need no build step; they are maintained on write.
  The engine's optimizer holds the GIL for its whole run, so only `compact` runs it
  (`memoryd compact`, server stopped: ADR 0602), to move points into memory-mapped segments
  whose dense vectors also have an int8 copy in RAM, rescored with the originals.
* Thread safety: the shard is internally synchronised, so reads run unlocked; writes go
  through one lock so that `delete_where`'s count and delete see the same data. The
  engine keeps the GIL while it searches (qdrant-edge-py 0.9, measured: a Python loop
  beside a thread of searches runs at half its speed on 2 idle cores; benchmarks/edge_gil.py
  shows it), so a worker thread would not spare the event loop its CPU:
  `searches_keep_the_gil` tells the gateway to run searches on the loop (the other calls
  run in worker threads).
* The shard is this process's alone (the engine locks it), so every write passes through
  here: `generation` moves with each of them (per user: with each write that touches the
  user's points), and what the core derives from the points (the per-user term counts)
  can be kept until it moves.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeAlias, cast
from uuid import UUID

import numpy
import qdrant_edge as qe

from memoryd.stores.vectors._common import (
    LifecycleGate,
    OrderCursor,
    check_dense,
    check_limit,
    check_orderable,
    check_points,
    dense_array,
    facet_counts,
    match_any_values,
    nonempty_sparse,
    ordered_page,
    parse_id_offset,
    payload_keys,
    stored_point,
    unique_ids,
    vector_names,
    without_ties,
)
from memoryd.stores.vectors.port import (
    DENSE_VECTOR,
    MAX_FACET_VALUES,
    PAYLOAD_INDEXES,
    SPARSE_VECTOR,
    Condition,
    Filter,
    FilterScalar,
    HasId,
    IncompatibleStoreError,
    IndexKind,
    IsEmpty,
    IsNull,
    MatchAny,
    MatchValue,
    Range,
    RrfParams,
    ScoredPoint,
    SparseVector,
    StoredPoint,
    VectorPoint,
    VectorStoreError,
    WithVectors,
    canonical_id,
)

_SHARD_MARKERS = ("edge_config.json", "segments", "wal")
_IndexParams: TypeAlias = (
    qe.KeywordIndexParams | qe.IntegerIndexParams | qe.FloatIndexParams | qe.BoolIndexParams
)
# A filtered search scans its points exactly below this many KB of vectors: always.
_ALWAYS_EXACT_KB = 1 << 40
# What a compacted segment holds memory-mapped and reads in at open (the kernel may drop
# its pages again): the indexes a search walks. Payloads stay on disk until read
# (`Memory.Cold`): a search reads those of its hits only (ADR 0602).
_INDEX_MEMORY = qe.Memory.Cached
# A compacted segment also keeps its dense vectors in int8, in RAM (0.4 KB a memory): a
# user's first search scans those instead of paging the originals in, then reads the
# originals of its best `_OVERSAMPLING` x limit candidates only, to score them exactly
# (ADR 0602). An appendable segment is never quantized: the search parameters do nothing
# there.
_QUANTIZED = qe.ScalarQuantizationConfig(qe.ScalarType.Int8, quantile=0.99, memory=qe.Memory.Pinned)
_OVERSAMPLING = 2.0
_RESCORED = qe.SearchParams(
    quantization=qe.QuantizationSearchParams(rescore=True, oversampling=_OVERSAMPLING)
)
# `compact` rebuilds every segment holding a vector (1 KB) and every one with a point
# replaced or deleted since: those still count in a compacted segment's keyword statistics.
_COMPACTING: dict[str, Any] = {
    "indexing_threshold": 1,
    "deleted_threshold": 0.0,
    "vacuum_min_vector_number": 1,
}


class EdgeVectorStore:
    """A qdrant-edge shard holding one collection. See the module docstring."""

    def __init__(self, path: Path | str, dim: int, collection: str = "memories") -> None:
        if dim < 1:
            raise ValueError("dim must be >= 1")
        if not collection or os.sep in collection or collection.startswith("."):
            raise ValueError(f"invalid collection name {collection!r}")
        self._dim = dim
        self._collection = collection
        self._root = Path(path)
        self._shard_dir = self._root / collection
        self._meta_path = self._root / f"{collection}.meta.json"
        self._gate = LifecycleGate(f"edge vector store {self._shard_dir}")
        self._write_lock = threading.Lock()
        # Moved by every write / by writes whose owners are not looked up / per owner.
        self._generation = 0
        self._everyone = 0
        self._owners: dict[tuple[str, str], int] = {}
        self._root.mkdir(parents=True, exist_ok=True)
        self._shard = self._open_shard()
        try:
            self._ensure_indexes()
        except BaseException:
            self._shard.close()
            raise

    # ------------------------------------------------------------------ lifecycle

    def _config(self, *, compacting: bool = False) -> qe.EdgeConfig:
        return qe.EdgeConfig(
            vectors={
                # Memory-mapped without being read in at open: a user's vectors are paged in
                # when that user is searched, and the kernel may drop them again. Measured at
                # 200k points: RSS 228 MB after open instead of 544 MB (ADR 0600). A segment
                # keeps the placement it was created with (stores written before: read in).
                DENSE_VECTOR: qe.EdgeVectorParams(
                    size=self._dim,
                    distance=qe.Distance.Cosine,
                    memory=qe.Memory.Cold,
                    quantization_config=_QUANTIZED,
                )
            },
            sparse_vectors={
                SPARSE_VECTOR: qe.EdgeSparseVectorParams(
                    modifier=qe.Modifier.Idf, memory=_INDEX_MEMORY
                )
            },
            wal_enabled=True,
            # What `compact` builds (ADR 0602): segments without a graph, searched exactly
            # within the filter as the appendable segment is, their indexes, payloads and id
            # tracker memory-mapped (`_INDEX_MEMORY`, payloads Cold), not rebuilt at open.
            hnsw_config=qe.HnswIndexConfig(
                m=0, ef_construct=100, full_scan_threshold=_ALWAYS_EXACT_KB, payload_m=0
            ),
            payload_memory=qe.Memory.Cold,
            id_tracker_memory=_INDEX_MEMORY,
            on_disk_payload=True,
            # Deferred points would vanish from reads until optimize(), which only
            # `compact` runs; there, any segment with a vector is rebuilt.
            optimizers=qe.EdgeOptimizersConfig(
                prevent_unoptimized=False, **(_COMPACTING if compacting else {})
            ),
        )

    def _open_shard(self) -> qe.EdgeShard:
        exists = any((self._shard_dir / marker).exists() for marker in _SHARD_MARKERS)
        try:
            if exists:
                return qe.EdgeShard.load(str(self._shard_dir), self._config())
            return qe.EdgeShard.create(str(self._shard_dir), self._config())
        except Exception as exc:
            message = str(exc)
            if "ncompatible" in message:
                raise IncompatibleStoreError(
                    f"vector shard {self._shard_dir} does not match dim={self._dim}: {message}"
                ) from exc
            if "WouldBlock" in message:
                raise VectorStoreError(
                    f"vector shard {self._shard_dir} is already open (another process?)"
                ) from exc
            raise VectorStoreError(
                f"cannot open vector shard {self._shard_dir}: {message}"
            ) from exc

    def _ensure_indexes(self) -> None:
        existing = set(self._shard.info().payload_schema)
        wanted = dict(PAYLOAD_INDEXES)
        for name, kind in PAYLOAD_INDEXES:
            if name not in existing:
                self._shard.update(qe.UpdateOperation.create_field_index(name, _edge_schema(kind)))
        # An index an earlier version made and this one no longer reads holds RAM on every
        # point: one process owns an embedded store, so it can go.
        for name in existing - wanted.keys():
            self._shard.update(qe.UpdateOperation.delete_field_index(name))

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def collection(self) -> str:
        return self._collection

    # An optional trait of this adapter (not part of the port), asked once by the gateway:
    # the engine keeps the GIL from the start of a search to its end (measured by
    # benchmarks/edge_gil.py, qdrant-edge-py 0.9), so a search in a worker thread would
    # give the event loop nothing back and cost two thread wake-ups (ADR 0002): the
    # gateway runs this adapter's searches on the loop.
    searches_keep_the_gil = True

    def generation(self, tenant: str | None = None, user_id: str | None = None) -> int | None:
        if tenant is None or user_id is None:
            return self._generation
        # Both parts only grow, so their sum moves whenever either does.
        return self._everyone + self._owners.get((tenant, user_id), 0)

    @contextmanager
    def _writing(self, what: str, owners: Callable[[], set[Owner] | None]) -> Iterator[None]:
        """A write under the write lock. Once it is done (or failed half-way) the
        generation moves: of the `owners` of the points it touches (read before the write,
        under the lock), or of everyone when they are None. A reader that saw the old
        generation never keeps what it counted."""
        with self._op(what), self._write_lock:
            touched = owners()
            try:
                yield
            finally:
                self._generation += 1
                if touched is None:
                    self._everyone += 1
                else:
                    for owner in touched:
                        self._owners[owner] = self._owners.get(owner, 0) + 1

    def _owners_of(self, ids: Sequence[str]) -> set[Owner] | None:
        """Whose points these are (None: too many to look up, or one without an owner)."""
        if len(ids) > _OWNER_LOOKUP:
            return None
        request: list[qe.PointId] = list(ids)
        return _owners(
            [r.payload for r in self._shard.retrieve(request, True, vector_names(False))]
        )

    @contextmanager
    def _op(self, what: str) -> Iterator[None]:
        with self._gate.op():
            try:
                yield
            except (ValueError, VectorStoreError):
                raise
            except Exception as exc:  # the engine raises bare Exception with a message
                raise VectorStoreError(f"edge vector store {what} failed: {exc}") from exc

    def flush(self) -> None:
        with self._op("flush"), self._write_lock:
            self._shard.flush()

    def compact(self) -> bool:
        """Rebuilds the shard's points into memory-mapped segments (ADR 0602); False when
        there was nothing to rebuild. The engine holds the GIL throughout (400-450 s at 1M
        points, measured): this is for `memoryd compact`, never a serving process."""
        with self._op("compact"), self._write_lock:
            # Indexes made by versions before compaction are rebuilt memory-mapped first.
            schema = self._shard.info().payload_schema
            for name, kind in PAYLOAD_INDEXES:
                if not _memory_mapped(schema[name]):
                    self._shard.update(qe.UpdateOperation.delete_field_index(name))
                    self._shard.update(
                        qe.UpdateOperation.create_field_index(name, _edge_schema(kind))
                    )
            self._shard.close()
            self._shard = qe.EdgeShard.load(str(self._shard_dir), self._config(compacting=True))
            try:
                rebuilt = bool(self._shard.optimize())
                self._shard.flush()
            finally:
                self._shard.close()
                self._shard = qe.EdgeShard.load(str(self._shard_dir), self._config())
            return rebuilt

    def close(self) -> None:
        if not self._gate.close():
            return
        with self._write_lock:
            try:
                self._shard.flush()
            finally:
                self._shard.close()

    def healthy(self) -> bool:
        return not self._gate.closed and self._shard_dir.is_dir()

    # ------------------------------------------------------------------ writes

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        checked = check_points(points, self._dim)
        if not checked:
            return
        edge_points = [_edge_point(p) for p in checked]

        def owners() -> set[Owner] | None:
            # The new owners, and the old ones of the points replaced.
            new = _owners([p.payload for p in checked])
            old = self._owners_of([p.id for p in checked])
            return None if new is None or old is None else new | old

        with self._writing("upsert", owners):
            self._shard.update(qe.UpdateOperation.upsert_points(edge_points))

    def delete(self, ids: Sequence[str]) -> None:
        targets = unique_ids(ids)
        wanted: list[qe.PointId] = list(targets)
        if not wanted:
            return
        with self._writing("delete", lambda: self._owners_of(targets)):
            self._shard.update(qe.UpdateOperation.delete_points(wanted))

    def delete_where(self, filter: Filter) -> int:
        if filter.is_empty:
            raise ValueError("delete_where needs a non-empty filter")
        edge_filter = _edge_group(filter)
        with self._writing("delete_where", lambda: _owner_filtered(filter)):
            matched = self._shard.count(qe.CountRequest(exact=True, filter=edge_filter))
            if matched:
                self._shard.update(qe.UpdateOperation.delete_points_by_filter(edge_filter))
            return matched

    def set_payload(self, ids: Sequence[str], patch: Mapping[str, Any]) -> None:
        wanted = unique_ids(ids)
        if not wanted or not patch:
            return
        # By filter, because set_payload by id fails on the first unknown id.
        by_ids = qe.Filter(must=[qe.HasIdCondition(set(wanted))])
        owned = "tenant" not in patch and "user_id" not in patch
        with self._writing("set_payload", lambda: self._owners_of(wanted) if owned else None):
            self._shard.update(qe.UpdateOperation.set_payload_by_filter(by_ids, dict(patch)))

    # ------------------------------------------------------------------ reads

    def retrieve(
        self, ids: Sequence[str], *, with_vectors: WithVectors = False
    ) -> list[StoredPoint]:
        wanted = unique_ids(ids)
        if not wanted:
            return []
        request_ids: list[qe.PointId] = list(wanted)
        with self._op("retrieve"):
            records = self._shard.retrieve(request_ids, True, vector_names(with_vectors))
        found = {p.id: p for p in (_stored_point(r, with_vectors) for r in records)}
        return [found[i] for i in wanted if i in found]

    def count(self, filter: Filter | None = None) -> int:
        with self._op("count"):
            return self._shard.count(qe.CountRequest(exact=True, filter=_edge_filter(filter)))

    def count_each(self, filter: Filter, field: str, values: Sequence[int]) -> list[int]:
        # The filter's conditions are converted once and the value's condition joins them
        # at the top level, where the engine's planner sees the (small) term index first.
        must = [_edge_condition(c) for c in filter.must]
        should = [_edge_condition(c) for c in filter.should] or None
        must_not = [_edge_condition(c) for c in filter.must_not] or None
        requests = [
            qe.CountRequest(
                exact=True,
                filter=qe.Filter(
                    must=[*must, qe.FieldCondition(field, match=qe.MatchValue(int(v)))],
                    should=should,
                    must_not=must_not,
                ),
            )
            for v in values
        ]
        with self._op("count"):
            return [self._shard.count(r) for r in requests]

    def facet(self, filter: Filter | None, field: str) -> dict[FilterScalar, int]:
        request = qe.FacetRequest(
            field, limit=MAX_FACET_VALUES + 1, exact=True, filter=_edge_filter(filter)
        )
        with self._op("facet"):
            hits = self._shard.facet(request).hits
        return facet_counts((h.value, h.count) for h in hits)

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
        check_limit(limit)
        if order_by is None:
            start = parse_id_offset(offset)
            request = qe.ScrollRequest(
                offset=start,
                limit=limit,
                filter=_edge_filter(filter),
                # With vectors the payloads come with them, read by id (as in `search`).
                with_payload=False if with_vectors else payload_keys(fields),
                with_vector=False,
            )
            with self._op("scroll"):
                records, next_id = self._shard.scroll(request)
                if with_vectors and records:
                    # As in `search`: by id afterwards, several times cheaper (ADR 0600).
                    ids: list[qe.PointId] = [r.id for r in records]
                    found = self._shard.retrieve(
                        ids, payload_keys(fields), vector_names(with_vectors)
                    )
                    by_id = {r.id: r for r in found}
                    records = [by_id[i] for i in ids if i in by_id]
            points = [_stored_point(r, with_vectors) for r in records]
            return points, (None if next_id is None else canonical_id(str(next_id)))

        check_orderable(order_by)
        cursor = None if offset is None else OrderCursor.decode(offset, order_by, descending)
        effective = without_ties(filter, cursor)
        request = qe.ScrollRequest(
            limit=limit + 1,  # one extra tells whether another page exists
            filter=_edge_filter(effective),
            with_payload=payload_keys(fields, order_by),
            with_vector=vector_names(with_vectors),
            order_by=qe.OrderBy(
                order_by,
                direction=qe.Direction.Desc if descending else qe.Direction.Asc,
                start_from=None if cursor is None else cursor.value,
            ),
        )
        with self._op("scroll"):
            records, _ = self._shard.scroll(request)
        return ordered_page(
            records,
            limit,
            lambda r: _stored_point(r, with_vectors),
            cursor,
            order_by,
            descending,
        )

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
        check_limit(limit)
        dense_query = None if dense is None else check_dense(dense, self._dim)
        if dense_query is None and sparse is None:
            raise ValueError("search needs a dense or a sparse query vector")
        sparse = nonempty_sparse(sparse)
        if dense_query is None and sparse is None:
            return []  # only an empty sparse query: no point can share a term with it
        # Vectors are never asked of the query itself: read with a query's hits they cost
        # 2-3x the whole search at 300k points (measured, ADR 0600), while reading the
        # hits' dense vectors by id afterwards takes well under a millisecond. With vectors
        # the payloads come with them in that read: one payload read instead of two
        # (the query's costs more per point than the read by id).
        with_vector = False
        with_payload = not with_vectors
        edge_filter = _edge_filter(filter)

        if dense_query is not None and sparse is not None:
            rrf = fusion or RrfParams()
            per_source = rrf.prefetch_limit_for(limit)
            # The engine propagates the top-level filter into each prefetch.
            request = qe.QueryRequest(
                limit=limit,
                prefetches=[
                    qe.Prefetch(
                        limit=per_source, query=_dense_query(dense_query), params=_RESCORED
                    ),
                    qe.Prefetch(limit=per_source, query=_sparse_query(sparse)),
                ],
                # The stub's ScoringQueryType names `Fusion`, not its member class `Fusion.Rrf`.
                query=cast(
                    qe.Fusion,
                    qe.Fusion.Rrf(
                        k=rrf.k,
                        weights=None
                        if rrf.is_unweighted
                        else [rrf.dense_weight, rrf.sparse_weight],
                    ),
                ),
                filter=edge_filter,
                with_payload=with_payload,
                with_vector=with_vector,
            )
        else:
            single = _dense_query(dense_query) if dense_query is not None else None
            if single is None:
                assert sparse is not None  # narrowed above; the engine needs one query
                single = _sparse_query(sparse)
            request = qe.QueryRequest(
                limit=limit,
                query=single,
                params=_RESCORED if dense_query is not None else None,
                filter=edge_filter,
                with_payload=with_payload,
                with_vector=with_vector,
            )
        with self._op("search"):
            hits = self._shard.query(request)
            if not with_vectors or not hits:
                return [_scored_point(h) for h in hits]
            # Each `.id` of the binding builds a new uuid.UUID: read once per point.
            ids: list[qe.PointId] = [h.id for h in hits]
            records = self._shard.retrieve(ids, True, vector_names("dense"))
        # A hit deleted meanwhile (reads take no lock) is left out, as a later search would.
        found = {r.id: r for r in records}
        points = []
        for point_id, hit in zip(ids, hits, strict=True):
            record = found.get(point_id)
            if record is not None:
                vectors = record.vector
                points.append(
                    ScoredPoint(
                        id=_point_id(point_id),
                        score=float(hit.score),
                        payload=record.payload or {},
                        dense_vector=dense_array(
                            vectors.get(DENSE_VECTOR) if isinstance(vectors, dict) else None
                        ),
                    )
                )
        return points

    # ------------------------------------------------------------------ metadata

    def read_meta(self) -> dict[str, Any] | None:
        with self._op("read_meta"):
            try:
                text = self._meta_path.read_text(encoding="utf-8")
            except FileNotFoundError:
                return None
            meta = json.loads(text)
            if not isinstance(meta, dict):
                raise VectorStoreError(f"{self._meta_path} does not hold a JSON object")
            return meta

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        data = json.dumps(dict(meta), sort_keys=True, indent=2)
        with self._op("write_meta"), self._write_lock:
            _atomic_write(self._meta_path, data)


# ---------------------------------------------------------------------- owners

# A point's owner (tenant, user_id); writes touching more points than this move every
# user's generation instead of looking their owners up.
Owner: TypeAlias = tuple[str, str]
_OWNER_LOOKUP = 64


def _owners(payloads: Sequence[Mapping[str, Any] | None]) -> set[Owner] | None:
    found: set[Owner] = set()
    for payload in payloads:
        tenant, user = (payload or {}).get("tenant"), (payload or {}).get("user_id")
        if not isinstance(tenant, str) or not isinstance(user, str):
            return None
        found.add((tenant, user))
    return found


def _owner_filtered(filter: Filter) -> set[Owner] | None:
    """The one owner a filter is limited to (top-level tenant and user equality), if any."""
    values = {
        c.field: c.value
        for c in filter.must
        if isinstance(c, MatchValue) and c.field in ("tenant", "user_id")
    }
    tenant, user = values.get("tenant"), values.get("user_id")
    if isinstance(tenant, str) and isinstance(user, str):
        return {(tenant, user)}
    return None


# ---------------------------------------------------------------------- conversions


def _edge_schema(kind: IndexKind) -> _IndexParams:
    # In a compacted segment, memory-mapped and read in at open (an appendable segment
    # keeps its maps in RAM whatever this says); no graph links by payload (ADR 0602).
    cold: dict[str, Any] = {"memory": _INDEX_MEMORY, "enable_hnsw": False}
    if kind is IndexKind.TENANT_KEYWORD:
        return qe.KeywordIndexParams(is_tenant=True, **cold)
    if kind is IndexKind.KEYWORD:
        return qe.KeywordIndexParams(**cold)
    if kind is IndexKind.INTEGER:
        return qe.IntegerIndexParams(lookup=True, range=False, **cold)
    if kind is IndexKind.FLOAT:
        return qe.FloatIndexParams(**cold)
    return qe.BoolIndexParams(**cold)


def _memory_mapped(info: Any) -> bool:
    """Whether an index (the engine's `PayloadIndexInfo`) was made as `_edge_schema` says."""
    return info.params is not None and info.params.memory == _INDEX_MEMORY


def _edge_point(point: VectorPoint) -> qe.Point:
    vectors: dict[str, qe.NamedVector] = {DENSE_VECTOR: list(point.dense)}
    if point.sparse is not None:
        vectors[SPARSE_VECTOR] = qe.SparseVector(
            list(point.sparse.indices), list(point.sparse.values)
        )
    return qe.Point(point.id, vectors, dict(point.payload))


def _dense_query(vector: list[float]) -> qe.Query:
    return qe.Query.Nearest(vector, using=DENSE_VECTOR)


def _sparse_query(sparse: SparseVector) -> qe.Query:
    return qe.Query.Nearest(
        qe.SparseVector(list(sparse.indices), list(sparse.values)), using=SPARSE_VECTOR
    )


def _stored_point(record: qe.Record, with_vectors: WithVectors) -> StoredPoint:
    return stored_point(record.id, record.payload, record.vector, with_vectors, qe.SparseVector)


def _scored_point(hit: qe.ScoredPoint) -> ScoredPoint:
    """A hit read without vectors (the binding's payload dict is the hit's own)."""
    return ScoredPoint(id=_point_id(hit.id), score=float(hit.score), payload=hit.payload or {})


def _point_id(point_id: object) -> str:
    # The binding returns uuid.UUID ids, whose str() is the canonical form.
    if isinstance(point_id, UUID):
        return str(point_id)
    return canonical_id(str(point_id))


def _edge_filter(filter: Filter | None) -> qe.Filter | None:
    if filter is None or filter.is_empty:
        return None
    return _edge_group(filter)


def _edge_group(filter: Filter) -> qe.Filter:
    return qe.Filter(
        must=[_edge_condition(c) for c in filter.must] or None,
        should=[_edge_condition(c) for c in filter.should] or None,
        must_not=[_edge_condition(c) for c in filter.must_not] or None,
    )


def _edge_match_value(value: FilterScalar) -> qe.MatchValue:
    if isinstance(value, bool):
        # qdrant-edge-py 0.9 tries int before bool when converting, so MatchValue(True)
        # becomes the integer 1 and never matches a boolean. numpy.bool_ is not an int
        # (numpy >= 2 has no __index__ on it) but does convert to a Rust bool.
        return qe.MatchValue(cast(bool, numpy.bool_(value)))
    return qe.MatchValue(value)


def _edge_condition(condition: Condition) -> qe.ConditionType:
    if isinstance(condition, MatchValue):
        return qe.FieldCondition(condition.field, match=_edge_match_value(condition.value))
    if isinstance(condition, MatchAny):
        return qe.FieldCondition(
            condition.field, match=qe.MatchAny(match_any_values(condition.values))
        )
    if isinstance(condition, Range):
        return qe.FieldCondition(
            condition.field,
            range=qe.RangeFloat(
                gte=condition.gte, gt=condition.gt, lte=condition.lte, lt=condition.lt
            ),
        )
    if isinstance(condition, IsEmpty):
        return qe.IsEmptyCondition(condition.field)
    if isinstance(condition, IsNull):
        return qe.IsNullCondition(condition.field)
    if isinstance(condition, HasId):
        ids: set[qe.PointId] = {canonical_id(i) for i in condition.ids}
        return qe.HasIdCondition(ids)
    return _edge_group(condition)


def _atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a crash leaves either the old or the new file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def peek_meta(path: Path | str, collection: str = "memories") -> dict[str, Any] | None:
    """The metadata of an edge collection, read without opening its shard (whose
    dimension may be unknown, e.g. before a reindex)."""
    meta_path = Path(path) / f"{collection}.meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return meta if isinstance(meta, dict) else None


def promote_collection(path: Path | str, source: str, target: str, keep_as: str) -> None:
    """Make collection `source` become `target`; the old `target` is kept as `keep_as`.

    Both stores must be closed. Used by reindex, which builds the new collection beside the
    old one so that a failure half-way leaves the old one untouched.
    """
    root = Path(path)
    for suffix in ("", ".meta.json"):
        old = root / f"{target}{suffix}"
        if old.exists():
            os.replace(old, root / f"{keep_as}{suffix}")
        os.replace(root / f"{source}{suffix}", old)
