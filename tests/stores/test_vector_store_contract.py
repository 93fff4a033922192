"""The vector store contract: every adapter (qdrant-edge, qdrant-client) behaves the same.

Each test runs against every registered adapter: the embedded qdrant-edge shard and
qdrant-client (local mode, which stands in for a Qdrant server here). The tests of one
open store also run on qdrant-client with the cluster layout, sharded by tenant
(``qdrant-tenant``, tests/vector_stores.py). Vectors are tiny and hand-made so the expected
rankings can be worked out on paper.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import memoryd
from memoryd.stores.vectors.edge_store import EdgeVectorStore
from memoryd.stores.vectors.port import (
    TERMS_FIELD,
    Filter,
    HasId,
    IncompatibleStoreError,
    IsEmpty,
    IsNull,
    MatchAny,
    MatchValue,
    Range,
    RrfParams,
    SparseVector,
    StoreClosedError,
    StoredPoint,
    VectorPoint,
    VectorStore,
    VectorStoreError,
    rrf_contribution,
)
from tests.support.vector_stores import ADAPTERS, SHARDED, ShardedQdrantStore, open_store

DIM = 4
TENANT = "acme"


def pid(n: int) -> str:
    """A deterministic point id, so expected orders can name points."""
    return str(uuid.UUID(int=n))


def point(
    n: int,
    dense: Sequence[float] = (1.0, 0.0, 0.0, 0.0),
    *,
    user: str = "alice",
    tenant: str = TENANT,
    sparse: SparseVector | None = None,
    **payload: Any,
) -> VectorPoint:
    body: dict[str, Any] = {"tenant": tenant, "user_id": user, "created_at": float(n)}
    body.update(payload)
    return VectorPoint(id=pid(n), dense=list(dense), sparse=sparse, payload=body)


def scope(user: str = "alice", tenant: str = TENANT) -> Filter:
    return Filter(must=[MatchValue("tenant", tenant), MatchValue("user_id", user)])


def ids_of(points: Sequence[StoredPoint]) -> set[str]:
    return {p.id for p in points}


def make_store(
    kind: str, data_dir: Path, dim: int = DIM, *, persistent: bool = False
) -> VectorStore:
    return open_store(kind, data_dir, dim, persistent=persistent)


def copy_tree(src: Path, dst: Path) -> None:
    # The WAL preallocates large sparse files; cp keeps them sparse, shutil would not.
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dst)], check=True)


@pytest.fixture(scope="session")
def empty_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Per adapter, a data directory holding a freshly created empty store, to copy:
    creating edge's payload indexes costs about half a second per shard, which would
    dominate this suite."""
    made: dict[str, Path] = {}

    def template(kind: str) -> Path:
        if kind not in made:
            made[kind] = tmp_path_factory.mktemp(f"empty-{kind}")
            make_store(kind, made[kind]).close()
        return made[kind]

    return template


@pytest.fixture(params=[*ADAPTERS, SHARDED])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, empty_data_dir: Callable[[str], Path]
) -> Iterator[VectorStore]:
    copy_tree(empty_data_dir(request.param), tmp_path / "data")
    opened = make_store(request.param, tmp_path / "data")
    yield opened
    opened.close()
    if isinstance(opened, ShardedQdrantStore):  # sharded by tenant: routed as a cluster must
        assert opened.cluster.violations == []


@pytest.fixture(params=ADAPTERS)
def reopen(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., VectorStore]]:
    """Opens a store on the same directory each time it is called (persistent adapters)."""
    opened: list[VectorStore] = []

    def open_store(dim: int = DIM) -> VectorStore:
        opened.append(make_store(request.param, tmp_path, dim, persistent=True))
        return opened[-1]

    yield open_store
    for s in opened:
        s.close()


# --------------------------------------------------------------------------- points


