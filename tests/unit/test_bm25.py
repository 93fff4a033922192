"""BM25 sparse encoding (Qdrant's BM25 model): stable term ids, what counts as one term,
and the term-frequency weights."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.core.retrieval.bm25 import DEFAULT_K1, BM25Encoder
from memoryd.stores.vectors.port import SparseVector

SERVICE_ROOT = Path(__file__).resolve().parents[2] / "service"

# Recorded from qdrant_edge.Bm25 (English word tokens, Snowball stems). If these change,
# every sparse vector already stored stops matching new queries: `memoryd reindex` is due.
EXPECTED_IDS = {"ski": 261488321, "coffee": 319761691}

encoder = BM25Encoder()


def weight_of(vector: SparseVector, term: str, model: BM25Encoder = encoder) -> float:
    [term_id] = model.term_ids(term)
    return dict(zip(vector.indices, vector.values, strict=True))[term_id]


def filler(n: int) -> str:
    """n distinct content words (none is a stop word, none stems to "ski")."""
    return " ".join(f"word{i}" for i in range(n))


class TestTermIds:
    def test_ids_match_the_recorded_values(self) -> None:
        for term, expected in EXPECTED_IDS.items():
            assert encoder.term_ids(term) == [expected]

    def test_ids_are_identical_in_another_process_with_another_hash_seed(self) -> None:
        script = (
            "import json; from memoryd.core.retrieval.bm25 import BM25Encoder; "
            "v = BM25Encoder().encode_query('skiing coffee'); print(json.dumps(list(v.indices)))"
        )
        env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(SERVICE_ROOT)}
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        assert json.loads(out.stdout) == sorted(EXPECTED_IDS.values())
        assert list(encoder.encode_query("skiing coffee").indices) == sorted(EXPECTED_IDS.values())

    def test_ids_are_unsigned_32_bit(self) -> None:
        for text in ("ski", "日本語", "x" * 1000, "2024"):
            assert all(0 <= i < 2**32 for i in encoder.term_ids(text))

    def test_term_ids_are_the_dimensions_of_the_sparse_vectors(self) -> None:
        text = "Maria adopted a dog; the dog sleeps on Maria's sofa"
        ids = encoder.term_ids(text)
        assert ids == sorted(set(ids))
        assert list(encoder.encode_document(text).indices) == ids
        assert list(encoder.encode_query(text).indices) == ids


class TestWhatCountsAsATerm:
    def test_case_and_stop_words_do_not_matter(self) -> None:
        assert encoder.term_ids("The user IS at the Mountain and it was cold") == (
            encoder.term_ids("user mountain cold")
        )

    def test_only_stop_words_give_empty_vectors(self) -> None:
        assert encoder.encode_query("the and of it is").is_empty
        assert encoder.encode_document("the and of it is").is_empty
        assert encoder.encode_document("").is_empty

    def test_punctuation_apostrophes_and_underscores_split_words(self) -> None:
        assert encoder.term_ids("user's favourite_drink: coffee!") == (
            encoder.term_ids("user favourite drink coffee")
        )

    def test_numbers_and_unicode_words_are_terms(self) -> None:
        assert len(encoder.term_ids("room 101 in 2024")) == 3
        assert encoder.term_ids("Café CAFÉ") == encoder.term_ids("café")
        assert len(encoder.term_ids("日本語")) == 1

    @pytest.mark.parametrize("word", ["skiing", "skis", "ski", "skied", "Ski"])
    def test_ski_family_shares_one_term(self, word: str) -> None:
        assert encoder.term_ids(word) == [EXPECTED_IDS["ski"]]

    def test_stemmed_query_matches_differently_inflected_document(self) -> None:
        query = encoder.encode_query("skiing preferences")
        document = encoder.encode_document("The user prefers to ski in the Alps")
        assert set(query.indices) <= set(document.indices)

    def test_distinct_words_get_distinct_ids(self) -> None:
        words = ["ski", "coffee", "tea", "mountain", "dog", "cat", "berlin", "python"]
        ids = [encoder.term_ids(w) for w in words]
        assert all(len(i) == 1 for i in ids)
        assert len({i[0] for i in ids}) == len(words)


class TestDocumentWeights:
    def test_single_occurrence_in_a_document_of_average_length_weighs_one(self) -> None:
        # tf=1, dl=avg_len (40): 1 * (k1 + 1) / (1 + k1) == 1
        doc = encoder.encode_document("ski " + filler(39))
        assert weight_of(doc, "ski") == pytest.approx(1.0)

    def test_matches_the_bm25_formula(self) -> None:
        model = BM25Encoder(k1=1.5, b=0.5, avg_doc_len=10.0)
        doc = model.encode_document("ski ski ski " + filler(2))  # tf=3, dl=5
        expected = 3 * 2.5 / (3 + 1.5 * (1 - 0.5 + 0.5 * 5 / 10))
        assert weight_of(doc, "ski", model) == pytest.approx(expected, rel=1e-6)

    def test_repeated_terms_saturate(self) -> None:
        # Same document length (40) throughout, so only the term frequency changes.
        documents = [" ".join(["ski"] * tf) + " " + filler(40 - tf) for tf in (1, 2, 4, 8, 16)]
        weights = [weight_of(encoder.encode_document(d), "ski") for d in documents]
        assert weights == sorted(weights)
        gains = [b - a for a, b in itertools.pairwise(weights)]
        per_occurrence = [gain / n for gain, n in zip(gains, (1, 2, 4, 8), strict=True)]
        assert per_occurrence == sorted(per_occurrence, reverse=True)
        assert weights[-1] < DEFAULT_K1 + 1

    def test_longer_documents_give_lower_weight_per_term(self) -> None:
        short = weight_of(encoder.encode_document("ski " + filler(4)), "ski")
        average = weight_of(encoder.encode_document("ski " + filler(39)), "ski")
        long = weight_of(encoder.encode_document("ski " + filler(200)), "ski")
        assert short > average > long > 0

    def test_b_zero_ignores_document_length(self) -> None:
        model = BM25Encoder(b=0.0)
        short = weight_of(model.encode_document("ski " + filler(4)), "ski", model)
        long = weight_of(model.encode_document("ski " + filler(200)), "ski", model)
        assert short == pytest.approx(long)

    def test_average_length_is_a_parameter(self) -> None:
        text = "ski " + filler(19)
        model = BM25Encoder(avg_doc_len=20.0)
        assert weight_of(model.encode_document(text), "ski", model) == pytest.approx(1.0)
        assert weight_of(encoder.encode_document(text), "ski") > 1.0

    def test_indices_are_sorted_and_unique(self) -> None:
        doc = encoder.encode_document("zebra apple mango apple zebra kiwi")
        assert list(doc.indices) == sorted(set(doc.indices))
        assert len(doc.indices) == 4
        assert all(v > 0 for v in doc.values)

    @pytest.mark.parametrize(
        "kwargs", [{"k1": -1.0}, {"b": 1.5}, {"b": -0.1}, {"avg_doc_len": 0.0}]
    )
    def test_invalid_parameters_are_rejected(self, kwargs: dict[str, float]) -> None:
        with pytest.raises(ValueError):
            BM25Encoder(**kwargs)


class TestQueryWeights:
    def test_one_per_unique_term(self) -> None:
        query = encoder.encode_query("ski skiing coffee COFFEE mountains")
        assert list(query.indices) == sorted(query.indices)
        assert len(query.indices) == 3
        assert list(query.values) == [1.0, 1.0, 1.0]
