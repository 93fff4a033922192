"""A store whose keyword (BM25) vectors were written by another sparse encoder is never
searched with ours: start-up is refused, and `memoryd reindex` re-encodes every memory's
sparse vector and term ids so that keyword search finds them again."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from memoryd.app import build_app, check_embedder_matches
from memoryd.cli.reindex import reindex
from memoryd.core.memory.payload import embed_text_of
from memoryd.core.memory.term_space import TERM_SPACE_KEY, USER, in_term_space
from memoryd.core.retrieval.bm25 import ENCODER_NAME, BM25Encoder
from memoryd.core.startup import StartupRefused
from memoryd.settings import Settings
from memoryd.stores.embeddings.port import Embedder
from memoryd.stores.vectors.edge_store import EdgeVectorStore
from memoryd.stores.vectors.port import TERMS_FIELD, SparseVector, VectorPoint
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import ServerFactory
from tests.support.rpc import scope

LT = pb.TIER_LONG_TERM
MEMORIES = ["User enjoys skiing", "User avoids advanced slopes", "User drinks green tea"]


def written_by_another_encoder(vectors_dir: Path, dim: int) -> None:
    """Rewrite the store as another sparse encoder would leave it: its own term ids (none
    of them Qdrant's), no term ids in the payloads, no encoder in the metadata."""
    store = EdgeVectorStore(vectors_dir, dim)
    try:
        points, _ = store.scroll(limit=100, with_vectors=True)
        rewritten = []
        for point in points:
            payload = {k: v for k, v in point.payload.items() if k != TERMS_FIELD}
            assert point.dense is not None
            rewritten.append(
                VectorPoint(
                    id=point.id,
                    dense=point.dense,
                    sparse=SparseVector(indices=[7, 8], values=[1.0, 1.0]),
                    payload=payload,
                )
            )
        store.upsert(rewritten)
        meta = store.read_meta() or {}
        store.write_meta({k: v for k, v in meta.items() if k != "sparse"})
    finally:
        store.close()


async def test_a_store_of_another_encoder_is_refused_then_reindexed_and_found_by_keyword(
    start_server: ServerFactory, embedder: Embedder, tmp_path: Path
) -> None:
    data = tmp_path / "store"
    first = await start_server(data_dir=data)
    for content in MEMORIES:
        await first.stub.Add(pb.AddRequest(scope=scope("u"), tier=LT, content=content))
    await first.server.stop(grace_s=0)
    written_by_another_encoder(data / "vectors", embedder.dim)

    # Reindexed into each user's own term ids (ADR 0601), as configured.
    settings = Settings.explicit(
        data_dir=data, retrieval={"mode": "keyword"}, vectors={"term_space": "user"}
    )
    with pytest.raises(StartupRefused) as refused:
        await build_app(settings, embedder=embedder)
    message = str(refused.value)
    assert "keyword (BM25)" in message and "memoryd reindex" in message

    assert reindex(settings, embedder, lambda done, total: None) == len(MEMORIES)

    encoder = BM25Encoder()
    raw = EdgeVectorStore(data / "vectors", embedder.dim)
    try:
        meta = raw.read_meta() or {}
        assert meta["sparse"] == ENCODER_NAME
        assert meta[TERM_SPACE_KEY] == USER
        store = in_term_space(raw, meta)
        points, _ = store.scroll(limit=100, with_vectors=True)
        assert len(points) == len(MEMORIES)
        for point in points:
            text = embed_text_of(point.payload)
            assert point.payload[TERMS_FIELD] == encoder.term_ids(text)
            assert point.sparse is not None
            assert sorted(point.sparse.indices) == encoder.term_ids(text)
        stored, _ = raw.scroll(limit=1)
        assert stored[0].payload[TERMS_FIELD] != encoder.term_ids(embed_text_of(stored[0].payload))
    finally:
        raw.close()

    # Keyword mode searches the sparse vectors alone: they match our queries again.
    second = await start_server(data_dir=data, retrieval={"mode": "keyword"})
    found = await second.stub.Retrieve(
        pb.RetrieveRequest(scope=scope("u"), tiers=[LT], query="skiing")
    )
    assert [item.content for item in found.items] == ["User enjoys skiing"]


async def test_an_empty_store_without_a_recorded_encoder_is_simply_adopted(
    start_server: ServerFactory, embedder: Embedder, tmp_path: Path
) -> None:
    data = tmp_path / "store"
    first = await start_server(data_dir=data)
    await first.server.stop(grace_s=0)
    written_by_another_encoder(data / "vectors", embedder.dim)

    second = await start_server(data_dir=data)
    added = await second.stub.Add(pb.AddRequest(scope=scope("u"), tier=LT, content=MEMORIES[0]))
    assert added.memory_id
    assert (second.app.vectors.read_meta() or {})["sparse"] == ENCODER_NAME


def test_a_new_store_records_the_configured_term_space_and_an_old_one_stays_shared(
    embedder: Embedder, tmp_path: Path
) -> None:
    for space in ("shared", "user"):
        store = EdgeVectorStore(tmp_path / space, embedder.dim)
        check_embedder_matches(store, embedder, space)
        assert (store.read_meta() or {})[TERM_SPACE_KEY] == space
        store.close()
    # Memories written before stores recorded anything: their ids are in the shared space.
    old = EdgeVectorStore(tmp_path / "old", embedder.dim)
    old.upsert(
        [
            VectorPoint(
                id=str(uuid.UUID(int=1)),
                dense=[1.0] * embedder.dim,
                payload={"tenant": "t", "user_id": "u"},
            )
        ]
    )
    check_embedder_matches(old, embedder, "user")
    assert (old.read_meta() or {})[TERM_SPACE_KEY] == "shared"
    old.close()
