"""`compact` (ADR 0602) moves an embedded store's points into memory-mapped segments and
changes no answer: a compacted store answers every call as its twin that was never
compacted, before and after further writes and across a reopen; killed half-way it leaves
the store as it was. `memoryd compact` runs it with the server stopped."""

from __future__ import annotations

import asyncio
import math
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import qdrant_edge as qe

from memoryd.app import DataDirLock
from memoryd.cli.main import main
from memoryd.stores.vectors import edge_store
from memoryd.stores.vectors.edge_store import EdgeVectorStore
from memoryd.stores.vectors.port import (
    PAYLOAD_INDEXES,
    TERMS_FIELD,
    Filter,
    IsEmpty,
    MatchAny,
    MatchValue,
    Range,
    ScoredPoint,
    SparseVector,
    VectorPoint,
)

DIM = 16  # the engine compacts a segment from 1 KB of vectors: 64 points of this size
USERS = [("acme", "alice"), ("acme", "bob"), ("globex", "alice")]
PER_USER = 60


def pid(n: int) -> str:
    return str(uuid.UUID(int=n))


def memory(n: int, tenant: str, user: str, rng: random.Random, **extra: Any) -> VectorPoint:
    terms = sorted(rng.sample(range(1, 40), 4))
    payload: dict[str, Any] = {
        "tenant": tenant,
        "user_id": user,
        "tier": "long_term" if n % 7 else "persona",
        "created_at": float(n),
        "position": float(n % 20),
        "session_id": f"s{n % 3}",
        "content_hash": f"h{n}",
        "deleted": n % 11 == 0,
        TERMS_FIELD: terms,
    }
    if n % 5 == 0:
        payload["expires_at"] = float(1000 + n)
    payload.update(extra)
    return VectorPoint(
        id=pid(n),
        dense=[rng.uniform(-1, 1) for _ in range(DIM)],
        sparse=SparseVector(indices=terms, values=[rng.uniform(0.5, 2.0) for _ in terms]),
        payload=payload,
    )


def memories(seed: int = 3) -> list[VectorPoint]:
    rng = random.Random(seed)
    points = []
    for u, (tenant, user) in enumerate(USERS):
        points += [memory(u * 1000 + i, tenant, user, rng) for i in range(1, PER_USER + 1)]
    return points


def owner(tenant: str, user: str) -> Filter:
    return Filter(must=[MatchValue("tenant", tenant), MatchValue("user_id", user)])


def hits(found: list[ScoredPoint]) -> list[tuple[str, float]]:
    """Hits with their scores; tied hits in id order (the engine orders ties by segment)."""
    return sorted(((h.id, round(h.score, 3)) for h in found), key=lambda h: (-h[1], h[0]))


def answers(store: EdgeVectorStore) -> dict[str, Any]:
    """What each kind of call a tier makes returns, for every user."""
    rng = random.Random(11)
    out: dict[str, Any] = {"count": store.count(), "tenants": store.facet(None, "tenant")}
    for tenant, user in USERS:
        mine = owner(tenant, user)
        live = Filter(must=[mine], must_not=[MatchValue("deleted", True)])
        key = f"{tenant}/{user}"
        query = [rng.uniform(-1, 1) for _ in range(DIM)]
        words = SparseVector(indices=[3, 7, 12], values=[1.0, 1.0, 1.0])
        out[key] = {
            "dense": hits(store.search(live, dense=query, limit=15)),
            "sparse": hits(store.search(live, sparse=words, limit=60)),
            # Fused ranks move with the order of tied scores: the set of hits is compared.
            "hybrid": sorted(h.id for h in store.search(live, dense=query, sparse=words, limit=60)),
            "count": store.count(live),
            "unexpiring": store.count(Filter(must=[mine], must_not=[IsEmpty("expires_at")])),
            "count_each": store.count_each(mine, TERMS_FIELD, [3, 7, 12, 39]),
            "facet": store.facet(mine, TERMS_FIELD),
            "recent": [
                p.id
                for p in store.scroll(
                    Filter(must=[mine, Range("created_at", gte=10.0)]),
                    limit=12,
                    order_by="created_at",
                    descending=True,
                )[0]
            ],
            "session": sorted(
                p.id
                for p in store.scroll(
                    Filter(must=[mine, MatchAny("session_id", ["s1", "s2"])]), limit=100
                )[0]
            ),
            "read": [
                (p.id, p.payload, None if p.dense is None else p.dense.tolist())
                for p in store.retrieve([pid(1), pid(1001), pid(2005)], with_vectors=True)
            ],
        }
    return out


