"""Vector store adapters opened the way the server opens them: by registry name, from
settings. Embedded adapters keep their data under ``data_dir``; qdrant-client runs in
local mode (it stands in for a Qdrant server here).

``qdrant-tenant`` is the qdrant adapter with a cluster layout (custom sharding by tenant,
replication, int8 quantization with rescoring, vectors on disk) over `ShardedLocalClient`:
local mode has no shards, so that client keeps what a custom-sharded server enforces
(a write names one existing shard key and lands there; a call naming a shard key reads
only that shard) and records every call's shard key selector."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

from memoryd.settings import Settings
from memoryd.stores import vectors
from memoryd.stores.vectors import cluster_layout
from memoryd.stores.vectors.port import VectorStore
from memoryd.stores.vectors.qdrant_server_store import QdrantServerVectorStore

ADAPTERS = sorted(vectors.ADAPTERS)
# Server settings for the qdrant adapter in local mode (it stands in for a Qdrant server).
QDRANT_LOCAL: dict[str, Any] = {
    "vectors": {"backend": "qdrant"},
    "qdrant": {"location": ":memory:"},
}
SHARDED = "qdrant-tenant"
# Cluster settings as an operator would give them (MEMORYD_QDRANT__*).
CLUSTER_SETTINGS: dict[str, Any] = {
    "sharding": "tenant",
    "replication_factor": 2,
    "write_consistency_factor": 2,
    "quantization": "int8",
    "vectors_on_disk": True,
}


def open_store(kind: str, data_dir: Path, dim: int, *, persistent: bool = False) -> VectorStore:
    """Adapter ``kind``; qdrant-client keeps its data in memory unless ``persistent``."""
    if kind == SHARDED:
        settings = Settings.explicit(data_dir=data_dir, qdrant=CLUSTER_SETTINGS)
        return ShardedQdrantStore(
            location=":memory:", dim=dim, layout=cluster_layout(settings.qdrant)
        )
    config: dict[str, Any] = {}
    if kind == "qdrant":
        config["location"] = str(data_dir / "qdrant") if persistent else ":memory:"
    return vectors.ADAPTERS[kind](Settings.explicit(data_dir=data_dir, qdrant=config), dim)


class ShardedLocalClient:
    """Local mode standing in for a custom-sharded Qdrant cluster (see the module
    docstring). Points live in one local collection; since every point is written under
    its tenant's shard key, "the shard of key K" is exactly the points whose tenant is K,
    so a call that names K must filter on tenant K and a call filtering on one tenant must
    name its key. Breaches are kept in `violations` (and raised)."""

    def __init__(self) -> None:
        self._local = QdrantClient(location=":memory:", force_disable_check_same_thread=True)
        self.created: dict[str, Any] = {}  # create_collection's arguments, as sent
        self.shard_keys: dict[str, dict[str, Any]] = {}  # key -> create_shard_key's arguments
        self.key_requests: list[str] = []  # every create_shard_key, in order
        self.dense_params: list[Any] = []  # the search parameters of every dense search
        self.selectors: list[tuple[str, str | None]] = []  # (call, shard key selector)
        self.violations: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._local, name)

    def _breach(self, message: str) -> None:
        self.violations.append(message)
        raise AssertionError(message)

    # -- collection and shard keys

    def create_collection(self, collection_name: str, **params: Any) -> bool:
        self.created = dict(params)
        return bool(self._local.create_collection(collection_name, **params))

    def get_collection(self, collection_name: str) -> models.CollectionInfo:
        info = self._local.get_collection(collection_name)
        # Local mode drops the sharding method; a server reports what it was created with.
        info.config.params.sharding_method = self.created.get("sharding_method")
        return info

    def create_shard_key(self, collection_name: str, shard_key: str, **params: Any) -> bool:
        self.key_requests.append(shard_key)
        if shard_key in self.shard_keys:  # as a server refuses it
            raise UnexpectedResponse(400, "Bad Request", b"shard key exists", httpx.Headers())
        self.shard_keys[shard_key] = params
        return True

    def list_shard_keys(self, collection_name: str, **_: Any) -> models.ShardKeysResponse:
        return models.ShardKeysResponse(
            shard_keys=[models.ShardKeyDescription(key=k) for k in sorted(self.shard_keys)]
        )

    # -- point operations

    def _route(self, call: str, selector: Any, tenant: str | None) -> None:
        self.selectors.append((call, selector))
        if selector is None:
            if tenant is not None:
                self._breach(f"{call} filters on tenant {tenant!r} but goes to every shard")
            return
        if selector not in self.shard_keys:
            self._breach(f"{call} names shard key {selector!r}, which does not exist")
        if selector != tenant:
            self._breach(f"{call} names shard key {selector!r} but filters on {tenant!r}")

    def upsert(self, collection_name: str, points: Any, **kw: Any) -> Any:
        selector = kw.get("shard_key_selector")
        if selector is None:
            self._breach("upsert without a shard key on a custom-sharded collection")
        tenants = {p.payload["tenant"] for p in points}
        self._route("upsert", selector, tenants.pop() if len(tenants) == 1 else None)
        return self._local.upsert(collection_name, points, **kw)

    def query_points(self, collection_name: str, **kw: Any) -> Any:
        self._route("query_points", kw.get("shard_key_selector"), _tenant(kw["query_filter"]))
        if kw.get("using") == "dense":
            self.dense_params.append(kw.get("search_params"))
        for prefetch in kw.get("prefetch") or []:
            if prefetch.using == "dense":
                self.dense_params.append(prefetch.params)
        return self._local.query_points(collection_name, **kw)

    def count(self, collection_name: str, **kw: Any) -> Any:
        self._route("count", kw.get("shard_key_selector"), _tenant(kw.get("count_filter")))
        return self._local.count(collection_name, **kw)

    def scroll(self, collection_name: str, **kw: Any) -> Any:
        self._route("scroll", kw.get("shard_key_selector"), _tenant(kw.get("scroll_filter")))
        return self._local.scroll(collection_name, **kw)

    def delete(self, collection_name: str, points_selector: Any, **kw: Any) -> Any:
        qfilter = getattr(points_selector, "filter", None)
        self._route("delete", kw.get("shard_key_selector"), _tenant(qfilter))
        return self._local.delete(collection_name, points_selector, **kw)

    def retrieve(self, collection_name: str, **kw: Any) -> Any:
        self._route("retrieve", kw.get("shard_key_selector"), None)
        return self._local.retrieve(collection_name, **kw)

    def set_payload(self, collection_name: str, **kw: Any) -> Any:
        self._route("set_payload", kw.get("shard_key_selector"), None)
        return self._local.set_payload(collection_name, **kw)


def _tenant(qfilter: models.Filter | None) -> str | None:
    """The tenant a qdrant filter's `must` pins (nested `must` groups included)."""
    if qfilter is None:
        return None
    for condition in qfilter.must or []:
        if isinstance(condition, models.FieldCondition) and condition.key == "tenant":
            match = condition.match
            return str(match.value) if isinstance(match, models.MatchValue) else None
        if isinstance(condition, models.Filter):
            found = _tenant(condition)
            if found is not None:
                return found
    return None


class ShardedQdrantStore(QdrantServerVectorStore):
    """The qdrant adapter over `ShardedLocalClient` (kept as `cluster`)."""

    cluster: ShardedLocalClient

    def _connect(self, *_: Any) -> QdrantClient:
        self.cluster = ShardedLocalClient()
        return self.cluster  # type: ignore[return-value]  # stands in for the client
