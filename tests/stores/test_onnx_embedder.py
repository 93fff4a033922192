"""MiniLM on ONNX Runtime: the same vector space as the torch model, from a pinned file.

Parity is measured against the torch embedder (the pinned model) on every memory and
query of the golden set; the recall checks that decide int8 are in ADR 0300 and 0301.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.dataset import DEFAULT_DATASET, load_dataset
from memoryd.stores.embeddings import MiniLMEmbedder, MiniLMOnnxEmbedder
from memoryd.stores.embeddings.minilm_onnx import (
    MODEL_SHA256,
    _load_tokenizer,
    _runs,
    calibration_texts,
    packaged_model_path,
    prepare_quantized,
    verified_source,
)
from tests.unit.unit_kit import LIVENESS_S

pytestmark = pytest.mark.slow


def golden_sentences() -> list[str]:
    dataset = load_dataset(DEFAULT_DATASET)
    texts = [m.content for m in dataset.memories] + [c.query for c in dataset.cases]
    return list(dict.fromkeys(texts))


def cosines(
    a: Sequence[Sequence[float]] | np.ndarray, b: Sequence[Sequence[float]] | np.ndarray
) -> np.ndarray:
    products: np.ndarray = np.sum(np.asarray(a) * np.asarray(b), axis=1)
    return products  # both sides are unit vectors


@pytest.fixture(scope="module")
def int8() -> MiniLMOnnxEmbedder:
    """The default: static int8 (fixed activation scales), texts batched."""
    embedder = MiniLMOnnxEmbedder()
    embedder.warm()
    return embedder


@pytest.fixture(scope="module")
def int8_dynamic() -> MiniLMOnnxEmbedder:
    embedder = MiniLMOnnxEmbedder(quantization="dynamic")
    embedder.warm()
    return embedder


@pytest.fixture(scope="module")
def torch_vectors() -> list[list[float]]:
    return MiniLMEmbedder(threads=1).embed(golden_sentences())


def test_it_claims_the_torch_models_space_under_its_own_variant(
    int8: MiniLMOnnxEmbedder,
) -> None:
    assert (int8.name, int8.dim) == (MiniLMEmbedder().name, 384)
    assert int8.variant == "onnx-int8s"
    assert MiniLMOnnxEmbedder(quantization="dynamic").variant == "onnx-int8"
    assert MiniLMOnnxEmbedder(quantized=False).variant == "onnx-float"
    assert int8.batches and not MiniLMOnnxEmbedder(quantization="dynamic").batches


def test_vectors_are_l2_normalised(int8: MiniLMOnnxEmbedder) -> None:
    for vector in int8.embed(["short", "a much longer sentence about mountains", "", "x " * 400]):
        assert len(vector) == 384
        assert math.sqrt(sum(x * x for x in vector)) == pytest.approx(1.0, abs=1e-5)


MIXED = ["hello world", "Ana is allergic to shellfish", "x " * 300, "tea", "", "a b c " * 20]


def test_a_texts_vector_does_not_depend_on_its_batch(int8: MiniLMOnnxEmbedder) -> None:
    """Static scales and the attention mask: padding and neighbours change nothing but
    float rounding, whatever the batch's lengths."""
    alone = [int8.embed([text])[0] for text in MIXED]
    for batch in (MIXED, MIXED[::-1], MIXED[1:4], [MIXED[0], *golden_sentences()[:100]]):
        vectors = int8.embed(batch)
        for text, vector in zip(batch, vectors, strict=True):
            if text in MIXED:
                cos = float(np.dot(vector, alone[MIXED.index(text)]))
                assert cos >= 0.99999, (text[:20], cos)


def test_a_batch_runs_in_runs_of_like_lengths_so_little_is_padded() -> None:
    # A turn (80 characters) and the same turn after its lead (160): two runs, not one
    # padding the turn to twice its length; texts within half again of a run's shortest
    # (and a few characters more) share it, up to 64 a run.
    lengths = [80, 160, 85, 100, 136, 10, 30]
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    assert _runs(order, lengths) == [[5, 6], [0, 2, 3, 4], [1]]
    assert [len(r) for r in _runs(list(range(130)), [50] * 130)] == [64, 64, 2]