def test_upsert_then_retrieve_round_trips_payload_and_vectors(store: VectorStore) -> None:
    payload: dict[str, Any] = {
        "content": "likes green tea",
        "metadata": {"category": "food", "tags": ["tea", "drinks"]},
        "importance": 0.75,
        "deleted": False,
        "expires_at": None,
    }
    sparse = SparseVector([3, 17], [1.5, 0.5])
    store.upsert([point(1, [3.0, 0.0, 4.0, 0.0], sparse=sparse, **payload)])

    [got] = store.retrieve([pid(1)], with_vectors=True)

    assert got.id == pid(1)
    assert got.payload == {"tenant": TENANT, "user_id": "alice", "created_at": 1.0, **payload}
    # Cosine collections keep the unit-length form of the vector.
    assert got.dense == pytest.approx([0.6, 0.0, 0.8, 0.0], rel=1e-6)
    assert got.sparse is not None
    assert dict(zip(got.sparse.indices, got.sparse.values, strict=True)) == {3: 1.5, 17: 0.5}

    [bare] = store.retrieve([pid(1)])
    assert bare.dense is None and bare.sparse is None
    assert bare.payload == got.payload


def test_a_dense_read_returns_the_dense_vector_without_the_sparse_one(
    store: VectorStore,
) -> None:
    sparse = SparseVector([3, 17], [1.5, 0.5])
    store.upsert([point(1, [3.0, 0.0, 4.0, 0.0], sparse=sparse, colour="red")])

    [got] = store.retrieve([pid(1)], with_vectors="dense")
    [page], _ = store.scroll(scope(), with_vectors="dense")
    [ordered], _ = store.scroll(scope(), order_by="created_at", with_vectors="dense")

    for read in (got, page, ordered):
        assert read.dense == pytest.approx([0.6, 0.0, 0.8, 0.0], rel=1e-6)
        assert read.sparse is None
        assert read.payload["colour"] == "red"


def test_retrieve_keeps_request_order_and_skips_unknown_ids(store: VectorStore) -> None:
    store.upsert([point(1), point(2)])

    got = store.retrieve([pid(2).upper(), pid(99), pid(1)])

    assert [p.id for p in got] == [pid(2), pid(1)]  # ids come back canonical
    assert store.retrieve([]) == []


def test_upsert_of_an_existing_id_replaces_the_whole_point(store: VectorStore) -> None:
    store.upsert([point(1, [1.0, 0.0, 0.0, 0.0], colour="red", size=3)])
    store.upsert([point(1, [0.0, 1.0, 0.0, 0.0], colour="blue")])

    [got] = store.retrieve([pid(1)], with_vectors=True)

    assert got.payload["colour"] == "blue"
    assert "size" not in got.payload
    assert got.dense == pytest.approx([0.0, 1.0, 0.0, 0.0])
    assert store.count() == 1


def test_invalid_points_are_rejected_and_nothing_is_written(store: VectorStore) -> None:
    with pytest.raises(ValueError, match="dimension"):
        store.upsert([point(1), point(2, [1.0, 0.0, 0.0])])
    with pytest.raises(ValueError, match="UUID"):
        store.upsert([VectorPoint(id="memory-1", dense=[1.0, 0.0, 0.0, 0.0])])
    with pytest.raises(ValueError):
        SparseVector([1, 2], [1.0])

    assert store.count() == 0


# --------------------------------------------------------------------------- filters


def test_tenant_and_user_filter_isolates_users(store: VectorStore) -> None:
    store.upsert(
        [
            point(1, user="alice"),
            point(2, user="alice"),
            point(3, user="bob"),
            point(4, user="alice", tenant="globex"),
        ]
    )

    assert store.count(scope("alice")) == 2
    assert store.count(scope("bob")) == 1
    assert store.count(scope("alice", tenant="globex")) == 1
    hits = store.search(scope("alice"), dense=[1.0, 0.0, 0.0, 0.0], limit=10)
    assert {h.id for h in hits} == {pid(1), pid(2)}
    page, _ = store.scroll(scope("bob"), limit=10)
    assert ids_of(page) == {pid(3)}


def test_nested_metadata_keys_filter_by_equality(store: VectorStore) -> None:
    store.upsert(
        [
            point(1, metadata={"category": "work", "project": {"name": "apollo"}}),
            point(2, metadata={"category": "home", "project": {"name": "apollo"}}),
            point(3, metadata={"category": "work", "project": {"name": "gemini"}}),
            point(4, category="work"),  # top-level key of the same name does not count
        ]
    )

    assert store.count(Filter(must=[MatchValue("metadata.category", "work")])) == 2
    both = Filter(
        must=[
            MatchValue("metadata.category", "work"),
            MatchValue("metadata.project.name", "apollo"),
        ]
    )
    page, _ = store.scroll(both)
    assert ids_of(page) == {pid(1)}