def later_writes(store: EdgeVectorStore) -> None:
    """Writes that reach compacted points: replacing, patching and deleting them."""
    rng = random.Random(5)
    store.upsert([memory(n, "acme", "alice", rng, topic="replaced") for n in (1, 3, 4, 40)])
    store.upsert([memory(n, "acme", "alice", rng) for n in (500, 501)])
    store.set_payload([pid(1002), pid(1003)], {"deleted": True})
    store.delete([pid(5), pid(2010)])
    store.delete_where(Filter(must=[*owner("acme", "bob").must, MatchValue("session_id", "s0")]))


@pytest.fixture
def twins(tmp_path: Path) -> Iterator[Callable[[], tuple[EdgeVectorStore, EdgeVectorStore]]]:
    """An uncompacted store and a compacted one of the same memories (reopened on call)."""
    opened: list[EdgeVectorStore] = []

    def reopen() -> tuple[EdgeVectorStore, EdgeVectorStore]:
        for store in opened:
            store.close()
        opened[:] = [EdgeVectorStore(tmp_path / name, dim=DIM) for name in ("plain", "compact")]
        return opened[0], opened[1]

    plain, compacted = reopen()
    for store in (plain, compacted):
        store.upsert(memories())
    yield reopen
    for store in opened:
        store.close()


def segments(store_dir: Path) -> list[Path]:
    return sorted((store_dir / "memories" / "segments").iterdir())


def test_a_compacted_store_answers_every_call_as_before(
    twins: Callable[[], tuple[EdgeVectorStore, EdgeVectorStore]], tmp_path: Path
) -> None:
    plain, compacted = twins()
    before = answers(plain)
    assert before == answers(compacted)

    assert compacted.compact() is True

    assert answers(compacted) == before
    # The points moved into a segment of its own, beside an empty one for new writes.
    assert len(segments(tmp_path / "compact")) == 2


def without_keyword_scores(found: dict[str, Any]) -> dict[str, Any]:
    return {
        key: {**calls, "sparse": sorted(h[0] for h in calls["sparse"])}
        if isinstance(calls, dict) and "sparse" in calls
        else calls
        for key, calls in found.items()
    }


def bm25(store: EdgeVectorStore, point_id: str, query: SparseVector) -> float:
    """The point's keyword score from the live points' statistics (the engine's IDF)."""
    live = store.count()
    [point] = store.retrieve([point_id], with_vectors=True)
    assert point.sparse is not None
    weights = dict(zip(point.sparse.indices, point.sparse.values, strict=True))
    score = 0.0
    for term in set(query.indices) & weights.keys():
        df = store.count(Filter(must=[MatchValue(TERMS_FIELD, term)]))
        score += math.log(1 + (live - df + 0.5) / (df + 0.5)) * weights[term]
    return round(score, 3)


def test_writes_after_compaction_replace_patch_and_delete_compacted_points(
    twins: Callable[[], tuple[EdgeVectorStore, EdgeVectorStore]],
) -> None:
    plain, compacted = twins()
    compacted.compact()

    for store in (plain, compacted):
        later_writes(store)

    after = answers(plain)
    assert after["acme/alice"]["read"][0][1]["topic"] == "replaced"
    # Replaced and deleted points linger in either store's keyword statistics until a
    # compaction (the engine's IDF), so only the keyword scores may differ.
    assert without_keyword_scores(answers(compacted)) == without_keyword_scores(after)
    plain, compacted = twins()  # the same once both are reopened
    assert without_keyword_scores(answers(compacted)) == without_keyword_scores(after)


