"""BM25 sparse encoding: tokenisation, stable term ids, and the term-frequency weights."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.core.retrieval.bm25 import (
    DEFAULT_K1,
    BM25Encoder,
    SparseVector,
    encode_document,
    encode_query,
    porter_stem,
    token_id,
    tokenize,
)

SERVICE_ROOT = Path(__file__).resolve().parents[2] / "service"

# Computed once from the definition (4-byte BLAKE2b of the UTF-8 term, big-endian). If
# these change, every sparse vector already stored stops matching new queries.
EXPECTED_IDS = {"ski": 408154960, "coffe": 2004191857}


def weight_of(vector: SparseVector, term: str) -> float:
    return dict(zip(vector.indices, vector.values, strict=True))[token_id(term)]


def filler(n: int) -> str:
    """n distinct content words (none is a stop word, none stems to "ski")."""
    return " ".join(f"word{i}" for i in range(n))


class TestTermIds:
    def test_ids_match_the_recorded_values(self) -> None:
        for term, expected in EXPECTED_IDS.items():
            assert token_id(term) == expected

    def test_ids_are_identical_in_another_process_with_another_hash_seed(self) -> None:
        script = (
            "import json; from memoryd.core.retrieval.bm25 import encode_query; "
            "v = encode_query('skiing coffee'); print(json.dumps(list(v.indices)))"
        )
        env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(SERVICE_ROOT)}
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        assert json.loads(out.stdout) == sorted(EXPECTED_IDS.values())
        assert list(encode_query("skiing coffee").indices) == sorted(EXPECTED_IDS.values())

    def test_ids_are_unsigned_32_bit(self) -> None:
        for term in ("a", "ski", "日本語", "x" * 1000):
            assert 0 <= token_id(term) < 2**32


class TestTokenize:
    def test_lower_cases_and_removes_stop_words(self) -> None:
        assert tokenize("The user IS at the Mountain and it was cold") == [
            "user",
            "mountain",
            "cold",
        ]

    def test_only_stop_words_give_empty_vectors(self) -> None:
        assert encode_query("the and of it is") == SparseVector((), ())
        assert encode_document("the and of it is") == SparseVector((), ())
        assert encode_document("") == SparseVector((), ())

    def test_punctuation_apostrophes_and_underscores_split_words(self) -> None:
        assert tokenize("user's favourite_drink: coffee!") == ["user", "favourit", "drink", "coffe"]

    def test_unicode_words_are_kept_case_folded_and_unstemmed(self) -> None:
        assert tokenize("Café CAFÉ 日本語") == ["café", "café", "日本語"]
        assert tokenize("Straße") == tokenize("STRASSE")

    def test_numbers_are_terms(self) -> None:
        assert tokenize("room 101 in 2024") == ["room", "101", "2024"]

    @pytest.mark.parametrize("word", ["skiing", "skis", "ski", "skied"])
    def test_ski_family_shares_one_term(self, word: str) -> None:
        assert tokenize(word) == ["ski"]
        assert encode_query(word).indices == (EXPECTED_IDS["ski"],)

    def test_stemmed_query_matches_differently_inflected_document(self) -> None:
        query = encode_query("skiing preferences")
        document = encode_document("The user prefers to ski in the Alps")
        assert set(query.indices) <= set(document.indices)


class TestPorterStemmer:
    # Examples from M. F. Porter, "An algorithm for suffix stripping" (1980).
    @pytest.mark.parametrize(
        ("word", "stem"),
        [
            ("caresses", "caress"),
            ("ponies", "poni"),
            ("ties", "ti"),
            ("cats", "cat"),
            ("feed", "feed"),
            ("agreed", "agre"),
            ("plastered", "plaster"),
            ("motoring", "motor"),
            ("sing", "sing"),
            ("conflated", "conflat"),
            ("hopping", "hop"),
            ("falling", "fall"),
            ("filing", "file"),
            ("happy", "happi"),
            ("sky", "sky"),
            ("relational", "relat"),
            ("generalizations", "gener"),
            ("oscillators", "oscil"),
            ("electrical", "electr"),
            ("adjustable", "adjust"),
            ("replacement", "replac"),
            ("adoption", "adopt"),
            ("controlling", "control"),
            ("roll", "roll"),
        ],
    )
    def test_reference_examples(self, word: str, stem: str) -> None:
        assert porter_stem(word) == stem

    def test_short_and_non_ascii_words_are_unchanged(self) -> None:
        assert porter_stem("is") == "is"
        assert porter_stem("niños") == "niños"
        assert porter_stem("2024s") == "2024s"


class TestDocumentWeights:
    def test_single_occurrence_in_a_document_of_average_length_weighs_one(self) -> None:
        # tf=1, dl=avgdl: 1 * (k1 + 1) / (1 + k1) == 1
        doc = encode_document("ski " + filler(39))
        assert weight_of(doc, "ski") == pytest.approx(1.0)

    def test_matches_the_bm25_formula(self) -> None:
        encoder = BM25Encoder(k1=1.5, b=0.5, avg_doc_len=10.0)
        doc = encoder.encode_document("ski ski ski " + filler(2))  # tf=3, dl=5
        expected = 3 * 2.5 / (3 + 1.5 * (1 - 0.5 + 0.5 * 5 / 10))
        assert weight_of(doc, "ski") == pytest.approx(expected)

    def test_repeated_terms_saturate(self) -> None:
        # Same document length (40) throughout, so only the term frequency changes.
        weights = [
            weight_of(encode_document(" ".join(["ski"] * tf) + " " + filler(40 - tf)), "ski")
            for tf in (1, 2, 4, 8, 16)
        ]
        assert weights == sorted(weights)
        gains = [b - a for a, b in itertools.pairwise(weights)]
        per_occurrence = [gain / n for gain, n in zip(gains, (1, 2, 4, 8), strict=True)]
        assert per_occurrence == sorted(per_occurrence, reverse=True)
        assert weights[-1] < DEFAULT_K1 + 1

    def test_longer_documents_give_lower_weight_per_term(self) -> None:
        short = weight_of(encode_document("ski " + filler(4)), "ski")
        average = weight_of(encode_document("ski " + filler(39)), "ski")
        long = weight_of(encode_document("ski " + filler(200)), "ski")
        assert short > average > long > 0

    def test_b_zero_ignores_document_length(self) -> None:
        encoder = BM25Encoder(b=0.0)
        short = weight_of(encoder.encode_document("ski " + filler(4)), "ski")
        long = weight_of(encoder.encode_document("ski " + filler(200)), "ski")
        assert short == pytest.approx(long)

    def test_average_length_is_a_parameter(self) -> None:
        text = "ski " + filler(19)
        assert weight_of(encode_document(text, avg_doc_len=20.0), "ski") == pytest.approx(1.0)
        assert weight_of(encode_document(text), "ski") > 1.0

    def test_indices_are_sorted_and_unique(self) -> None:
        doc = encode_document("zebra apple mango apple zebra kiwi")
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
        query = encode_query("ski skiing coffee COFFEE mountains")
        assert sorted(query.indices) == list(query.indices)
        assert len(query.indices) == 3
        assert query.values == (1.0, 1.0, 1.0)

    def test_sparse_vector_rejects_mismatched_lengths(self) -> None:
        with pytest.raises(ValueError):
            SparseVector((1, 2), (1.0,))