def test_match_any_matches_one_of_several_values(store: VectorStore) -> None:
    store.upsert(
        [
            point(1, kind="fact", priority=1),
            point(2, kind="preference", priority=2),
            point(3, kind="note", priority=3),
        ]
    )

    page, _ = store.scroll(Filter(must=[MatchAny("kind", ["fact", "preference"])]))
    assert ids_of(page) == {pid(1), pid(2)}
    page, _ = store.scroll(Filter(must=[MatchAny("priority", [2, 3])]))
    assert ids_of(page) == {pid(2), pid(3)}
    assert store.count(Filter(must=[MatchAny("kind", [])])) == 0


def test_term_id_arrays_match_any_one_of_their_ids(store: VectorStore) -> None:
    # The per-user IDF counts memories holding a query term id (a 32-bit integer).
    def with_terms(n: int, term_ids: list[int]) -> VectorPoint:
        payload: dict[str, Any] = {TERMS_FIELD: term_ids}
        return point(n, **payload)

    store.upsert([with_terms(1, [7, 4_000_000_000]), with_terms(2, [7]), with_terms(3, [])])

    assert store.count(scope().and_(MatchValue(TERMS_FIELD, 7))) == 2
    assert store.count(scope().and_(MatchValue(TERMS_FIELD, 4_000_000_000))) == 1
    assert store.count(scope().and_(MatchValue(TERMS_FIELD, 8))) == 0


def test_count_each_counts_every_value_within_the_filter(store: VectorStore) -> None:
    # One call for all of a query's term ids; the filter (with its OR group and exclusion)
    # applies to every count, as `count` of the filter and the value would.
    def with_terms(n: int, term_ids: list[int], **payload: Any) -> VectorPoint:
        return point(n, **{TERMS_FIELD: term_ids, **payload})

    store.upsert(
        [
            with_terms(1, [7, 4_000_000_000], tier="long_term"),
            with_terms(2, [7], tier="persona"),
            with_terms(3, [7, 9], tier="long_term", deleted=True),
            with_terms(4, [9], user="bob", tier="long_term"),
        ]
    )
    live = Filter(
        must=[*scope().must, Filter(should=[MatchValue("tier", "long_term"), IsEmpty("tier")])],
        must_not=[MatchValue("deleted", True)],
    )
    terms = [7, 9, 4_000_000_000, 8]
    assert store.count_each(live, TERMS_FIELD, terms) == [1, 0, 1, 0]
    assert store.count_each(scope(), TERMS_FIELD, terms) == [
        store.count(scope().and_(MatchValue(TERMS_FIELD, t))) for t in terms
    ]
    assert store.count_each(scope(), TERMS_FIELD, []) == []


def test_generation_moves_with_every_write_and_only_then(store: VectorStore) -> None:
    """Both adapters here own their collection (edge; qdrant-client in local mode), so both
    tell when it changed: what the core counted stays true until the generation moves."""
    seen = [store.generation()]
    assert seen[0] is not None

    def moved() -> bool:
        seen.append(store.generation())
        now, before = seen[-1], seen[-2]
        assert now is not None and before is not None
        assert now in (before, before + 1)  # by one: what a write placed can be kept
        return now != before

    store.upsert([point(1, terms=[1]), point(2)])
    assert moved()
    store.count(scope())
    store.count_each(scope(), TERMS_FIELD, [1])
    store.scroll(scope())
    store.search(scope(), dense=[1.0, 0.0, 0.0, 0.0])
    store.retrieve([pid(1)])
    store.flush()
    assert not moved()  # reads change nothing
    store.set_payload([pid(1)], {"deleted": True})
    assert moved()
    store.delete([pid(2)])
    assert moved()
    store.delete_where(scope())
    assert moved()


