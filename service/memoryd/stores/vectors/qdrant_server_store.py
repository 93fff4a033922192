"""`VectorStore` on qdrant-client: a Qdrant server or cluster (the scale-out option).

It also runs on qdrant-client's local mode (``location=":memory:"`` or ``path=...``),
which is how the contract tests exercise it without a server.

* Multitenancy, as Qdrant's multitenancy guide says: ``tenant`` and ``user_id`` are
  keyword indexes with ``is_tenant=True``; the collection is created with HNSW ``m=0`` and
  ``payload_m=16`` so the server builds per-tenant graphs instead of one global graph
  (every query filters by tenant + user). The other payload indexes set
  ``enable_hnsw=False`` so they add no graph links.
* Cluster layout (`ClusterLayout`, from the ``qdrant`` settings; `collection_params` is
  what a new collection is created with): shard count, replication factor, write
  consistency factor, payloads and original vectors on disk, scalar int8 quantization kept
  in RAM with rescoring by the original vectors. ``sharding="tenant"`` creates the
  collection with custom sharding: each tenant gets its own shard key (created on its
  first use), every write carries its points' tenant as shard key selector, and every
  read or delete by filter carries the tenant its filter names. Calls by id (retrieve,
  delete, set_payload), which name no tenant, go to all shards, as Qdrant does for a call
  without a selector. Local mode has no shards: it refuses ``sharding="tenant"``.
* Search uses the Query API (``query_points``); hybrid search sends the dense and sparse
  queries as prefetches fused server-side by (weighted) RRF.
* Store metadata lives in the collection's own metadata, under the key ``memoryd``.
* Thread safety: a remote client is thread-safe, so reads run unlocked and writes share
  one lock (so `delete_where`'s count and delete are atomic within this process). Local
  mode is not thread-safe, so there every call takes that lock.
* Errors: connection failures raise `VectorStoreUnavailable`; other engine failures
  raise `VectorStoreError`. A server that is down at start-up does not fail the
  constructor: collection setup is retried by every call until it succeeds.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import grpc
import httpx
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from memoryd.stores.vectors._common import (
    LifecycleGate,
    OrderCursor,
    check_dense,
    check_limit,
    check_orderable,
    check_points,
    facet_counts,
    match_any_values,
    nonempty_sparse,
    ordered_page,
    parse_id_offset,
    payload_keys,
    scored_point,
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
    VectorStoreUnavailable,
    WithVectors,
    canonical_id,
)

_log = logging.getLogger(__name__)

META_KEY = "memoryd"
_UNAVAILABLE_GRPC = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_UNAVAILABLE_HTTP = (502, 503, 504)


@dataclass(frozen=True)
class ClusterLayout:
    """How the collection is laid out on a Qdrant server or cluster; the fields and their
    meaning are those of the ``qdrant`` settings block (`QdrantSettings`)."""

    sharding: Literal["auto", "tenant"] = "auto"
    shard_number: int | None = None
    replication_factor: int = 1
    write_consistency_factor: int = 1
    hnsw_m: int = 0
    hnsw_payload_m: int = 16
    payload_on_disk: bool = True
    vectors_on_disk: bool = False
    quantization: Literal["none", "int8"] = "none"
    quantization_quantile: float = 0.99
    rescore: bool = True
    oversampling: float = 2.0

    @property
    def by_tenant(self) -> bool:
        return self.sharding == "tenant"


def collection_params(layout: ClusterLayout, dim: int) -> dict[str, Any]:
    """The arguments of ``create_collection`` (besides its name) for `layout`."""
    quantization = None
    if layout.quantization == "int8":
        quantization = models.ScalarQuantization(
            scalar=models.ScalarQuantizationConfig(
                type=models.ScalarType.INT8,
                quantile=layout.quantization_quantile,
                # `always_ram`, not the newer `memory`: servers from 1.11 (is_tenant) know it.
                always_ram=True,
            )
        )
    return {
        "vectors_config": {
            DENSE_VECTOR: models.VectorParams(
                size=dim, distance=models.Distance.COSINE, on_disk=layout.vectors_on_disk
            )
        },
        "sparse_vectors_config": {
            SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)
        },
        "hnsw_config": models.HnswConfigDiff(m=layout.hnsw_m, payload_m=layout.hnsw_payload_m),
        "sharding_method": (
            models.ShardingMethod.CUSTOM if layout.by_tenant else models.ShardingMethod.AUTO
        ),
        # Custom sharding: shards per shard key; automatic: per collection (None: the
        # server's default, one per node).
        "shard_number": layout.shard_number or (1 if layout.by_tenant else None),
        "replication_factor": layout.replication_factor,
        "write_consistency_factor": layout.write_consistency_factor,
        "on_disk_payload": layout.payload_on_disk,
        "quantization_config": quantization,
    }


def search_params(layout: ClusterLayout) -> models.SearchParams | None:
    """Dense search parameters: rescoring of quantized candidates, or None without int8."""
    if layout.quantization == "none":
        return None
    return models.SearchParams(
        quantization=models.QuantizationSearchParams(
            rescore=layout.rescore, oversampling=layout.oversampling
        )
    )


class QdrantServerVectorStore:
    """One collection in Qdrant reached through qdrant-client. See the module docstring."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        prefer_grpc: bool = True,
        collection: str = "memories",
        *,
        dim: int,
        location: str | None = None,
        path: str | None = None,
        timeout: int | None = None,
        layout: ClusterLayout | None = None,
    ) -> None:
        if dim < 1:
            raise ValueError("dim must be >= 1")
        if sum(x is not None for x in (url, location, path)) != 1:
            raise ValueError("give exactly one of url, location (':memory:') or path")
        self._dim = dim
        self._collection = collection
        self._local = url is None
        self._layout = layout or ClusterLayout()
        self._search_params = search_params(self._layout)
        # Shard keys known to exist (sharding="tenant"); filled from the server on open.
        self._shard_keys: set[str] = set()
        self._shard_keys_lock = threading.Lock()
        self._gate = LifecycleGate(f"qdrant vector store {collection!r}")
        self._write_lock = threading.RLock()
        # Moves with every write; only meaningful in local mode (see `generation`).
        self._generation = 0
        # Local mode is plain Python state, so reads must be serialised with writes too.
        self._read_guard: AbstractContextManager[Any] = (
            self._write_lock if self._local else contextlib.nullcontext()
        )
        try:
            self._client = self._connect(url, api_key, prefer_grpc, location, path, timeout)
        except Exception as exc:
            raise _translate(exc, "connect") from exc
        self._ready = False
        self._ready_lock = threading.Lock()
        try:
            self._ensure_ready()
        except VectorStoreUnavailable as exc:
            # Start anyway: every call retries the setup, so the store recovers (and
            # healthy() turns True) once the server answers.
            _log.warning("qdrant not reachable yet, will retry: %s", exc)
        except BaseException:
            self._client.close()
            raise

    def _connect(
        self,
        url: str | None,
        api_key: str | None,
        prefer_grpc: bool,
        location: str | None,
        path: str | None,
        timeout: int | None,
    ) -> QdrantClient:
        if url is None:
            # Worker threads call in; our lock makes the shared SQLite handle safe.
            return QdrantClient(location=location, path=path, force_disable_check_same_thread=True)
        return QdrantClient(url=url, api_key=api_key, prefer_grpc=prefer_grpc, timeout=timeout)

    # ------------------------------------------------------------------ lifecycle

    def _ensure_ready(self) -> None:
        if self._ready:
            return
        with self._ready_lock:
            if not self._ready:
                self._ensure_collection()
                self._ready = True

    def _ensure_collection(self) -> None:
        name = self._collection
        try:
            if not self._client.collection_exists(name):
                self._create_collection()
            info = self._client.get_collection(name)
            self._check_compatible(info)
            if self._layout.by_tenant:
                self._list_shard_keys()
            existing = set(info.payload_schema)
            with warnings.catch_warnings():
                # Local mode warns that payload indexes have no effect there; we know.
                warnings.simplefilter("ignore", UserWarning)
                for field_name, kind in PAYLOAD_INDEXES:
                    if field_name not in existing:
                        self._client.create_payload_index(
                            name, field_name, field_schema=_index_params(kind), wait=True
                        )
        except (ValueError, VectorStoreError):
            raise
        except Exception as exc:
            raise _translate(exc, "open collection") from exc

    def _create_collection(self) -> None:
        try:
            self._client.create_collection(
                self._collection, **collection_params(self._layout, self._dim)
            )
        except UnexpectedResponse as exc:
            if exc.status_code != 409:  # 409: another replica created it first
                raise
        except grpc.RpcError as exc:
            if _grpc_code(exc) is not grpc.StatusCode.ALREADY_EXISTS:
                raise

    def _check_compatible(self, info: models.CollectionInfo) -> None:
        params = info.config.params
        vectors = params.vectors
        dense = vectors.get(DENSE_VECTOR) if isinstance(vectors, dict) else None
        if dense is None or dense.size != self._dim or dense.distance != models.Distance.COSINE:
            raise IncompatibleStoreError(
                f"collection {self._collection!r} has dense vectors {vectors!r}; "
                f"expected {DENSE_VECTOR!r} with dim={self._dim}, cosine"
            )
        sparse = (params.sparse_vectors or {}).get(SPARSE_VECTOR)
        if sparse is None or sparse.modifier != models.Modifier.IDF:
            raise IncompatibleStoreError(
                f"collection {self._collection!r} lacks sparse vector {SPARSE_VECTOR!r} with IDF"
            )
        # Calls with a shard key fail on an automatically sharded collection, and writes
        # without one fail on a custom sharded one: the method must match the setting.
        method = params.sharding_method or models.ShardingMethod.AUTO
        wanted = (
            models.ShardingMethod.CUSTOM if self._layout.by_tenant else models.ShardingMethod.AUTO
        )
        if method != wanted:
            # Not IncompatibleStoreError: the vectors are fine, re-embedding would not help.
            raise VectorStoreError(
                f"collection {self._collection!r} is sharded {method.value}, but "
                f"qdrant.sharding = {self._layout.sharding!r} needs "
                f"{wanted.value} sharding" + (" (local mode has no shards)" if self._local else "")
            )

    # ------------------------------------------------------------------ shard keys

    def _shard_key(self, tenant: str) -> str:
        """The tenant's shard key, created on its first use (sharding="tenant")."""
        if tenant in self._shard_keys:
            return tenant
        with self._shard_keys_lock:
            if tenant not in self._shard_keys:
                try:
                    self._client.create_shard_key(
                        self._collection,
                        tenant,
                        shards_number=self._layout.shard_number,
                        replication_factor=self._layout.replication_factor,
                    )
                except (UnexpectedResponse, grpc.RpcError):
                    # Another replica may have created it since we listed the keys: the
                    # server's list decides, not the wording of its error.
                    self._list_shard_keys()
                    if tenant not in self._shard_keys:
                        raise
                self._shard_keys.add(tenant)
        return tenant

    def _list_shard_keys(self) -> None:
        listed = self._client.list_shard_keys(self._collection).shard_keys or []
        self._shard_keys.update(str(k.key) for k in listed)

    def _selector(self, filter: Filter | None) -> str | _NoShard | None:
        """The shard key of the tenant `filter` names (sharding="tenant"), else None: a
        call without a selector goes to every shard. A read never creates a key: a tenant
        whose key no replica has made yet has no points (`NO_SHARD`: the read finds none)."""
        if not self._layout.by_tenant or filter is None:
            return None
        tenant = _tenant_of(filter)
        if tenant is None or tenant in self._shard_keys:
            return tenant
        with self._shard_keys_lock:
            self._list_shard_keys()  # another replica may have written the tenant since
        return tenant if tenant in self._shard_keys else NO_SHARD

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def collection(self) -> str:
        return self._collection

    @contextmanager
    def _op(self, what: str, guard: AbstractContextManager[Any]) -> Iterator[None]:
        with self._gate.op():
            self._ensure_ready()
            with guard:
                try:
                    yield
                except (ValueError, VectorStoreError):
                    raise
                except Exception as exc:
                    raise _translate(exc, what) from exc

    def _read(self, what: str) -> AbstractContextManager[None]:
        return self._op(what, self._read_guard)

    @contextlib.contextmanager
    def _write(self, what: str) -> Iterator[None]:
        with self._op(what, self._write_lock):
            try:
                yield
            finally:
                self._generation += 1

    def generation(self, tenant: str | None = None, user_id: str | None = None) -> int | None:
        # A server may have other writers (replicas, tools) that this process never sees.
        # In local mode every write moves it, whoever's points it touches.
        return self._generation if self._local else None

    def flush(self) -> None:
        # Writes use wait=True: the server has applied them and logged them to its WAL
        # (local mode persists each write), so there is nothing left to push.
        with self._read("flush"):
            return

    def close(self) -> None:
        if not self._gate.close():
            return
        with self._write_lock:
            self._client.close()

    def healthy(self) -> bool:
        if self._gate.closed:
            return False
        try:
            with self._gate.op():
                self._ensure_ready()
                return self._local or self._client.collection_exists(self._collection)
        except Exception:
            return False

    # ------------------------------------------------------------------ writes

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        checked = check_points(points, self._dim)
        if not checked:
            return
        if not self._layout.by_tenant:
            structs = [_point_struct(p) for p in checked]
            with self._write("upsert"):
                self._client.upsert(self._collection, points=structs, wait=True)
            return
        by_tenant: dict[str, list[models.PointStruct]] = {}
        for point in checked:
            tenant = point.payload.get("tenant")
            if not isinstance(tenant, str) or not tenant:
                raise ValueError(f"point {point.id}: sharding by tenant needs a payload tenant")
            by_tenant.setdefault(tenant, []).append(_point_struct(point))
        with self._write("upsert"):
            for tenant, structs in by_tenant.items():
                self._client.upsert(
                    self._collection,
                    points=structs,
                    wait=True,
                    shard_key_selector=self._shard_key(tenant),
                )

    def delete(self, ids: Sequence[str]) -> None:
        wanted: list[models.ExtendedPointId] = list(unique_ids(ids))
        if not wanted:
            return
        with self._write("delete"):
            self._client.delete(
                self._collection, points_selector=models.PointIdsList(points=wanted), wait=True
            )

    def delete_where(self, filter: Filter) -> int:
        if filter.is_empty:
            raise ValueError("delete_where needs a non-empty filter")
        qfilter = _group(filter)
        with self._write("delete_where"):
            shard = self._selector(filter)
            if isinstance(shard, _NoShard):
                return 0
            # Exact within this process (the lock); other writers to the same server could
            # race between count and delete, which Qdrant offers no way to prevent.
            matched = self._client.count(
                self._collection, count_filter=qfilter, exact=True, shard_key_selector=shard
            ).count
            if matched:
                self._client.delete(
                    self._collection,
                    points_selector=models.FilterSelector(filter=qfilter),
                    wait=True,
                    shard_key_selector=shard,
                )
            return matched

    def set_payload(self, ids: Sequence[str], patch: Mapping[str, Any]) -> None:
        wanted: list[models.ExtendedPointId] = list(unique_ids(ids))
        if not wanted or not patch:
            return
        # By filter, because set_payload by id fails (404) on an unknown id.
        selector = models.FilterSelector(
            filter=models.Filter(must=[models.HasIdCondition(has_id=wanted)])
        )
        with self._write("set_payload"):
            self._client.set_payload(
                self._collection, payload=dict(patch), points=selector, wait=True
            )

    # ------------------------------------------------------------------ reads

    def retrieve(
        self, ids: Sequence[str], *, with_vectors: WithVectors = False
    ) -> list[StoredPoint]:
        wanted = unique_ids(ids)
        if not wanted:
            return []
        with self._read("retrieve"):
            records = self._client.retrieve(
                self._collection,
                ids=wanted,
                with_payload=True,
                with_vectors=vector_names(with_vectors),
            )
        found = {p.id: p for p in (_stored_point(r, with_vectors) for r in records)}
        return [found[i] for i in wanted if i in found]

    def count(self, filter: Filter | None = None) -> int:
        with self._read("count"):
            shard = self._selector(filter)
            if isinstance(shard, _NoShard):
                return 0
            result = self._client.count(
                self._collection, count_filter=_filter(filter), exact=True, shard_key_selector=shard
            )
        return result.count

    def count_each(self, filter: Filter, field: str, values: Sequence[int]) -> list[int]:
        base = _filter(filter)
        out = []
        with self._read("count"):
            shard = self._selector(filter)
            if isinstance(shard, _NoShard):
                return [0] * len(values)
            for value in values:
                must: list[models.Condition] = [
                    models.FieldCondition(key=field, match=models.MatchValue(value=int(value)))
                ]
                if base is not None:
                    must.insert(0, base)
                result = self._client.count(
                    self._collection,
                    count_filter=models.Filter(must=must),
                    exact=True,
                    shard_key_selector=shard,
                )
                out.append(result.count)
        return out

    def facet(self, filter: Filter | None, field: str) -> dict[FilterScalar, int]:
        with self._read("facet"):
            shard = self._selector(filter)
            if isinstance(shard, _NoShard):
                return {}
            response = self._client.facet(
                self._collection,
                key=field,
                facet_filter=_filter(filter),
                limit=MAX_FACET_VALUES + 1,
                exact=True,
                shard_key_selector=shard,
            )
        return facet_counts((h.value, h.count) for h in response.hits)

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
            with self._read("scroll"):
                shard = self._selector(filter)
                if isinstance(shard, _NoShard):
                    return [], None
                records, next_id = self._client.scroll(
                    self._collection,
                    scroll_filter=_filter(filter),
                    limit=limit,
                    offset=start,
                    with_payload=payload_keys(fields),
                    with_vectors=vector_names(with_vectors),
                    shard_key_selector=shard,
                )
            points = [_stored_point(r, with_vectors) for r in records]
            return points, (None if next_id is None else canonical_id(str(next_id)))

        check_orderable(order_by)
        cursor = None if offset is None else OrderCursor.decode(offset, order_by, descending)
        effective = without_ties(filter, cursor)
        with self._read("scroll"):
            shard = self._selector(filter)
            if isinstance(shard, _NoShard):
                return [], None
            records, _ = self._client.scroll(
                self._collection,
                scroll_filter=_filter(effective),
                limit=limit + 1,  # one extra tells whether another page exists
                order_by=models.OrderBy(
                    key=order_by,
                    direction=models.Direction.DESC if descending else models.Direction.ASC,
                    start_from=None if cursor is None else cursor.value,
                ),
                with_payload=payload_keys(fields, order_by),
                with_vectors=vector_names(with_vectors),
                shard_key_selector=shard,
            )
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
        with_vector = vector_names("dense" if with_vectors else False)
        qfilter = _filter(filter)

        with self._read("search"), self._quiet_local_params():
            shard = self._selector(filter)
            if isinstance(shard, _NoShard):
                return []
            if dense_query is not None and sparse is not None:
                rrf = fusion or RrfParams()
                per_source = rrf.prefetch_limit_for(limit)
                # The server propagates query_filter into each prefetch.
                response = self._client.query_points(
                    self._collection,
                    prefetch=[
                        models.Prefetch(
                            query=dense_query,
                            using=DENSE_VECTOR,
                            limit=per_source,
                            params=self._search_params,
                        ),
                        models.Prefetch(
                            query=_sparse(sparse), using=SPARSE_VECTOR, limit=per_source
                        ),
                    ],
                    query=models.RrfQuery(
                        rrf=models.Rrf(
                            k=rrf.k,
                            # Unweighted requests stay valid on servers without weighted RRF.
                            weights=(
                                None if rrf.is_unweighted else [rrf.dense_weight, rrf.sparse_weight]
                            ),
                        )
                    ),
                    query_filter=qfilter,
                    limit=limit,
                    with_payload=True,
                    with_vectors=with_vector,
                    shard_key_selector=shard,
                )
            elif dense_query is not None:
                response = self._client.query_points(
                    self._collection,
                    query=dense_query,
                    using=DENSE_VECTOR,
                    search_params=self._search_params,
                    query_filter=qfilter,
                    limit=limit,
                    with_payload=True,
                    with_vectors=with_vector,
                    shard_key_selector=shard,
                )
            else:
                assert sparse is not None  # narrowed above
                response = self._client.query_points(
                    self._collection,
                    query=_sparse(sparse),
                    using=SPARSE_VECTOR,
                    query_filter=qfilter,
                    limit=limit,
                    with_payload=True,
                    with_vectors=with_vector,
                    shard_key_selector=shard,
                )
        return [_scored_point(h, with_vectors) for h in response.points]

    @contextmanager
    def _quiet_local_params(self) -> Iterator[None]:
        """Local mode searches exactly and warns that search parameters (rescoring) have no
        effect there; we know. Its calls are serialised by our lock."""
        if not (self._local and self._search_params is not None):
            yield
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            yield

    # ------------------------------------------------------------------ metadata

    def read_meta(self) -> dict[str, Any] | None:
        with self._read("read_meta"):
            info = self._client.get_collection(self._collection)
        meta = (info.config.metadata or {}).get(META_KEY)
        return dict(meta) if isinstance(meta, dict) else None

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        # Collection metadata merges top-level keys, so replacing META_KEY replaces it whole.
        with self._write("write_meta"):
            self._client.update_collection(self._collection, metadata={META_KEY: dict(meta)})


