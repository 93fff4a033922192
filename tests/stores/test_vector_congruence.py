"""Congruence: every vector store adapter gives the same answers as the embedded one.

A seeded random sequence of operations (writes, filtered counts and scrolls, dense, sparse
and hybrid searches, retrieves) runs on qdrant-edge and on each other registered adapter
side by side; after every step both must agree: same ids in the same order, same payloads,
vectors and scores within float tolerance, the same error for a refused call.

Where the port leaves an order open, only what it fixes is compared: points with equal
scores (or equal `order_by` values) may come in either order, and when a result is cut
by `limit` inside such a tie, which of the tied points made it is open too.

Hard deletes here only remove points without a sparse vector. qdrant-edge, like a Qdrant
server, keeps counting deleted points in its sparse IDF statistics (they stay in the
sparse index until the segment is optimized, and the edge adapter never optimizes), while
qdrant-client's local mode counts live points only; so after deleting a point with terms,
sparse and hybrid scores legitimately differ between the two.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import models

from memoryd.stores.vectors.port import (
    Condition,
    Filter,
    HasId,
    IsEmpty,
    IsNull,
    MatchAny,
    MatchValue,
    Range,
    RrfParams,
    ScoredPoint,
    SparseVector,
    StoredPoint,
    VectorPoint,
    VectorStore,
    WithVectors,
)
from tests.support.vector_stores import ADAPTERS, SHARDED, ShardedQdrantStore, open_store

REFERENCE = "edge"
SEEDS = (11, 22, 33)
STEPS = 200
DIM = 6
VOCAB = 14
ID_POOL = 28
# Scores are float32 in qdrant-edge and float64 in local mode.
SCORE_REL = 1e-5
SCORE_ABS = 1e-6
VECTOR_TOL = 1e-5

USERS = ("alice", "bob", "carol")
TENANTS = ("acme", "globex")
KINDS = ("fact", "preference", "note", "event")
CATEGORIES = ("work", "home", "food")
TIERS = ("long_term", "persona", "episodic")


# --------------------------------------------------------------------------- the sequence


@dataclass(frozen=True)
class Step:
    """One operation: `run` performs it on a store, `compare` checks two outcomes agree."""

    label: str
    run: Callable[[VectorStore], Any]
    compare: Callable[[Any, Any], None]


class RandomOps:
    """Draws random, valid (now and then deliberately invalid) operations from one seed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ids = [str(uuid.UUID(int=self.rng.getrandbits(128))) for _ in range(ID_POOL)]
        # Ids last upserted without a sparse vector (or never): the only ones deleted by id.
        self.termless = set(self.ids)

    # -- values

    def some_ids(self, low: int, high: int) -> list[str]:
        return self.rng.sample(self.ids, self.rng.randint(low, high))

    def dense(self) -> list[float]:
        while True:
            vector = [self.rng.gauss(0.0, 1.0) for _ in range(DIM)]
            if math.sqrt(sum(x * x for x in vector)) > 0.1:
                return vector

    def sparse(self, low: int = 1, high: int = 4) -> SparseVector:
        terms = sorted(self.rng.sample(range(VOCAB), self.rng.randint(low, high)))
        return SparseVector(terms, [round(self.rng.uniform(0.1, 3.0), 3) for _ in terms])

    def payload(self) -> dict[str, Any]:
        rng = self.rng
        body: dict[str, Any] = {
            "tenant": rng.choice(TENANTS) if rng.random() < 0.2 else TENANTS[0],
            "user_id": rng.choice(USERS),
            # Few distinct values, so ordered scrolls meet ties across page boundaries.
            "created_at": float(rng.randint(1, 8)),
            "kind": rng.choice(KINDS),
            "priority": rng.randint(1, 3),
            "content": f"memory {rng.randint(0, 10_000)}",
            "metadata": {"category": rng.choice(CATEGORIES), "n": rng.randint(0, 9)},
            "importance": round(rng.random(), 3),
        }
        if rng.random() < 0.7:
            body["updated_at"] = round(rng.uniform(0, 100), 3)
        if rng.random() < 0.6:
            body["deleted"] = rng.random() < 0.3
        roll = rng.random()
        if roll < 0.3:
            body["expires_at"] = None
        elif roll < 0.6:
            body["expires_at"] = float(rng.randint(1, 8))
        if rng.random() < 0.5:
            body["tier"] = rng.choice(TIERS)
        return body

    def point(self, point_id: str) -> VectorPoint:
        sparse = None if self.rng.random() < 0.3 else self.sparse()
        if sparse is None:
            self.termless.add(point_id)
        else:
            self.termless.discard(point_id)
        return VectorPoint(
            point_id, self.dense(), sparse, {**self.payload(), "has_terms": bool(sparse)}
        )

    def condition(self, depth: int = 0) -> Condition:
        rng = self.rng
        choice = rng.randrange(12 if depth == 0 else 11)
        if choice == 0:
            return MatchValue("user_id", rng.choice(USERS))
        if choice == 1:
            return MatchValue("tenant", rng.choice(TENANTS))
        if choice == 2:
            return MatchAny("kind", rng.sample(KINDS, rng.randint(0, 3)))
        if choice == 3:
            return MatchAny("priority", rng.sample([1, 2, 3], rng.randint(1, 2)))
        if choice == 4:
            low = float(rng.randint(0, 8))
            return Range(
                "created_at",
                **{
                    rng.choice(("gt", "gte")): low,
                    rng.choice(("lt", "lte")): low + rng.randint(0, 5),
                },
            )
        if choice == 5:
            return IsEmpty(rng.choice(("deleted", "expires_at", "tier", "updated_at")))
        if choice == 6:
            return IsNull("expires_at")
        if choice == 7:
            return MatchValue("deleted", rng.random() < 0.5)
        if choice == 8:
            return MatchValue("metadata.category", rng.choice(CATEGORIES))
        if choice == 9:
            return HasId(self.some_ids(1, 8))
        if choice == 10:
            return MatchValue("tier", rng.choice(TIERS))
        return Filter(should=[self.condition(depth + 1) for _ in range(rng.randint(1, 3))])

    def filter(self) -> Filter | None:
        rng = self.rng
        if rng.random() < 0.15:
            return None
        return Filter(
            must=[self.condition() for _ in range(rng.randint(0, 2))],
            should=[self.condition() for _ in range(rng.choice((0, 0, 1, 2)))],
            must_not=[self.condition() for _ in range(rng.choice((0, 0, 1)))],
        )

    # -- steps

    def first_step(self) -> Step:
        points = [self.point(i) for i in self.ids[: ID_POOL // 2]]
        return Step(f"upsert {len(points)} points", lambda s: s.upsert(points), same_value)

    def step(self) -> Step:
        rng = self.rng
        draws: list[tuple[int, Callable[[], Step]]] = [
            (20, self.upsert),
            (8, self.set_payload),
            (4, self.delete),
            (5, self.delete_where),
            (8, self.count),
            (8, self.scroll),
            (10, self.ordered_scroll),
            (9, self.search_dense),
            (9, self.search_sparse),
            (12, self.search_hybrid),
            (7, self.retrieve),
        ]
        weights = [w for w, _ in draws]
        return rng.choices([make for _, make in draws], weights)[0]()

    def upsert(self) -> Step:
        points = [self.point(i) for i in self.some_ids(1, 4)]
        return Step(f"upsert {[p.id[:8] for p in points]}", lambda s: s.upsert(points), same_value)

    def set_payload(self) -> Step:
        rng = self.rng
        patch: dict[str, Any] = rng.choice(
            [
                {"deleted": rng.random() < 0.5},
                {"kind": rng.choice(KINDS), "priority": rng.randint(1, 3)},
                {"metadata": {"category": rng.choice(CATEGORIES)}},
                {"expires_at": None},
                {"created_at": float(rng.randint(1, 8)), "tier": rng.choice(TIERS)},
            ]
        )
        ids = [*self.some_ids(1, 4), str(uuid.UUID(int=rng.getrandbits(128)))]  # one unknown
        return Step(f"set_payload {patch}", lambda s: s.set_payload(ids, patch), same_value)

    def delete(self) -> Step:
        ids = self.rng.sample(
            sorted(self.termless), min(len(self.termless), self.rng.randint(1, 3))
        )
        return Step(f"delete {[i[:8] for i in ids]}", lambda s: s.delete(ids), same_value)

    def delete_where(self) -> Step:
        if self.rng.random() < 0.1:
            return Step("delete_where (empty)", lambda s: s.delete_where(Filter()), same_value)
        where = (self.filter() or Filter()).and_(MatchValue("has_terms", False))
        return Step(f"delete_where {where}", lambda s: s.delete_where(where), same_value)

    def count(self) -> Step:
        where = self.filter()
        return Step(f"count {where}", lambda s: s.count(where), same_value)

    def scroll(self) -> Step:
        where, limit = self.filter(), self.rng.randint(1, 9)
        with_vectors: WithVectors = self.rng.choice([False, False, True, "dense"])

        def pages(store: VectorStore) -> list[tuple[list[StoredPoint], bool]]:
            out: list[tuple[list[StoredPoint], bool]] = []
            token: str | None = None
            for _ in range(ID_POOL + 2):  # bounded: a token that never advances fails
                page, token = store.scroll(
                    where, limit=limit, offset=token, with_vectors=with_vectors
                )
                out.append((page, token is None))
                if token is None:
                    return out
            raise AssertionError("scroll never reached the end")

        return Step(f"scroll limit={limit} {where}", pages, same_pages)

    def ordered_scroll(self) -> Step:
        where, limit = self.filter(), self.rng.randint(1, 6)
        field = self.rng.choice(("created_at", "updated_at", "expires_at"))
        descending = self.rng.random() < 0.5

        def scroll_all(store: VectorStore) -> list[StoredPoint]:
            out: list[StoredPoint] = []
            token: str | None = None
            for _ in range(ID_POOL + 2):
                page, token = store.scroll(
                    where, limit=limit, offset=token, order_by=field, descending=descending
                )
                assert len(page) <= limit
                out.extend(page)
                if token is None:
                    return out
            raise AssertionError("ordered scroll never reached the end")

        return Step(
            f"scroll order_by={field} desc={descending} limit={limit} {where}",
            scroll_all,
            lambda a, b: same_ordered(a, b, field),
        )

    def _search(self, label: str, **query: Any) -> Step:
        where, limit = self.filter(), self.rng.randint(1, 12)
        with_vectors = self.rng.random() < 0.3
        return Step(
            f"search {label} limit={limit} {where}",
            lambda s: s.search(where, limit=limit, with_vectors=with_vectors, **query),
            lambda a, b: same_hits(a, b, limit),
        )

    def search_dense(self) -> Step:
        return self._search("dense", dense=self.dense())

    def search_sparse(self) -> Step:
        return self._search("sparse", sparse=self.sparse(1, 3))

    def search_hybrid(self) -> Step:
        rng = self.rng
        fusion = RrfParams(
            k=rng.choice((1, 2, 10, 60)),
            dense_weight=rng.choice((1.0, 1.0, 0.5, 2.0)),
            sparse_weight=rng.choice((1.0, 1.0, 0.7, 3.0)),
            prefetch_limit=rng.choice((None, 1, 3, 8)),
        )
        return self._search(
            f"hybrid {fusion}", dense=self.dense(), sparse=self.sparse(1, 3), fusion=fusion
        )

    def retrieve(self) -> Step:
        ids = [*self.some_ids(1, 5), str(uuid.UUID(int=self.rng.getrandbits(128)))]
        self.rng.shuffle(ids)
        with_vectors: WithVectors = self.rng.choice([False, True, "dense"])
        return Step(
            f"retrieve {[i[:8] for i in ids]}",
            lambda s: s.retrieve(ids, with_vectors=with_vectors),
            same_points,
        )


# --------------------------------------------------------------------------- comparisons


def same_value(a: Any, b: Any) -> None:
    assert a == b


def same_point(a: StoredPoint, b: StoredPoint) -> None:
    assert a.id == b.id
    assert a.payload == b.payload, a.id
    assert (a.dense is None) == (b.dense is None), a.id
    if a.dense is not None and b.dense is not None:
        assert a.dense == pytest.approx(b.dense, abs=VECTOR_TOL), a.id
    assert sparse_terms(a.sparse) == pytest.approx(sparse_terms(b.sparse), abs=VECTOR_TOL), a.id


def sparse_terms(sparse: SparseVector | None) -> dict[int, float]:
    if sparse is None:
        return {}
    return dict(zip(sparse.indices, sparse.values, strict=True))


def same_points(a: Sequence[StoredPoint], b: Sequence[StoredPoint]) -> None:
    assert [p.id for p in a] == [p.id for p in b]
    for x, y in zip(a, b, strict=True):
        same_point(x, y)


def same_pages(
    a: list[tuple[list[StoredPoint], bool]], b: list[tuple[list[StoredPoint], bool]]
) -> None:
    assert [(len(page), last) for page, last in a] == [(len(page), last) for page, last in b]
    for (x, _), (y, _) in zip(a, b, strict=True):
        same_points(x, y)


def same_ordered(a: list[StoredPoint], b: list[StoredPoint], field: str) -> None:
    """Same points in the same order of `field`; ties may come in any order."""
    assert [p.payload[field] for p in a] == [p.payload[field] for p in b]
    assert len({p.id for p in a}) == len(a), "a point came twice"

    def by_value_then_id(points: list[StoredPoint]) -> list[StoredPoint]:
        return sorted(points, key=lambda p: (p.payload[field], p.id))

    same_points(by_value_then_id(a), by_value_then_id(b))


def same_hits(a: list[ScoredPoint], b: list[ScoredPoint], limit: int) -> None:
    """Same scores rank by rank; within a run of equal scores the same points, except in
    a run cut short by `limit`, where which tied points made it is open."""
    assert [h.score for h in a] == pytest.approx([h.score for h in b], rel=SCORE_REL, abs=SCORE_ABS)
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(a) + 1):
        if i == len(a) or not math.isclose(
            a[i].score, a[start].score, rel_tol=SCORE_REL, abs_tol=SCORE_ABS
        ):
            runs.append((start, i))
            start = i
    for start, end in runs:
        if end == len(a) == limit:
            continue  # a run the limit may have cut
        assert {h.id for h in a[start:end]} == {h.id for h in b[start:end]}, (start, end)
    by_id = {h.id: h for h in b}
    for hit in a:
        other = by_id.get(hit.id)
        if other is None:
            continue
        assert hit.payload == other.payload, hit.id
        assert (hit.dense_vector is None) == (other.dense_vector is None), hit.id
        if hit.dense_vector is not None and other.dense_vector is not None:
            assert hit.dense_vector == pytest.approx(other.dense_vector, abs=VECTOR_TOL)


def outcome(step: Step, store: VectorStore) -> tuple[bool, Any]:
    """(True, result) or (False, the exception's type): a refusal must match too."""
    try:
        return True, step.run(store)
    except (ValueError, TypeError) as exc:
        return False, type(exc)


# --------------------------------------------------------------------------- the test


@pytest.fixture
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[VectorStore, ...]]:
    opened = [open_store(kind, tmp_path / kind, DIM) for kind in (REFERENCE, request.param)]
    yield tuple(opened)
    for store in opened:
        store.close()