def test_a_users_generation_moves_with_every_write_touching_the_users_points(
    store: VectorStore,
) -> None:
    """Other users' writes may move it too (qdrant-client moves it on every write); the
    embedded edge shard, which looks the owners up, moves it for this user's writes only."""
    precise = isinstance(store, EdgeVectorStore)
    seen = [store.generation(TENANT, "alice")]

    def moved() -> bool:
        seen.append(store.generation(TENANT, "alice"))
        now, before = seen[-1], seen[-2]
        assert now is not None and before is not None
        assert now in (before, before + 1)  # by one: what a write placed can be kept
        return now != before

    store.upsert([point(1), point(2)])
    assert moved()
    store.upsert([point(3, user="bob"), point(4, user="bob")])
    assert moved() is not precise
    store.upsert([point(2, user="bob")])  # alice's point 2 becomes bob's
    assert moved()
    store.set_payload([pid(1)], {"deleted": True})
    assert moved()
    store.set_payload([pid(3)], {"deleted": True})
    assert moved() is not precise
    store.delete([pid(4)])
    assert moved() is not precise
    store.delete([pid(1)])
    assert moved()
    store.upsert([point(5), point(6, user="bob")])
    assert moved()
    store.delete_where(scope("bob"))
    assert moved() is not precise
    store.delete_where(Filter(must=[MatchValue("created_at", 5)]))  # whoever: everyone
    assert moved()
    store.upsert([point(n, user="bob") for n in range(10, 110)])
    moved()
    store.delete([pid(n) for n in range(10, 110)])  # too many to look up: everyone
    assert moved()


def test_point_ids_come_back_canonical_whatever_their_case(store: VectorStore) -> None:
    upper = str(uuid.UUID(int=7)).upper()
    store.upsert([VectorPoint(id=upper, dense=[1.0, 0.0, 0.0, 0.0], payload=scope_payload())])
    [found] = store.retrieve([upper])
    assert found.id == pid(7)
    assert [p.id for p in store.scroll(scope())[0]] == [pid(7)]


def scope_payload() -> dict[str, Any]:
    return {"tenant": TENANT, "user_id": "alice"}


def test_range_on_created_at_honours_open_and_closed_bounds(store: VectorStore) -> None:
    store.upsert([point(n) for n in range(1, 6)])  # created_at = 1.0 .. 5.0

    page, _ = store.scroll(Filter(must=[Range("created_at", gte=2.0, lt=4.0)]))
    assert ids_of(page) == {pid(2), pid(3)}
    page, _ = store.scroll(Filter(must=[Range("created_at", gt=2.0, lte=4.0)]))
    assert ids_of(page) == {pid(3), pid(4)}
    assert store.count(Filter(must=[Range("created_at", lt=1.0)])) == 0


def test_soft_deleted_flag_is_empty_and_is_null(store: VectorStore) -> None:
    store.upsert(
        [
            point(1, deleted=True, expires_at=10.0),
            point(2, deleted=False, expires_at=None),
            point(3),  # neither field
        ]
    )

    live = Filter(must_not=[MatchValue("deleted", True)])
    assert ids_of(store.scroll(live)[0]) == {pid(2), pid(3)}
    assert ids_of(store.scroll(Filter(must=[MatchValue("deleted", False)]))[0]) == {pid(2)}
    assert ids_of(store.scroll(Filter(must=[IsEmpty("deleted")]))[0]) == {pid(3)}
    # Empty covers missing and null; null is only an explicit null.
    assert ids_of(store.scroll(Filter(must=[IsEmpty("expires_at")]))[0]) == {pid(2), pid(3)}
    assert ids_of(store.scroll(Filter(must=[IsNull("expires_at")]))[0]) == {pid(2)}


def test_should_and_nested_groups_express_or(store: VectorStore) -> None:
    store.upsert([point(1, tier="persona"), point(2, tier="long_term"), point(3, tier="entity")])

    either = Filter(should=[MatchValue("tier", "persona"), MatchValue("tier", "entity")])
    assert ids_of(store.scroll(either)[0]) == {pid(1), pid(3)}
    scoped = scope().and_(either, HasId([pid(3)]))
    assert ids_of(store.scroll(scoped)[0]) == {pid(3)}


def test_count_is_exact(store: VectorStore) -> None:
    assert store.count() == 0
    store.upsert([point(n, user="alice" if n % 3 else "bob") for n in range(1, 31)])

    assert store.count() == 30
    assert store.count(scope("bob")) == 10
    assert store.count(Filter()) == 30


# --------------------------------------------------------------------------- writes


def test_delete_by_ids_ignores_unknown_ids(store: VectorStore) -> None:
    store.upsert([point(1), point(2), point(3)])

    store.delete([pid(1), pid(99)])
    store.delete([])

    assert store.retrieve([pid(1)]) == []
    assert store.count() == 2


