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
    from memoryd.settings import Settings
    from memoryd.stores.vectors.port import VectorStore

# (settings, dimension of the configured embedder) -> an open store.
VectorStoreFactory: TypeAlias = "Callable[[Settings, int], VectorStore]"


def _edge(settings: Settings, dim: int) -> VectorStore:
    from memoryd.stores.vectors.edge_store import EdgeVectorStore

    return EdgeVectorStore(
        settings.data_dir / "vectors", dim=dim, collection=settings.vectors.collection
    )


def _qdrant(settings: Settings, dim: int) -> VectorStore:
    from memoryd.stores.vectors.qdrant_server_store import ClusterLayout, QdrantServerVectorStore

    cfg = settings.vectors
    # qdrant-client reads any `location` but ':memory:' as a URL: a path is local mode.
    in_memory = cfg.qdrant_location == ":memory:"
    return QdrantServerVectorStore(
        url=cfg.qdrant_url,
        api_key=cfg.qdrant_api_key,
        prefer_grpc=cfg.qdrant_prefer_grpc,
        collection=cfg.collection,
        dim=dim,
        location=cfg.qdrant_location if in_memory else None,
        path=None if in_memory else cfg.qdrant_location,
        layout=ClusterLayout(**settings.qdrant.model_dump()),
    )


ADAPTERS: dict[str, VectorStoreFactory] = {
    "edge": _edge,
    "qdrant": _qdrant,
}


def adapter_name(settings: Settings) -> str:
    return settings.vectors.backend