class _NoShard:
    """A tenant whose shard key does not exist yet (sharding="tenant")."""


NO_SHARD = _NoShard()


def _tenant_of(filter: Filter) -> str | None:
    """The tenant every match of `filter` has (a `tenant` equality it must meet), if any."""
    for condition in filter.must:
        if isinstance(condition, MatchValue) and condition.field == "tenant":
            return condition.value if isinstance(condition.value, str) else None
        if isinstance(condition, Filter):
            found = _tenant_of(condition)
            if found is not None:
                return found
    return None


# ---------------------------------------------------------------------- conversions


def _grpc_code(exc: grpc.RpcError) -> grpc.StatusCode | None:
    code = getattr(exc, "code", None)
    return code() if callable(code) else None


def _translate(exc: Exception, what: str) -> VectorStoreError:
    message = f"qdrant {what} failed: {exc}"
    if isinstance(exc, grpc.RpcError):
        if _grpc_code(exc) in _UNAVAILABLE_GRPC:
            return VectorStoreUnavailable(message)
        return VectorStoreError(message)
    if isinstance(exc, UnexpectedResponse):
        if exc.status_code in _UNAVAILABLE_HTTP:
            return VectorStoreUnavailable(message)
        return VectorStoreError(message)
    if isinstance(
        exc, ResponseHandlingException | httpx.TransportError | ConnectionError | TimeoutError
    ):
        return VectorStoreUnavailable(message)
    return VectorStoreError(message)