def test_delete_where_deletes_matches_and_returns_how_many(store: VectorStore) -> None:
    store.upsert(
        [point(1, user="alice"), point(2, user="alice"), point(3, user="bob"), point(4, user="bob")]
    )

    assert store.delete_where(scope("alice")) == 2
    assert store.delete_where(scope("alice")) == 0
    assert store.count() == 2
    assert store.count(scope("bob")) == 2


def test_delete_where_refuses_an_empty_filter(store: VectorStore) -> None:
    store.upsert([point(1)])

    with pytest.raises(ValueError):
        store.delete_where(Filter())

    assert store.count() == 1


def test_set_payload_replaces_given_keys_only_and_skips_unknown_ids(store: VectorStore) -> None:
    store.upsert([point(1, metadata={"a": 1}, importance=0.5), point(2, importance=0.1)])

    store.set_payload([pid(1), pid(99)], {"deleted": True, "metadata": {"b": 2}})

    [one, two] = store.retrieve([pid(1), pid(2)])
    assert one.payload["deleted"] is True
    assert one.payload["metadata"] == {"b": 2}  # a key's old value is replaced whole
    assert one.payload["importance"] == 0.5  # other keys are kept
    assert "deleted" not in two.payload
    assert store.retrieve([pid(99)]) == []  # an unknown id is not created


# --------------------------------------------------------------------------- scroll


def test_scroll_pages_through_every_point_exactly_once(store: VectorStore) -> None:
    store.upsert([point(n) for n in range(1, 8)] + [point(50, user="bob")])

    seen: list[str] = []
    token: str | None = None
    pages = 0
    while pages < 100:  # bounded, so a token that never advances fails instead of hanging
        page, token = store.scroll(scope(), limit=3, offset=token)
        seen.extend(p.id for p in page)
        pages += 1
        if token is None:
            break

    assert pages == 3
    assert sorted(seen) == sorted(pid(n) for n in range(1, 8))


def test_facet_counts_every_value_a_filters_points_hold(store: VectorStore) -> None:
    store.upsert(
        [
            point(1, term_ids=[7, 9]),
            point(2, term_ids=[9]),
            point(3, term_ids=[]),
            point(4, user="bob", term_ids=[9, 11]),
        ]
    )
    assert store.facet(scope(), "term_ids") == {7: 1, 9: 2}
    assert store.facet(scope("bob"), "term_ids") == {9: 1, 11: 1}
    assert store.facet(None, "user_id") == {"alice": 3, "bob": 1}
    assert store.facet(scope("carol"), "term_ids") == {}


def test_scroll_reads_only_the_payload_keys_asked_for(store: VectorStore) -> None:
    store.upsert([point(n, created_at=float(n)) for n in range(1, 5)])

    page, _ = store.scroll(scope(), limit=10, fields=["user_id"])
    assert sorted(p.id for p in page) == sorted(pid(n) for n in range(1, 5))
    assert all(p.payload == {"user_id": "alice"} for p in page)
    # An ordered scroll also reads its ordering field: the next page's cursor needs it.
    first, token = store.scroll(scope(), limit=2, order_by="created_at", fields=["user_id"])
    second, _ = store.scroll(
        scope(), limit=2, offset=token, order_by="created_at", fields=["user_id"]
    )
    assert [p.payload["created_at"] for p in first + second] == [1.0, 2.0, 3.0, 4.0]
    assert all(set(p.payload) == {"user_id", "created_at"} for p in first + second)


def _scroll_all_ordered(store: VectorStore, *, descending: bool, limit: int) -> list[StoredPoint]:
    out: list[StoredPoint] = []
    token: str | None = None
    for _ in range(100):  # bounded, so a cursor that never advances fails instead of hanging
        page, token = store.scroll(
            scope(), limit=limit, offset=token, order_by="created_at", descending=descending
        )
        assert len(page) <= limit
        out.extend(page)
        if token is None:
            return out
    raise AssertionError("ordered scroll never reached the end")


