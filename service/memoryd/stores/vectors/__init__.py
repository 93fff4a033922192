"""Vector store: the `VectorStore` port (port.py) and one module per adapter.

`ADAPTERS` names every adapter; the settings choose one (`vectors.backend`). Each factory
imports its module when called, so code needing only the port does not load either
engine. A new adapter is its module plus one line in `ADAPTERS` (and its name in
`VectorSettings.backend`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from memoryd.settings import QdrantSettings, Settings
    from memoryd.stores.vectors.port import VectorStore
    from memoryd.stores.vectors.qdrant_server_store import ClusterLayout

# (settings, dimension of the configured embedder) -> an open store.
VectorStoreFactory: TypeAlias = "Callable[[Settings, int], VectorStore]"


def _edge(settings: Settings, dim: int) -> VectorStore:
    from memoryd.stores.vectors.edge_store import EdgeVectorStore

    return EdgeVectorStore(
        settings.data_dir / "vectors", dim=dim, collection=settings.vectors.collection
    )


def _qdrant(settings: Settings, dim: int) -> VectorStore:
    from memoryd.stores.vectors.qdrant_server_store import QdrantServerVectorStore

    cfg = settings.qdrant
    # qdrant-client reads any `location` but ':memory:' as a URL: a path is local mode.
    in_memory = cfg.location == ":memory:"
    return QdrantServerVectorStore(
        url=cfg.url,
        api_key=cfg.api_key,
        prefer_grpc=cfg.prefer_grpc,
        collection=settings.vectors.collection,
        dim=dim,
        location=cfg.location if in_memory else None,
        path=None if in_memory else cfg.location,
        layout=cluster_layout(cfg),
    )


# QdrantSettings fields that say where the server is, not how the collection is laid out.
_WHERE = frozenset({"url", "api_key", "prefer_grpc", "location"})


def cluster_layout(cfg: QdrantSettings) -> ClusterLayout:
    """The collection layout `qdrant.*` asks for."""
    from memoryd.stores.vectors.qdrant_server_store import ClusterLayout

    return ClusterLayout(**cfg.model_dump(exclude=set(_WHERE)))


ADAPTERS: dict[str, VectorStoreFactory] = {
    "edge": _edge,
    "qdrant": _qdrant,
}


def adapter_name(settings: Settings) -> str:
    return settings.vectors.backend