@pytest.mark.parametrize(
    "stores", [*(k for k in ADAPTERS if k != REFERENCE), SHARDED], indirect=True
)
@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_sequence_of_operations_gives_the_same_answers(
    stores: tuple[VectorStore, VectorStore], seed: int
) -> None:
    reference, other = stores
    sequence = RandomOps(seed)
    steps = [sequence.first_step(), *(sequence.step() for _ in range(STEPS))]
    answered = 0  # reads that found something: the sequence must not compare only nothing
    for n, step in enumerate(steps):
        ok_a, a = outcome(step, reference)
        ok_b, b = outcome(step, other)
        answered += bool(ok_a and a)
        try:
            assert ok_a == ok_b, (a, b)
            if ok_a:
                step.compare(a, b)
            else:
                assert a is b
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, step {n}: {step.label}\n{exc}") from exc
    assert answered >= STEPS // 3
    if isinstance(other, ShardedQdrantStore):
        routed_by_tenant(other)


def routed_by_tenant(store: ShardedQdrantStore) -> None:
    """Sharded by tenant, every write went to its tenant's shard key and every call whose
    filter names a tenant to that tenant's key (the stand-in cluster refuses anything
    else); each key was created once, with the replication factor of the settings; every
    dense search asked for rescoring of the int8 candidates (local mode searches exactly,
    which is why the answers equal edge's)."""
    cluster = store.cluster
    rescored = models.SearchParams(
        quantization=models.QuantizationSearchParams(rescore=True, oversampling=2.0)
    )
    assert cluster.dense_params and all(p == rescored for p in cluster.dense_params)
    assert cluster.violations == []
    assert sorted(cluster.key_requests) == sorted(TENANTS)  # each asked for once
    assert set(cluster.shard_keys) == set(TENANTS)
    assert all(p["replication_factor"] == 2 for p in cluster.shard_keys.values())
    named = {call for call, key in cluster.selectors if key is not None}
    assert "upsert" in named and named & {"query_points", "count", "scroll"}