def test_scroll_order_by_created_at_ascending_finds_the_oldest_first(store: VectorStore) -> None:
    # Ties straddle page boundaries; the point without created_at is not orderable.
    times = {1: 5.0, 2: 1.0, 3: 3.0, 4: 3.0, 5: 3.0, 6: 2.0, 7: 4.0, 8: 3.0}
    store.upsert([point(n, created_at=t) for n, t in times.items()])
    undated = point(9)
    store.upsert(
        [VectorPoint(undated.id, undated.dense, None, {**undated.payload, "created_at": None})]
    )

    first_page, _ = store.scroll(scope(), limit=2, order_by="created_at")
    assert [p.id for p in first_page] == [pid(2), pid(6)]

    ordered = _scroll_all_ordered(store, descending=False, limit=2)
    assert sorted(p.id for p in ordered) == sorted(pid(n) for n in times)
    stamps = [p.payload["created_at"] for p in ordered]
    assert stamps == sorted(times.values())


def test_scroll_order_by_descending_finds_the_newest_first(store: VectorStore) -> None:
    times = {1: 5.0, 2: 1.0, 3: 3.0, 4: 3.0, 5: 3.0, 6: 2.0}
    store.upsert([point(n, created_at=t) for n, t in times.items()])

    ordered = _scroll_all_ordered(store, descending=True, limit=2)

    assert ordered[0].id == pid(1)
    assert [p.payload["created_at"] for p in ordered] == sorted(times.values(), reverse=True)
    assert len({p.id for p in ordered}) == len(times)


def test_scroll_order_by_needs_an_orderable_field_and_a_matching_token(
    store: VectorStore,
) -> None:
    store.upsert([point(n) for n in range(1, 5)])

    with pytest.raises(ValueError, match="order"):
        store.scroll(scope(), order_by="content")
    _, token = store.scroll(scope(), limit=1, order_by="created_at")
    assert token is not None
    with pytest.raises(ValueError):
        store.scroll(scope(), limit=1, offset=token, order_by="expires_at")
    with pytest.raises(ValueError):
        store.scroll(scope(), limit=1, offset=token)


# --------------------------------------------------------------------------- search


def test_dense_search_ranks_by_cosine_similarity(store: VectorStore) -> None:
    store.upsert(
        [
            point(1, [0.0, 1.0, 0.0, 0.0]),  # cos 0
            point(2, [2.0, 0.0, 0.0, 0.0]),  # cos 1 (length does not matter)
            point(3, [-1.0, 0.0, 0.0, 0.0]),  # cos -1
            point(4, [1.0, 1.0, 0.0, 0.0]),  # cos 0.707
        ]
    )

    hits = store.search(scope(), dense=[1.0, 0.0, 0.0, 0.0], limit=10)

    assert [h.id for h in hits] == [pid(2), pid(4), pid(1), pid(3)]
    assert [h.score for h in hits] == pytest.approx([1.0, math.sqrt(0.5), 0.0, -1.0], abs=1e-6)
    assert hits[0].payload["user_id"] == "alice"
    assert hits[0].dense_vector is None
    top = store.search(scope(), dense=[1.0, 0.0, 0.0, 0.0], limit=2, with_vectors=True)
    assert [h.id for h in top] == [pid(2), pid(4)]
    assert top[0].dense_vector == pytest.approx([1.0, 0.0, 0.0, 0.0])


def test_sparse_search_applies_idf_so_a_rare_term_outranks_a_common_one(
    store: VectorStore,
) -> None:
    common, rare, other = 1, 2, 3
    store.upsert(
        [
            point(1, sparse=SparseVector([common], [2.0])),  # heavy on the common term
            point(2, sparse=SparseVector([rare], [1.0])),  # light on the rare term
            point(3, sparse=SparseVector([common], [1.0])),
            point(4, sparse=SparseVector([common], [1.0])),
            point(5, sparse=SparseVector([other], [1.0])),  # shares no query term
            point(6),  # no sparse vector at all
        ]
    )

    hits = store.search(scope(), sparse=SparseVector([common, rare], [1.0, 1.0]), limit=10)

    # Without IDF point 1 (2.0) would beat point 2 (1.0); the rare term's IDF flips it.
    assert [h.id for h in hits][:2] == [pid(2), pid(1)]
    assert {h.id for h in hits} == {pid(1), pid(2), pid(3), pid(4)}
    assert hits[0].score > hits[1].score > 0