def test_two_threads_embed_at_once_with_the_same_vectors(
    int8: MiniLMOnnxEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batcher runs two calls at once on a local model (a core each): both must be
    inside the model together, and each text keeps its vector."""
    expected = {text: int8.embed([text])[0] for text in MIXED}
    inside = threading.Barrier(2, timeout=LIVENESS_S)  # broken if one waits on the other
    run = MiniLMOnnxEmbedder._run

    def meeting(*args: Any) -> Any:
        inside.wait()
        return run(*args)

    monkeypatch.setattr(MiniLMOnnxEmbedder, "_run", staticmethod(meeting))
    with ThreadPoolExecutor(2) as pool:
        halves = list(pool.map(lambda texts: int8.embed(texts), [MIXED[:3], MIXED[3:]]))
    for text, vector in zip(MIXED, halves[0] + halves[1], strict=True):
        assert float(np.dot(vector, expected[text])) >= 0.99999, text[:20]


def test_dynamic_int8_runs_each_text_alone(int8_dynamic: MiniLMOnnxEmbedder) -> None:
    batch = int8_dynamic.embed(MIXED)
    for text, vector in zip(MIXED, batch, strict=True):
        assert int8_dynamic.embed([text]) == [vector]


@pytest.mark.parametrize("quantization", ["static", "dynamic"])
def test_int8_vectors_match_the_torch_model(
    quantization: str,
    int8: MiniLMOnnxEmbedder,
    int8_dynamic: MiniLMOnnxEmbedder,
    torch_vectors: list[list[float]],
) -> None:
    embedder = int8 if quantization == "static" else int8_dynamic
    cos = cosines(embedder.embed(golden_sentences()), torch_vectors)
    # int8 moves a vector by at most 2 % in angle; recall is unchanged (ADR 0301).
    assert cos.mean() > 0.99
    assert cos.min() > 0.98


def test_the_static_graphs_products_are_exact_on_any_cpu(int8: MiniLMOnnxEmbedder) -> None:
    # Weights are uint8 (zero point 128): every product is u8 x u8, which ONNX Runtime
    # sums exactly on every x86 CPU. Signed int8 weights (recipe v2) went through AVX2's
    # saturating vpmaddubsw, so vectors depended on the CPU (ADR 0301, CPUs without VNNI).
    import onnx
    import onnxruntime
    from onnx import numpy_helper

    graph = prepare_quantized()
    model = onnx.load(str(graph))
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    dequantized = [
        (weights[node.input[0]], weights[node.input[2]])
        for node in model.graph.node
        if node.op_type == "DequantizeLinear" and weights.get(node.input[0], np.zeros(0)).ndim == 2
    ]
    assert len(dequantized) == 36  # the 6 layers' q, k, v, output and feed-forward MatMuls
    assert all(w.dtype == np.uint8 and (zero == 128).all() for w, zero in dequantized)

    # This CPU's fused int8 kernels against the same graph without ONNX Runtime's fusions
    # (DequantizeLinear + float MatMul: the exact products). With int8 weights on AVX2
    # without VNNI: mean 0.9927, min 0.984. What remains is float rounding of the fused
    # float ops flipping an activation's rounding on a few texts.
    def session(level: Any) -> Any:
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = level
        options.intra_op_num_threads = 1
        return onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])

    levels = onnxruntime.GraphOptimizationLevel
    fused, exact = session(levels.ORT_ENABLE_ALL), session(levels.ORT_DISABLE_ALL)
    tokenizer = _load_tokenizer()
    texts = golden_sentences()
    chunks = [texts[i : i + 64] for i in range(0, len(texts), 64)]
    cos = cosines(
        np.concatenate([MiniLMOnnxEmbedder._run(fused, tokenizer, c) for c in chunks]),
        np.concatenate([MiniLMOnnxEmbedder._run(exact, tokenizer, c) for c in chunks]),
    )
    assert cos.mean() > 0.999
    assert cos.min() > 0.99


def test_float_vectors_match_the_torch_model_closely(torch_vectors: list[list[float]]) -> None:
    cos = cosines(MiniLMOnnxEmbedder(quantized=False).embed(golden_sentences()), torch_vectors)
    assert cos.min() > 0.995


def test_related_texts_are_closer(int8: MiniLMOnnxEmbedder) -> None:
    skiing, coffee, query = int8.embed(
        ["User enjoys skiing", "User likes coffee with mountain view", "skiing preferences"]
    )
    assert float(np.dot(skiing, query)) > float(np.dot(coffee, query))


def test_the_packaged_model_is_checked_by_sha256(tmp_path: Path) -> None:
    assert verified_source() == packaged_model_path()
    altered = tmp_path / "model.onnx"
    altered.write_bytes(packaged_model_path().read_bytes()[:-1] + b"\0")
    with pytest.raises(RuntimeError, match=MODEL_SHA256):
        MiniLMOnnxEmbedder(model_path=altered).warm()


def test_the_calibration_corpus_is_shipped_and_not_the_eval_data() -> None:
    texts = calibration_texts()
    assert len(texts) >= 300
    assert not set(texts) & set(golden_sentences())


def test_the_static_graph_is_deterministic(int8: MiniLMOnnxEmbedder, tmp_path: Path) -> None:
    # `int8` derived the default cache's graph; a fresh derivation gives the same bytes.
    assert prepare_quantized(tmp_path).read_bytes() == prepare_quantized().read_bytes()
    assert prepare_quantized(tmp_path).name.startswith("minilm-l6-int8s-")


def test_the_int8_graph_is_derived_once_and_again_when_damaged(tmp_path: Path) -> None:
    # The caching is the same for both recipes; the dynamic one derives faster.
    cache = tmp_path / "not" / "there" / "yet"
    first = prepare_quantized(cache, quantization="dynamic")
    checksum = first.with_suffix(".sha256")
    assert first.is_file() and checksum.is_file()
    made = first.stat().st_mtime_ns
    assert prepare_quantized(cache, quantization="dynamic") == first
    assert first.stat().st_mtime_ns == made  # reused, not derived again

    original = first.read_bytes()
    first.write_bytes(original[: len(original) // 2])
    assert prepare_quantized(cache, quantization="dynamic") == first
    assert first.read_bytes() == original  # derivation is deterministic
    assert sorted(p.name for p in cache.iterdir()) == [first.name, checksum.name]


def test_a_graph_in_a_shared_cache_is_used_where_it_is(tmp_path: Path) -> None:
    # `memoryd prepare-embedder` fills the user's cache; a fresh data directory reads it.
    shared = tmp_path / "user-cache"
    made = prepare_quantized(shared, quantization="dynamic")
    data_models = tmp_path / "data" / "models"
    assert prepare_quantized(data_models, quantization="dynamic", shared=[shared]) == made
    assert not data_models.exists()  # nothing derived, nothing copied

    made.write_bytes(made.read_bytes()[:100])  # a damaged shared graph is not used
    own = prepare_quantized(data_models, quantization="dynamic", shared=[shared])
    assert own.parent == data_models and own.name == made.name
