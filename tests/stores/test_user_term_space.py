"""Each user's keyword terms of their own (ADR 0601): `UserTermSpace` over every adapter.

Above the wrapper the ids are the BM25 encoder's; in the store each user's are shifted by a
salt of (tenant, user), so one user's postings and IDF hold only that user's memories.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryd.core.memory import term_space
from memoryd.core.memory.tenant_terms import TenantTerms
from memoryd.core.memory.term_space import UserTermSpace, in_term_space, salt_of
from memoryd.core.retrieval.bm25 import BM25Encoder
from memoryd.stores.vectors.port import (
    TERMS_FIELD,
    Filter,
    MatchValue,
    VectorPoint,
    VectorStore,
)
from tests.support.vector_stores import ADAPTERS, open_store

DIM = 4
ENCODER = BM25Encoder()


def memory(n: int, text: str, user: str = "alice", tenant: str = "acme") -> VectorPoint:
    body: dict[str, Any] = {
        "tenant": tenant,
        "user_id": user,
        "content": text,
        TERMS_FIELD: ENCODER.term_ids(text),
    }
    dense = [1.0, float(n % 7), 0.5, 0.0]
    return VectorPoint(
        id=str(uuid.UUID(int=n)), dense=dense, sparse=ENCODER.encode_document(text), payload=body
    )


def owner(user: str = "alice", tenant: str = "acme") -> Filter:
    return Filter(must=[MatchValue("tenant", tenant), MatchValue("user_id", user)])


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def raw(adapter: str, tmp_path: Path) -> Iterator[VectorStore]:
    store = open_store(adapter, tmp_path, DIM)
    yield store
    store.close()


@pytest.fixture
def spaced(raw: VectorStore) -> UserTermSpace:
    return UserTermSpace(raw)


def test_points_read_back_carry_the_encoders_ids_while_the_store_holds_the_users(
    raw: VectorStore, spaced: UserTermSpace
) -> None:
    text = "Alice went skiing in the Alps"
    spaced.upsert([memory(1, text)])
    encoder_ids = ENCODER.term_ids(text)

    for point in [
        *spaced.retrieve([str(uuid.UUID(int=1))], with_vectors=True),
        *spaced.scroll(owner(), with_vectors=True)[0],
    ]:
        assert point.payload[TERMS_FIELD] == encoder_ids
        assert point.sparse is not None and sorted(point.sparse.indices) == encoder_ids
    [hit] = spaced.search(owner(), sparse=ENCODER.encode_query("skiing"), limit=5)
    assert hit.payload[TERMS_FIELD] == encoder_ids

    [stored] = raw.retrieve([str(uuid.UUID(int=1))], with_vectors=True)
    salt = salt_of("acme", "alice")
    assert stored.payload[TERMS_FIELD] == [(i + salt) % 2**32 for i in encoder_ids]
    assert stored.sparse is not None
    assert sorted(stored.sparse.indices) == sorted((i + salt) % 2**32 for i in encoder_ids)


def test_the_same_words_of_two_users_are_different_terms_in_the_store(
    raw: VectorStore, spaced: UserTermSpace
) -> None:
    spaced.upsert([memory(1, "likes green tea"), memory(2, "likes green tea", user="bob")])
    alice, bob = (raw.retrieve([str(uuid.UUID(int=n))])[0] for n in (1, 2))
    assert not set(alice.payload[TERMS_FIELD]) & set(bob.payload[TERMS_FIELD])
    # and so do the same user's words in another tenant
    assert salt_of("acme", "alice") != salt_of("other", "alice")


@pytest.fixture
def shared(adapter: str, tmp_path: Path) -> Iterator[VectorStore]:
    """A second store of the same adapter, in the shared space."""
    store = open_store(adapter, tmp_path / "shared", DIM)
    yield store
    store.close()


def keyword_scores(store: VectorStore, user: str, text: str) -> dict[str, float]:
    hits = store.search(owner(user), sparse=ENCODER.encode_query(text), limit=100)
    return {h.id: h.score for h in hits}


@pytest.mark.parametrize("facet_from", [1, term_space.FACET_FROM], ids=["index", "points"])
def test_keyword_scores_are_those_of_one_shared_space(
    spaced: UserTermSpace, shared: VectorStore, facet_from: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A user's terms are counted from the term index or from their points (by size).
    monkeypatch.setattr(term_space, "FACET_FROM", facet_from)
    spaced.terms.close()
    spaced.terms = TenantTerms(spaced._count_tenants_terms, spaced._count_with_terms)
    # alice's words are rare among everyone's memories, bob's "skiing" is common: the
    # engine counts only a user's own postings here, the weights are the collection's.
    first = [
        memory(1, "skiing trip in the alps"),
        memory(2, "a quiet weekend of reading"),
        memory(3, "skiing with my sister at the weekend"),
        *(memory(10 + n, f"skiing lesson number {n}", user="bob") for n in range(30)),
    ]
    later = [
        memory(50, "reading about the alps", user="bob"),
        memory(51, "weekend skiing"),
        memory(2, "a loud weekend of skiing"),  # replaces one: its old words are gone
    ]
    # Each batch after the first finds the users' own counts kept: carried through it.
    for batch in (first, later, [memory(52, "reading")], [memory(1, "the alps again")]):
        spaced.upsert(batch)
        shared.upsert(batch)
        assert spaced.terms.wait(10)
        for user in ("alice", "bob"):
            for text in ("skiing weekend", "alps reading", "skiing lesson sister"):
                mine = keyword_scores(spaced, user, text)
                everyone = keyword_scores(shared, user, text)
                assert mine.keys() == everyone.keys()
                assert mine == pytest.approx(everyone, rel=1e-4)


def test_another_tenants_memories_never_move_a_tenants_keyword_scores(
    spaced: UserTermSpace, shared: VectorStore, adapter: str, tmp_path: Path
) -> None:
    acme = [
        memory(1, "skiing trip in the alps"),
        memory(2, "a quiet weekend of reading"),
        memory(3, "skiing with my sister at the weekend"),
        *(memory(10 + n, f"skiing lesson number {n}", user="bob") for n in range(10)),
    ]
    # globex holds acme's rare words, and many of them
    globex = [memory(100 + n, "my sister and the alps", tenant="globex") for n in range(40)]
    acme_alone = open_store(adapter, tmp_path / "alone", DIM)
    try:
        acme_alone.upsert(acme)
        spaced.upsert(acme)
        shared.upsert(acme)
        queries = ("sister alps", "skiing weekend", "reading")
        assert spaced.terms.wait(10)
        before = {q: keyword_scores(spaced, "alice", q) for q in queries}
        spaced.upsert(globex)
        shared.upsert(globex)
        assert spaced.terms.wait(10)
        for q in queries:
            alone = keyword_scores(acme_alone, "alice", q)
            assert keyword_scores(spaced, "alice", q) == pytest.approx(alone, rel=1e-4)
            assert before[q] == pytest.approx(alone, rel=1e-4)
        # in a space shared by every tenant, globex's memories do move acme's scores
        moved = keyword_scores(shared, "alice", "sister alps")
        assert moved != pytest.approx(keyword_scores(acme_alone, "alice", "sister alps"))
    finally:
        acme_alone.close()


def test_without_statistics_yet_the_engines_idf_stands(raw: VectorStore) -> None:
    spaced = UserTermSpace(raw)
    spaced.terms.close()  # no recount will run
    raw_points = [memory(1, "skiing trip"), memory(2, "skiing lesson", user="bob")]
    spaced.upsert(raw_points)
    hits = spaced.search(owner(), sparse=ENCODER.encode_query("skiing trip"), limit=5)
    assert [h.id for h in hits] == [str(uuid.UUID(int=1))]


def test_term_counts_and_keyword_search_see_only_the_users_memories(
    spaced: UserTermSpace,
) -> None:
    spaced.upsert([memory(1, "tea with milk"), memory(2, "green tea", user="bob")])
    tea, milk = ENCODER.term_ids("tea")[0], ENCODER.term_ids("milk")[0]
    assert spaced.count_each(owner(), TERMS_FIELD, [tea, milk]) == [1, 1]
    assert spaced.count_each(owner("bob"), TERMS_FIELD, [tea, milk]) == [1, 0]
    hits = spaced.search(owner("bob"), sparse=ENCODER.encode_query("tea milk"), limit=5)
    assert [h.id for h in hits] == [str(uuid.UUID(int=2))]


def test_a_keyword_call_that_names_no_user_is_refused(spaced: UserTermSpace) -> None:
    spaced.upsert([memory(1, "tea with milk")])
    everyone = Filter(must=[MatchValue("tenant", "acme")])
    with pytest.raises(ValueError, match="tenant and user_id"):
        spaced.search(everyone, sparse=ENCODER.encode_query("tea"), limit=5)
    with pytest.raises(ValueError, match="tenant and user_id"):
        spaced.count_each(everyone, TERMS_FIELD, ENCODER.term_ids("tea"))
    # a dense search, or counts of another field, need no owner
    assert len(spaced.search(everyone, dense=[1.0, 0.0, 0.0, 0.0], limit=5)) == 1
    with pytest.raises(ValueError, match="set_payload"):
        spaced.set_payload([str(uuid.UUID(int=1))], {TERMS_FIELD: [1, 2]})


def test_the_store_metadata_decides_the_space(raw: VectorStore) -> None:
    assert in_term_space(raw, {}) is raw
    assert in_term_space(raw, {"term_space": "shared"}) is raw
    assert isinstance(in_term_space(raw, {"term_space": "user"}), UserTermSpace)
