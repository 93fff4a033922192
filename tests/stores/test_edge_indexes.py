"""The embedded store keeps exactly the payload indexes the port lists: each one costs RAM
on every point (ADR 0600, "index set")."""

from __future__ import annotations

from pathlib import Path

import qdrant_edge as qe

from memoryd.stores.vectors.edge_store import EdgeVectorStore
from memoryd.stores.vectors.port import PAYLOAD_INDEXES, VectorPoint


def _indexes(store: EdgeVectorStore) -> set[str]:
    return set(store._shard.info().payload_schema)


def test_an_index_this_version_no_longer_reads_goes_when_the_store_opens(tmp_path: Path) -> None:
    store = EdgeVectorStore(tmp_path, dim=4)
    # What an earlier version indexed and this one filters without.
    store._shard.update(
        qe.UpdateOperation.create_field_index("task_id", qe.PayloadSchemaType.Keyword)
    )
    point = VectorPoint(
        "00000000-0000-0000-0000-000000000001",
        [1.0, 0.0, 0.0, 0.0],
        payload={"tenant": "t", "user_id": "u", "task_id": "trip"},
    )
    store.upsert([point])
    assert "task_id" in _indexes(store)
    store.close()

    reopened = EdgeVectorStore(tmp_path, dim=4)
    try:
        assert _indexes(reopened) == {name for name, _ in PAYLOAD_INDEXES}
        [kept] = reopened.retrieve([point.id])
        assert kept.payload["task_id"] == "trip"  # the field stays; only its index went
    finally:
        reopened.close()
