"""The MPNet embedders (embedder.provider=mpnet-onnx, mpnet): weights assembled from the
pinned packages and checked, a graph exported from them, the same vectors on both
runtimes, served through gRPC as a 768-dimension space of its own (ADR 0302)."""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from memoryd.stores.embeddings import CachedEmbedder
from memoryd.stores.embeddings._files import sha256_of
from memoryd.stores.embeddings.mpnet import (
    WEIGHTS_SHA256,
    MPNetEmbedder,
    MPNetOnnxEmbedder,
    assembled_model_path,
    exported_graph,
)
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import ServerFactory
from tests.support.rpc import scope

pytestmark = pytest.mark.slow


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def mpnet(cache: Path) -> MPNetEmbedder:
    embedder = MPNetEmbedder(batch_size=8, threads=1, cache_dir=cache)
    embedder.warm()
    return embedder


@pytest.fixture(scope="module")
def mpnet_onnx(cache: Path, mpnet: MPNetEmbedder) -> MPNetOnnxEmbedder:
    embedder = MPNetOnnxEmbedder(1, cache_dir=cache)
    embedder.warm()
    return embedder


def test_names_its_own_space_of_768_normalised_dimensions(mpnet: MPNetEmbedder) -> None:
    assert mpnet.name == "mpnet:all-mpnet-base-v2"
    assert mpnet.dim == 768
    for vector in mpnet.embed(["short", "a much longer sentence about mountains", ""]):
        assert len(vector) == 768
        assert math.sqrt(sum(x * x for x in vector)) == pytest.approx(1.0, abs=1e-5)


def test_related_texts_are_closer_and_a_batch_keeps_its_order(mpnet: MPNetEmbedder) -> None:
    texts = ["I adopted a puppy last week", "The quarterly report is due", "my new dog"]
    batch = mpnet.embed(texts)
    assert cosine(batch[0], batch[2]) > cosine(batch[1], batch[2])
    for text, vector in zip(texts, batch, strict=True):
        [alone] = mpnet.embed([text])
        assert cosine(vector, alone) == pytest.approx(1.0, abs=1e-4)


def test_weights_are_assembled_once_from_the_packages_and_pinned(
    mpnet: MPNetEmbedder, cache: Path
) -> None:
    model = assembled_model_path(cache)
    weights = model / "model.safetensors"
    assert model.parent.parent == cache
    assert sha256_of(weights) == WEIGHTS_SHA256
    modified = weights.stat().st_mtime_ns
    assert assembled_model_path(cache) == model  # found, not assembled again
    assert weights.stat().st_mtime_ns == modified
    assert not [p for p in cache.iterdir() if p.name.startswith(".assemble-")]


def test_a_copy_changed_since_is_assembled_afresh(
    mpnet: MPNetEmbedder, cache: Path, tmp_path: Path
) -> None:
    # A copy of the module's assembled model (one assembly less than making it here).
    model = assembled_model_path(cache)
    shutil.copytree(model.parent.parent, tmp_path / model.parent.parent.name)
    weights = assembled_model_path(tmp_path) / "model.safetensors"
    assert weights.parent.parent.parent == tmp_path
    with weights.open("r+b") as f:
        f.seek(1_000_000)
        f.write(b"\x00\x01\x02\x03")
    assert sha256_of(weights) != WEIGHTS_SHA256

    again = assembled_model_path(tmp_path) / "model.safetensors"
    assert again == weights
    assert sha256_of(again) == WEIGHTS_SHA256


def test_parts_that_do_not_join_to_the_pinned_zip_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forged = tmp_path / "part.001"
    forged.write_bytes(os.urandom(4096))
    monkeypatch.setattr("memoryd.stores.embeddings.mpnet.part_paths", lambda: [forged])
    cache = tmp_path / "models"

    with pytest.raises(RuntimeError, match="sha256"):
        assembled_model_path(cache)
    assert list(cache.iterdir()) == []  # nothing half-made is left to be found later


def test_the_onnx_runtime_gives_the_torch_models_vectors(
    mpnet: MPNetEmbedder, mpnet_onnx: MPNetOnnxEmbedder
) -> None:
    assert (mpnet_onnx.name, mpnet_onnx.dim) == (mpnet.name, mpnet.dim)
    assert mpnet_onnx.variant == "onnx-float"
    texts = ["User enjoys skiing", "", "a turn cut at the model's 384 tokens " * 60, "ok"]
    for got, want in zip(mpnet_onnx.embed(texts), mpnet.embed(texts), strict=True):
        assert cosine(got, want) == pytest.approx(1.0, abs=1e-4)


def test_the_exported_graph_is_kept_with_its_checksum_and_reused(
    mpnet_onnx: MPNetOnnxEmbedder, cache: Path
) -> None:
    graph = exported_graph(cache)
    assert graph.parent == assembled_model_path(cache).parent
    assert graph.with_suffix(".sha256").read_text().strip() == sha256_of(graph)
    modified = graph.stat().st_mtime_ns
    assert exported_graph(cache) == graph
    assert graph.stat().st_mtime_ns == modified


async def test_serves_add_and_retrieve_through_grpc(
    start_server: ServerFactory, mpnet_onnx: MPNetOnnxEmbedder
) -> None:
    server = await start_server(model=CachedEmbedder(mpnet_onnx))
    assert server.app.vectors.dim == 768
    for text in ("Caroline adopted a puppy named Biscuit", "Melanie ran a half marathon"):
        await server.stub.Add(pb.AddRequest(scope=scope("u"), tier=pb.TIER_LONG_TERM, content=text))
    found = await server.stub.Retrieve(
        pb.RetrieveRequest(scope=scope("u"), query="What is the name of Caroline's dog?", top_k=1)
    )
    assert [item.content for item in found.items] == ["Caroline adopted a puppy named Biscuit"]