def test_compaction_makes_the_keyword_statistics_those_of_the_live_points(
    twins: Callable[[], tuple[EdgeVectorStore, EdgeVectorStore]],
) -> None:
    _, compacted = twins()
    compacted.compact()
    later_writes(compacted)

    assert compacted.compact() is True
    words = SparseVector(indices=[3, 7, 12], values=[1.0, 1.0, 1.0])
    found = compacted.search(owner("acme", "alice"), sparse=words, limit=60)
    assert found
    assert [round(h.score, 3) for h in found] == [bm25(compacted, h.id, words) for h in found]


def test_compacting_again_moves_only_what_was_written_since(
    twins: Callable[[], tuple[EdgeVectorStore, EdgeVectorStore]],
) -> None:
    plain, compacted = twins()
    assert compacted.compact() is True
    assert compacted.compact() is False  # nothing new

    for store in (plain, compacted):
        store.upsert(memories(seed=9))  # the same ids again: every point replaced
    assert compacted.compact() is True
    assert answers(compacted) == answers(plain)


def test_compaction_rebuilds_indexes_an_earlier_version_kept_in_ram(tmp_path: Path) -> None:
    store = EdgeVectorStore(tmp_path, dim=DIM)
    try:
        # As versions before compaction created them: no parameters, maps in RAM.
        for name in ("tier", "created_at"):
            store._shard.update(qe.UpdateOperation.delete_field_index(name))
        store._shard.update(
            qe.UpdateOperation.create_field_index("tier", qe.PayloadSchemaType.Keyword)
        )
        store._shard.update(
            qe.UpdateOperation.create_field_index("created_at", qe.PayloadSchemaType.Float)
        )
        store.upsert(memories())
        before = answers(store)
        assert not memory_mapped(store) & {"tier", "created_at"}

        assert store.compact() is True

        assert memory_mapped(store) == {name for name, _ in PAYLOAD_INDEXES}
        assert answers(store) == before
    finally:
        store.close()


def memory_mapped(store: EdgeVectorStore) -> set[str]:
    return {
        name
        for name, info in store._shard.info().payload_schema.items()
        if info.params is not None and info.params.memory == qe.Memory.Cached
    }


def quantized_segments(store_dir: Path) -> list[Path]:
    """Segments holding an int8 copy of their dense vectors (the engine's file for it)."""
    return [
        s for s in segments(store_dir) if (s / "vector_storage-dense" / "quantized.data").is_file()
    ]


def unit_vectors(rng: random.Random, count: int, dim: int) -> list[list[float]]:
    vectors = []
    for _ in range(count):
        v = [rng.gauss(0, 1) for _ in range(dim)]
        norm = math.sqrt(sum(x * x for x in v))
        vectors.append([x / norm for x in v])
    return vectors


def test_a_compacted_segment_searches_int8_vectors_and_ranks_by_the_originals(
    tmp_path: Path,
) -> None:
    dim, per_user = 64, 800
    rng = random.Random(17)
    store = EdgeVectorStore(tmp_path, dim=dim)
    try:
        vectors = unit_vectors(rng, 2 * per_user, dim)
        store.upsert(
            [
                VectorPoint(
                    id=pid(n),
                    dense=vector,
                    payload={"tenant": "acme", "user_id": "alice" if n < per_user else "bob"},
                )
                for n, vector in enumerate(vectors)
            ]
        )
        assert store.compact() is True
        assert len(quantized_segments(tmp_path)) == 1

        alice = owner("acme", "alice")
        for query in unit_vectors(rng, 25, dim):
            cosines = sorted(
                (
                    (sum(a * b for a, b in zip(v, query, strict=True)), pid(n))
                    for n, v in enumerate(vectors[:per_user])
                ),
                reverse=True,
            )
            exact = [(i, round(c, 4)) for c, i in cosines[:10]]
            found = store.search(alice, dense=query, limit=10)
            assert [(h.id, round(h.score, 4)) for h in found] == exact
    finally:
        store.close()