def _hybrid_corpus(store: VectorStore) -> None:
    """Dense ranks for [1,0,0,0]: p1, p2, p4, p5, p3. Sparse ranks for term 1: p2, p3."""
    store.upsert(
        [
            point(1, [1.0, 0.0, 0.0, 0.0], sparse=SparseVector([2], [1.0])),
            point(2, [0.9, 0.435, 0.0, 0.0], sparse=SparseVector([1], [2.0])),
            point(3, [0.0, 0.0, 1.0, 0.0], sparse=SparseVector([1], [1.0])),
            point(4, [0.5, 0.866, 0.0, 0.0], sparse=SparseVector([2], [1.0])),
            point(5, [0.2, 0.98, 0.0, 0.0]),
        ]
    )


def test_hybrid_search_fuses_the_union_of_both_prefetches_by_rrf(store: VectorStore) -> None:
    _hybrid_corpus(store)
    rrf = RrfParams(k=60, prefetch_limit=2)  # dense top-2 {p1, p2}, sparse top-2 {p2, p3}

    hits = store.search(
        scope(),
        dense=[1.0, 0.0, 0.0, 0.0],
        sparse=SparseVector([1], [1.0]),
        limit=10,
        fusion=rrf,
    )

    def c(rank: int) -> float:
        return rrf_contribution(rank, 1.0, 60)

    assert [h.id for h in hits] == [pid(2), pid(1), pid(3)]
    assert [h.score for h in hits] == pytest.approx([c(1) + c(0), c(0), c(1)], rel=1e-5)
    assert hits[0].score == pytest.approx(rrf.max_score() - c(0) + c(1), rel=1e-5)


def test_hybrid_search_weights_shift_the_fused_ranking(store: VectorStore) -> None:
    _hybrid_corpus(store)
    query: dict[str, Any] = {
        "dense": [1.0, 0.0, 0.0, 0.0],
        "sparse": SparseVector([1], [1.0]),
        "limit": 3,
    }

    even = store.search(scope(), fusion=RrfParams(prefetch_limit=2), **query)
    sparse_heavy = store.search(
        scope(), fusion=RrfParams(prefetch_limit=2, sparse_weight=3.0), **query
    )

    assert [h.id for h in even] == [pid(2), pid(1), pid(3)]
    # p3 is second by sparse only; tripling the sparse weight lifts it above p1.
    assert [h.id for h in sparse_heavy] == [pid(2), pid(3), pid(1)]
    assert sparse_heavy[1].score == pytest.approx(rrf_contribution(1, 3.0, 60), rel=1e-5)


def test_hybrid_search_applies_the_filter_to_both_sources(store: VectorStore) -> None:
    _hybrid_corpus(store)
    store.set_payload([pid(2)], {"user_id": "bob"})

    hits = store.search(
        scope("alice"),
        dense=[1.0, 0.0, 0.0, 0.0],
        sparse=SparseVector([1], [1.0]),
        limit=10,
        fusion=RrfParams(prefetch_limit=2),
    )

    # With p2 filtered out, the sparse top-2 is just {p3} and the dense top-2 {p1, p4}:
    # p1 and p3 each lead one source (a tie), p4 is second in one.
    assert {h.id for h in hits[:2]} == {pid(1), pid(3)}
    assert [h.id for h in hits[2:]] == [pid(4)]
    c0, c1 = rrf_contribution(0, 1.0, 60), rrf_contribution(1, 1.0, 60)
    assert [h.score for h in hits] == pytest.approx([c0, c0, c1], rel=1e-5)


def test_search_on_an_empty_store_or_user_returns_nothing(store: VectorStore) -> None:
    dense = [1.0, 0.0, 0.0, 0.0]
    sparse = SparseVector([1], [1.0])

    assert store.search(scope(), dense=dense) == []
    assert store.search(scope(), sparse=sparse) == []
    assert store.search(scope(), dense=dense, sparse=sparse) == []

    store.upsert([point(1, user="bob", sparse=sparse)])
    assert store.search(scope("alice"), dense=dense, sparse=sparse) == []


def test_search_input_rules(store: VectorStore) -> None:
    store.upsert([point(1, sparse=SparseVector([1], [1.0]))])

    with pytest.raises(ValueError):
        store.search(scope())
    with pytest.raises(ValueError, match="dimension"):
        store.search(scope(), dense=[1.0, 0.0])
    with pytest.raises(ValueError):
        store.search(scope(), dense=[1.0, 0.0, 0.0, 0.0], limit=0)
    # An empty sparse query matches nothing; next to a dense query it is simply absent.
    assert store.search(scope(), sparse=SparseVector([], [])) == []
    both = store.search(scope(), dense=[1.0, 0.0, 0.0, 0.0], sparse=SparseVector([], []))
    assert [h.score for h in both] == pytest.approx([1.0])


