"""The qdrant adapter's collection on a cluster: what it is created with, from the
`qdrant` settings block (MEMORYD_QDRANT__*), and how it is refused where it cannot work.

qdrant-client's local mode keeps only the vectors and metadata of a collection, so the
parameters are checked as the adapter builds and sends them: valid for Qdrant's REST model
(which refuses unknown fields) and convertible to its gRPC messages (the client prefers
gRPC). Behaviour under custom sharding is in the congruence suite (``qdrant-tenant``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from qdrant_client import models
from qdrant_client.conversions.conversion import RestToGrpc

from memoryd.app import open_vector_store
from memoryd.core.startup import StartupRefused
from memoryd.settings import InvalidSettings, Settings, check_environment
from memoryd.stores.vectors import cluster_layout
from memoryd.stores.vectors.port import (
    DENSE_VECTOR,
    Filter,
    MatchValue,
    VectorPoint,
)
from memoryd.stores.vectors.qdrant_server_store import (
    ClusterLayout,
    collection_params,
    search_params,
)
from tests.support.vector_stores import CLUSTER_SETTINGS, ShardedQdrantStore

DIM = 4


def layout_of(**qdrant: object) -> ClusterLayout:
    """The layout the server builds from these settings (as vectors.ADAPTERS does)."""
    return cluster_layout(Settings.explicit(qdrant=qdrant).qdrant)


def as_sent(params: dict[str, object]) -> models.CreateCollection:
    """The REST request body (extra fields refused), and its gRPC parts convert."""
    body = models.CreateCollection(
        vectors=params["vectors_config"],
        sparse_vectors=params["sparse_vectors_config"],
        hnsw_config=params["hnsw_config"],
        sharding_method=params["sharding_method"],
        shard_number=params["shard_number"],
        replication_factor=params["replication_factor"],
        write_consistency_factor=params["write_consistency_factor"],
        on_disk_payload=params["on_disk_payload"],
        quantization_config=params["quantization_config"],
    )
    assert body.hnsw_config is not None and body.sharding_method is not None
    RestToGrpc.convert_hnsw_config_diff(body.hnsw_config)
    RestToGrpc.convert_sharding_method(body.sharding_method)
    if body.quantization_config is not None:
        RestToGrpc.convert_quantization_config(body.quantization_config)
    return body


def test_by_default_the_collection_follows_the_multitenancy_guide_on_automatic_shards() -> None:
    body = as_sent(collection_params(layout_of(), DIM))
    # No global graph; one small graph per tenant and per user (the is_tenant indexes).
    assert body.hnsw_config == models.HnswConfigDiff(m=0, payload_m=16)
    assert body.sharding_method is models.ShardingMethod.AUTO
    assert body.shard_number is None  # the server's default: one shard per node
    assert (body.replication_factor, body.write_consistency_factor) == (1, 1)
    assert body.on_disk_payload is True
    assert body.quantization_config is None
    assert isinstance(body.vectors, dict)
    assert body.vectors[DENSE_VECTOR].on_disk is False
    assert search_params(layout_of()) is None


def test_cluster_settings_give_custom_sharding_replication_and_int8_with_rescoring() -> None:
    layout = layout_of(**CLUSTER_SETTINGS, shard_number=2, oversampling=3.0)
    body = as_sent(collection_params(layout, DIM))
    assert body.sharding_method is models.ShardingMethod.CUSTOM
    assert body.shard_number == 2  # per tenant's shard key
    assert (body.replication_factor, body.write_consistency_factor) == (2, 2)
    assert isinstance(body.vectors, dict)
    assert body.vectors[DENSE_VECTOR].on_disk is True  # the originals, read to rescore
    assert body.quantization_config == models.ScalarQuantization(
        scalar=models.ScalarQuantizationConfig(
            type=models.ScalarType.INT8, quantile=0.99, always_ram=True
        )
    )
    assert search_params(layout) == models.SearchParams(
        quantization=models.QuantizationSearchParams(rescore=True, oversampling=3.0)
    )
    # One shard per tenant unless told otherwise.
    assert collection_params(layout_of(sharding="tenant"), DIM)["shard_number"] == 1


def test_the_settings_are_read_from_the_environment_and_checked() -> None:
    env = {
        "MEMORYD_QDRANT__SHARDING": "tenant",
        "MEMORYD_QDRANT__REPLICATION_FACTOR": "3",
        "MEMORYD_QDRANT__WRITE_CONSISTENCY_FACTOR": "2",
        "MEMORYD_QDRANT__QUANTIZATION": "int8",
    }
    check_environment(env)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        qdrant = Settings().qdrant
    assert (qdrant.sharding, qdrant.replication_factor, qdrant.write_consistency_factor) == (
        "tenant",
        3,
        2,
    )
    with pytest.raises(ValueError, match="cannot exceed replication_factor"):
        Settings.explicit(qdrant={"replication_factor": 1, "write_consistency_factor": 2})
    with pytest.raises(ValueError):
        Settings.explicit(qdrant={"sharding": "user"})
    with pytest.raises((ValueError, InvalidSettings)):
        Settings.explicit(qdrant={"shard_numbr": 2})


def test_the_sharded_store_sends_the_collection_parameters_of_its_settings() -> None:
    store = ShardedQdrantStore(location=":memory:", dim=DIM, layout=layout_of(**CLUSTER_SETTINGS))
    try:
        assert store.cluster.created == collection_params(layout_of(**CLUSTER_SETTINGS), DIM)
        # What local mode keeps of it reads back as sent.
        info = store.cluster.get_collection("memories")
        assert isinstance(info.config.params.vectors, dict)
        dense = info.config.params.vectors[DENSE_VECTOR]
        assert (dense.size, dense.distance) == (DIM, models.Distance.COSINE)
        # A tenant's shard key is created on its first use, once, and found by a search.
        point = VectorPoint(
            "00000000-0000-0000-0000-000000000001",
            [1.0, 0.0, 0.0, 0.0],
            payload={"tenant": "acme", "user_id": "ana"},
        )
        store.upsert([point])
        store.upsert([point])
        scope = Filter(must=[MatchValue("tenant", "acme"), MatchValue("user_id", "ana")])
        assert [h.id for h in store.search(scope, dense=[1.0, 0.0, 0.0, 0.0])] == [point.id]
        assert list(store.cluster.shard_keys) == ["acme"]
        assert store.cluster.violations == []
        with pytest.raises(ValueError, match="payload tenant"):
            store.upsert([VectorPoint(point.id, [1.0, 0.0, 0.0, 0.0], payload={"user_id": "x"})])
    finally:
        store.close()


def test_a_read_never_creates_a_shard_key_and_a_tenant_without_one_has_nothing() -> None:
    store = ShardedQdrantStore(location=":memory:", dim=DIM, layout=layout_of(**CLUSTER_SETTINGS))
    try:
        nobody = Filter(must=[MatchValue("tenant", "hooli"), MatchValue("user_id", "u")])
        assert store.count(nobody) == 0
        assert store.count_each(nobody, "term_ids", [1, 2]) == [0, 0]
        assert store.scroll(nobody) == ([], None)
        assert store.scroll(nobody, order_by="created_at") == ([], None)
        assert store.search(nobody, dense=[1.0, 0.0, 0.0, 0.0]) == []
        assert store.delete_where(nobody) == 0
        assert store.cluster.key_requests == [] and store.cluster.shard_keys == {}
        # Once another replica has written the tenant, a read finds its key and its points.
        store.cluster.shard_keys["hooli"] = {}
        point = VectorPoint(
            "00000000-0000-0000-0000-000000000003",
            [1.0, 0.0, 0.0, 0.0],
            payload={"tenant": "hooli", "user_id": "u"},
        )
        store.upsert([point])
        store._shard_keys.discard("hooli")  # as a replica that has not seen the key yet
        assert store.count(nobody) == 1
        assert store.cluster.violations == []
    finally:
        store.close()


def test_replicas_share_the_shard_keys_whoever_created_them() -> None:
    """A key made by another replica before this one opened is known from the server's
    list; one made after is found when creating it is refused."""
    store = ShardedQdrantStore(location=":memory:", dim=DIM, layout=layout_of(**CLUSTER_SETTINGS))
    try:
        cluster = store.cluster
        cluster.shard_keys["globex"] = {}  # before this replica's open (see below)
        store._list_shard_keys()  # what opening the collection does
        store.count(Filter(must=[MatchValue("tenant", "globex")]))
        assert cluster.key_requests == []
        cluster.shard_keys["initech"] = {}  # by another replica, after
        store.upsert(
            [
                VectorPoint(
                    "00000000-0000-0000-0000-000000000002",
                    [0.0, 1.0, 0.0, 0.0],
                    payload={"tenant": "initech", "user_id": "bo"},
                )
            ]
        )
        assert cluster.key_requests == ["initech"]
        assert store.count(Filter(must=[MatchValue("tenant", "initech")])) == 1
        assert cluster.violations == []
    finally:
        store.close()


def test_local_mode_refuses_sharding_by_tenant_at_start_up_naming_the_setting(
    tmp_path: Path,
) -> None:
    settings = Settings.explicit(
        data_dir=tmp_path,
        vectors={"backend": "qdrant"},
        qdrant={"location": ":memory:", "sharding": "tenant"},
    )
    with pytest.raises(StartupRefused) as refused:
        open_vector_store(settings, DIM)
    message = str(refused.value)
    assert "qdrant.sharding = 'tenant' needs custom sharding" in message
    assert "reindex" not in message  # the vectors are not the problem