def test_compaction_quantizes_a_store_an_earlier_version_compacted_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(edge_store, "_QUANTIZED", None)
    store = EdgeVectorStore(tmp_path, dim=DIM)
    try:
        store.upsert(memories())
        store.compact()
        before = answers(store)
        assert quantized_segments(tmp_path) == []
        monkeypatch.undo()

        assert store.compact() is True

        assert len(quantized_segments(tmp_path)) == 1
        assert answers(store) == before
    finally:
        store.close()


# ------------------------------------------------------------------- memoryd compact


def run_compact(data_dir: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> int:
    monkeypatch.setenv("MEMORYD_DATA_DIR", str(data_dir))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return main(["compact"])


def test_memoryd_compact_rebuilds_a_stopped_servers_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = EdgeVectorStore(tmp_path / "vectors", dim=DIM)
    store.upsert(memories())
    store.write_meta({"dim": DIM})
    before = answers(store)
    store.close()

    assert run_compact(tmp_path, monkeypatch) == 0
    assert "compact done: 180 memories rebuilt" in capsys.readouterr().out

    store = EdgeVectorStore(tmp_path / "vectors", dim=DIM)
    try:
        assert answers(store) == before
    finally:
        store.close()
    assert run_compact(tmp_path, monkeypatch) == 0
    assert "already compact" in capsys.readouterr().out


def test_a_compaction_killed_while_it_builds_leaves_the_store_as_it_was(
    tmp_path: Path,
) -> None:
    dim, count = 64, 20_000  # its segment takes ~0.5 s to build: time to see it and kill
    rng = random.Random(23)
    store = EdgeVectorStore(tmp_path / "vectors", dim=dim)
    users = [("acme", "alice"), ("acme", "bob")]
    batch = [
        VectorPoint(
            id=pid(n),
            dense=vector,
            payload={"tenant": users[n % 2][0], "user_id": users[n % 2][1], "created_at": float(n)},
        )
        for n, vector in enumerate(unit_vectors(rng, count, dim))
    ]
    [query] = unit_vectors(rng, 1, dim)

    def state(s: EdgeVectorStore) -> tuple[int, list[tuple[str, float]]]:
        return s.count(owner(*users[0])), hits(s.search(owner(*users[0]), dense=query, limit=10))

    try:
        for start in range(0, count, 5_000):
            store.upsert(batch[start : start + 5_000])
        store.write_meta({"dim": dim})
        before = state(store)
    finally:
        store.close()

    building = tmp_path / "vectors" / "memories" / "temp_segments"
    env = {**os.environ, "MEMORYD_DATA_DIR": str(tmp_path)}
    compact = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from memoryd.cli.main import main; raise SystemExit(main(['compact']))",
        ],
        env=env,
    )
    try:
        while compact.poll() is None and not any(building.glob("segment_builder_*")):
            time.sleep(0.002)
        assert compact.poll() is None, "the compaction ended before its segment was seen building"
        compact.send_signal(signal.SIGKILL)
    finally:
        compact.wait()

    store = EdgeVectorStore(tmp_path / "vectors", dim=dim)
    try:
        assert store.count() == count
        assert state(store) == before
        assert store.compact() is True  # and a compaction afterwards runs to its end
        assert state(store) == before
    finally:
        store.close()


def test_memoryd_compact_is_refused_while_a_server_holds_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = EdgeVectorStore(tmp_path / "vectors", dim=DIM)
    store.write_meta({"dim": DIM})
    store.close()
    server = DataDirLock(tmp_path)
    try:
        assert run_compact(tmp_path, monkeypatch) == 2
    finally:
        asyncio.run(server.release())
    assert "in use by another memoryd" in caplog.text


def test_memoryd_compact_refuses_a_directory_without_a_store_and_a_qdrant_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert run_compact(tmp_path, monkeypatch) == 2
    assert "no vector store to compact" in caplog.text
    assert run_compact(tmp_path, monkeypatch, MEMORYD_VECTORS__BACKEND="qdrant") == 2
    assert "a Qdrant server optimizes its own segments" in caplog.text