# --------------------------------------------------------------------------- lifecycle


def test_meta_round_trips_and_write_replaces_it(store: VectorStore) -> None:
    assert store.read_meta() is None

    store.write_meta({"embedder": "all-MiniLM-L6-v2", "dim": DIM, "extra": {"v": 1}})
    assert store.read_meta() == {"embedder": "all-MiniLM-L6-v2", "dim": DIM, "extra": {"v": 1}}

    store.write_meta({"embedder": "other"})
    assert store.read_meta() == {"embedder": "other"}


def test_closed_store_is_unhealthy_and_refuses_work(store: VectorStore) -> None:
    store.upsert([point(1)])
    store.flush()
    assert store.healthy()

    store.close()
    store.close()  # idempotent

    assert not store.healthy()
    with pytest.raises(StoreClosedError):
        store.count()
    with pytest.raises(StoreClosedError):
        store.upsert([point(2)])


def test_concurrent_writers_and_readers_from_threads(store: VectorStore) -> None:
    errors: list[BaseException] = []

    def writer(base: int) -> None:
        try:
            for n in range(base, base + 15):
                store.upsert([point(n, sparse=SparseVector([n % 7], [1.0]))])
                store.search(scope(), dense=[1.0, 0.0, 0.0, 0.0], sparse=SparseVector([1], [1.0]))
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(1 + 100 * i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert store.count(scope()) == 60


def test_data_meta_and_indexes_survive_close_and_reopen(
    reopen: Callable[..., VectorStore],
) -> None:
    first = reopen()
    first.upsert([point(n, sparse=SparseVector([n], [1.0])) for n in range(1, 6)])
    first.set_payload([pid(1)], {"deleted": True})
    first.delete([pid(5)])
    first.write_meta({"embedder": "minilm", "dim": DIM})
    first.close()

    second = reopen()

    assert second.count() == 4
    assert second.read_meta() == {"embedder": "minilm", "dim": DIM}
    [one] = second.retrieve([pid(1)], with_vectors=True)
    assert one.payload["deleted"] is True
    assert one.sparse is not None and list(one.sparse.indices) == [1]
    page, _ = second.scroll(scope(), limit=2, order_by="created_at")
    assert [p.id for p in page] == [pid(1), pid(2)]
    hits = second.search(scope(), sparse=SparseVector([3], [1.0]))
    assert [h.id for h in hits] == [pid(3)]


def test_reopening_with_another_dimension_is_refused(reopen: Callable[..., VectorStore]) -> None:
    reopen().close()

    with pytest.raises(IncompatibleStoreError):
        reopen(DIM + 1)


def test_a_second_open_of_the_same_directory_is_refused(
    reopen: Callable[..., VectorStore],
) -> None:
    reopen()

    with pytest.raises(VectorStoreError):
        reopen()


def test_edge_acknowledged_upsert_survives_kill_9(tmp_path: Path) -> None:
    """No flush, no close: the WAL alone must bring back what upsert acknowledged."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from memoryd.stores.vectors.edge_store import EdgeVectorStore
        from memoryd.stores.vectors.port import SparseVector, VectorPoint

        store = EdgeVectorStore(Path({str(tmp_path / "vectors")!r}), dim={DIM})
        store.upsert([VectorPoint({pid(1)!r}, [1.0, 0.0, 0.0, 0.0], SparseVector([7], [1.0]),
                                  {{"tenant": {TENANT!r}, "user_id": "alice", "created_at": 1.0}})])
        store.set_payload([{pid(1)!r}], {{"deleted": True}})
        print("acknowledged", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    service_root = str(Path(next(iter(memoryd.__path__))).parent)
    env = {**os.environ, "PYTHONPATH": service_root}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.strip() == "acknowledged"

    reopened = EdgeVectorStore(tmp_path / "vectors", dim=DIM)
    try:
        [got] = reopened.retrieve([pid(1)])
        assert got.payload["deleted"] is True
        assert [h.id for h in reopened.search(scope(), sparse=SparseVector([7], [1.0]))] == [pid(1)]
    finally:
        reopened.close()