def _index_params(kind: IndexKind) -> models.PayloadSchemaParams:
    if kind is IndexKind.TENANT_KEYWORD:
        return models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
    if kind is IndexKind.KEYWORD:
        return models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, enable_hnsw=False)
    if kind is IndexKind.INTEGER:
        return models.IntegerIndexParams(
            type=models.IntegerIndexType.INTEGER, lookup=True, range=False, enable_hnsw=False
        )
    if kind is IndexKind.FLOAT:
        return models.FloatIndexParams(type=models.FloatIndexType.FLOAT, enable_hnsw=False)
    return models.BoolIndexParams(type=models.BoolIndexType.BOOL, enable_hnsw=False)


def _sparse(sparse: SparseVector) -> models.SparseVector:
    return models.SparseVector(indices=list(sparse.indices), values=list(sparse.values))


def _point_struct(point: VectorPoint) -> models.PointStruct:
    vector: dict[str, models.Vector] = {DENSE_VECTOR: list(point.dense)}
    if point.sparse is not None:
        vector[SPARSE_VECTOR] = _sparse(point.sparse)
    return models.PointStruct(id=point.id, vector=vector, payload=dict(point.payload))


def _stored_point(record: models.Record, with_vectors: WithVectors) -> StoredPoint:
    return stored_point(record.id, record.payload, record.vector, with_vectors, models.SparseVector)


