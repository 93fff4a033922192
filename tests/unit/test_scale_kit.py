"""The benchmarks' ground truth (benchmarks/scale_kit.py): exact search, recall@k,
percentiles and the synthetic memories. A wrong ground truth would make every recall
figure in benchmarks/README.md meaningless, so it is pinned here."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scale_kit", ROOT / "benchmarks/scale_kit.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kit = _load()


class TestExactTopK:
    def test_orders_rows_by_cosine_not_by_length(self) -> None:
        corpus = np.array([[10.0, 0.0], [0.6, 0.8], [0.0, 0.1], [-1.0, 0.0]], dtype=np.float32)
        # Cosines to (0, 1): 0, 0.8, 1, 0 -- the long first row does not win.
        assert kit.exact_top_k(corpus, [0.0, 1.0], 3) == [2, 1, 0]

    def test_ties_keep_row_order(self) -> None:
        corpus = np.array([[1.0, 0.0], [2.0, 0.0], [1.0, 0.0]], dtype=np.float32)
        assert kit.exact_top_k(corpus, [1.0, 0.0], 2) == [0, 1]

    def test_k_beyond_the_corpus_returns_every_row(self) -> None:
        corpus = np.eye(3, dtype=np.float32)
        assert sorted(kit.exact_top_k(corpus, [1.0, 1.0, 1.0], 10)) == [0, 1, 2]

    def test_k_must_be_positive(self) -> None:
        with pytest.raises(ValueError):
            kit.exact_top_k(np.eye(2, dtype=np.float32), [1.0, 0.0], 0)


class TestRecallAtK:
    def test_share_of_the_exact_top_k_found(self) -> None:
        assert kit.recall_at_k(["a", "x", "c"], ["a", "b", "c"], 3) == pytest.approx(2 / 3)

    def test_order_within_the_top_k_does_not_matter(self) -> None:
        assert kit.recall_at_k(["c", "b", "a"], ["a", "b", "c"], 3) == 1.0

    def test_hits_past_k_do_not_count(self) -> None:
        assert kit.recall_at_k(["x", "y", "a"], ["a", "b"], 2) == 0.0

    def test_fewer_hits_than_k(self) -> None:
        assert kit.recall_at_k(["a"], ["a", "b", "c", "d"], 4) == 0.25

    def test_nothing_to_find_is_full_recall(self) -> None:
        assert kit.recall_at_k([], [], 10) == 1.0


class TestPercentile:
    def test_nearest_rank(self) -> None:
        samples = [float(x) for x in range(1, 101)]  # 1..100
        assert kit.percentile(samples, 50) == 50.0
        assert kit.percentile(samples, 99) == 99.0
        assert kit.percentile(samples, 100) == 100.0
        assert kit.percentile(samples, 0) == 1.0

    def test_p99_of_few_samples_is_the_maximum(self) -> None:
        assert kit.percentile([3.0, 1.0, 2.0], 99) == 3.0

    def test_empty_sample_is_refused(self) -> None:
        with pytest.raises(ValueError):
            kit.percentile([], 50)


class TestSyntheticMemories:
    def test_unit_vectors_near_their_first_sentence_and_deterministic(self) -> None:
        rng = np.random.default_rng(0)
        base = kit.normalise(rng.normal(size=(50, 16)))
        a, b, vectors = kit.synthetic_memories(base, 200, seed=3)
        again = kit.synthetic_memories(base, 200, seed=3)
        assert np.array_equal(vectors, again[2])
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        # Each memory is closer to its sentence a than the average sentence is.
        own = np.einsum("ij,ij->i", vectors, base[a])
        assert (own > (vectors @ base.T).mean(axis=1)).all()
        assert len(b) == 200

    def test_memory_texts_are_distinct_pairs(self) -> None:
        sentences = [f"sentence {i}." for i in range(10)]
        texts = kit.memory_texts(sentences, 60, seed=1)
        assert len(texts) == len(set(texts)) == 60
        assert kit.memory_texts(sentences, 60, seed=1) == texts
        with pytest.raises(ValueError):
            kit.memory_texts(sentences, 91, seed=1)


def test_memory_ids_are_stable_uuids() -> None:
    assert kit.memory_id(3, 7) == kit.memory_id(3, 7)
    assert kit.memory_id(3, 7) != kit.memory_id(7, 3)
