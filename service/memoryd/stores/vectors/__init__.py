"""Vector store port and its two adapters (qdrant-edge in-process, qdrant-client server).

The port types are imported eagerly; each adapter is imported on first use so that code
needing only the port does not load both engines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memoryd.stores.vectors.port import (
    DENSE_VECTOR,
    ORDERABLE_FIELDS,
    PAYLOAD_INDEXES,
    SPARSE_VECTOR,
    Condition,
    Filter,
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
    StoreClosedError,
    StoredPoint,
    VectorPoint,
    VectorStore,
    VectorStoreError,
    VectorStoreUnavailable,
    canonical_id,
    rrf_contribution,
)

if TYPE_CHECKING:
    from memoryd.stores.vectors.edge_store import EdgeVectorStore
    from memoryd.stores.vectors.qdrant_server_store import QdrantServerVectorStore

__all__ = [
    "DENSE_VECTOR",
    "ORDERABLE_FIELDS",
    "PAYLOAD_INDEXES",
    "SPARSE_VECTOR",
    "Condition",
    "EdgeVectorStore",
    "Filter",
    "HasId",
    "IncompatibleStoreError",
    "IndexKind",
    "IsEmpty",
    "IsNull",
    "MatchAny",
    "MatchValue",
    "QdrantServerVectorStore",
    "Range",
    "RrfParams",
    "ScoredPoint",
    "SparseVector",
    "StoreClosedError",
    "StoredPoint",
    "VectorPoint",
    "VectorStore",
    "VectorStoreError",
    "VectorStoreUnavailable",
    "canonical_id",
    "rrf_contribution",
]


def __getattr__(name: str) -> Any:
    if name == "EdgeVectorStore":
        from memoryd.stores.vectors.edge_store import EdgeVectorStore

        return EdgeVectorStore
    if name == "QdrantServerVectorStore":
        from memoryd.stores.vectors.qdrant_server_store import QdrantServerVectorStore

        return QdrantServerVectorStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