def _scored_point(hit: models.ScoredPoint, with_vectors: bool) -> ScoredPoint:
    return scored_point(
        hit.id, hit.score, hit.payload, hit.vector, with_vectors, models.SparseVector
    )


def _filter(filter: Filter | None) -> models.Filter | None:
    if filter is None or filter.is_empty:
        return None
    return _group(filter)


def _group(filter: Filter) -> models.Filter:
    return models.Filter(
        must=[_condition(c) for c in filter.must] or None,
        should=[_condition(c) for c in filter.should] or None,
        must_not=[_condition(c) for c in filter.must_not] or None,
    )


def _condition(condition: Condition) -> models.Condition:
    if isinstance(condition, MatchValue):
        return models.FieldCondition(
            key=condition.field, match=models.MatchValue(value=condition.value)
        )
    if isinstance(condition, MatchAny):
        return models.FieldCondition(
            key=condition.field, match=models.MatchAny(any=match_any_values(condition.values))
        )
    if isinstance(condition, Range):
        return models.FieldCondition(
            key=condition.field,
            range=models.Range(
                gt=condition.gt, gte=condition.gte, lt=condition.lt, lte=condition.lte
            ),
        )
    if isinstance(condition, IsEmpty):
        return models.IsEmptyCondition(is_empty=models.PayloadField(key=condition.field))
    if isinstance(condition, IsNull):
        return models.IsNullCondition(is_null=models.PayloadField(key=condition.field))
    if isinstance(condition, HasId):
        ids: list[models.ExtendedPointId] = [canonical_id(i) for i in condition.ids]
        return models.HasIdCondition(has_id=ids)
    return _group(condition)
