"""The Python filter evaluator (`core/memory/filter_eval.py`) selects exactly the points
every adapter's scroll and count select, on random filters over random payloads.

Where the evaluator answers at all: it may decline (None) and then nothing relies on it;
the test also requires it to decide most cases, so that it is not vacuous.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryd.core.memory.filter_eval import selects
from memoryd.core.memory.term_counts import live_condition
from memoryd.stores.vectors.port import (
    TERMS_FIELD,
    Condition,
    Filter,
    HasId,
    IsEmpty,
    IsNull,
    MatchAny,
    MatchValue,
    Range,
    VectorPoint,
    VectorStore,
    field_path,
)
from tests.stores.test_vector_store_contract import make_store, pid
from tests.support.vector_stores import ADAPTERS

POINTS = 80
FILTERS = 300
WORDS = ["a", "b", "c", "x.y", ""]
NUMBERS = [0, 1, 2, 5, 10]


def _sometimes(rng: random.Random, value: Any) -> Any:
    """`value`, or missing (None here: the caller leaves the field out), null, or another
    type."""
    return rng.choice([value, value, value, None, "null", rng.choice([1, True, "1", 1.5, []])])


@pytest.fixture(params=ADAPTERS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    """Each adapter (the cluster layout refuses filters on a tenant that reach every shard,
    which random filters do)."""
    opened = make_store(request.param, tmp_path / "data")
    yield opened
    opened.close()


def random_payload(rng: random.Random) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "tenant": rng.choice(["t1", "t2"]),
        "user_id": rng.choice(["u1", "u2", "u3"]),
        "tier": rng.choice(["long_term", "episodic"]),
        "created_at": float(rng.choice(NUMBERS)),
    }
    fields: dict[str, Any] = {
        "kind": rng.choice(["note", "message", "fact"]),
        "deleted": rng.choice([True, False]),
        "expires_at": rng.choice([float(n) for n in NUMBERS] + [3]),
        TERMS_FIELD: rng.sample(NUMBERS, rng.randint(0, 3)),
        "metadata": {k: rng.choice(WORDS) for k in rng.sample(["a", "x.y", "2024"], 2)},
        "position": rng.choice([1, 2, 3.0, 2.5]),
        "tags": rng.sample(WORDS[:3], rng.randint(0, 3)),
        "maybe": rng.choice([None, [], [None], "a", 1, [1, None], {"a": 1}]),
        "session_id": rng.choice(["s1", "s2", 7]),
    }
    for name, value in fields.items():
        chosen = _sometimes(rng, value)
        if chosen is None:
            continue
        payload[name] = None if chosen == "null" else chosen
    return payload


def random_condition(rng: random.Random, depth: int, ids: list[str]) -> Condition:
    roll = rng.random()
    if depth > 0 and roll < 0.2:
        return random_filter(rng, depth - 1, ids)
    if roll < 0.25:
        return HasId(rng.sample(ids, rng.randint(1, 4)))
    if roll < 0.3:
        return live_condition(float(rng.choice(NUMBERS)))
    kind = rng.choice(["value", "any", "range", "empty", "null"])
    text_fields = ["tenant", "user_id", "tier", "kind", "session_id", "tags"]
    text_fields += [field_path("metadata", k) for k in ("a", "x.y", "2024")]
    number_fields = [TERMS_FIELD, "position", "expires_at", "created_at"]
    if kind == "value":
        name = rng.choice([*text_fields, *number_fields, "deleted", "maybe"])
        words = ["t1", "u1", "u2", "long_term", "note", "s1", "a", "b", "x.y", ""]
        values: list[str | int | bool] = [
            rng.choice(words),
            rng.choice(NUMBERS),
            rng.choice([True, False]),
        ]
        return MatchValue(name, rng.choice(values))
    if kind == "any":
        name = rng.choice([*text_fields, *number_fields])
        if rng.random() < 0.5:
            return MatchAny(name, rng.sample(["t1", "u2", "note", "s1", "a", "c", ""], 2))
        return MatchAny(name, rng.sample(NUMBERS, 2))
    if kind == "range":
        name = rng.choice([*number_fields, "maybe", "deleted", "kind"])
        bound = rng.choice(["gt", "gte", "lt", "lte"])
        return Range(name, **{bound: float(rng.choice(NUMBERS)) + rng.choice([0, 0.5])})
    name = rng.choice(["expires_at", "deleted", "maybe", "tags", TERMS_FIELD, "metadata.a"])
    return IsEmpty(name) if kind == "empty" else IsNull(name)


def random_filter(rng: random.Random, depth: int, ids: list[str]) -> Filter:
    def some(most: int) -> list[Condition]:
        return [random_condition(rng, depth, ids) for _ in range(rng.randint(0, most))]

    return Filter(must=some(3), should=some(2), must_not=some(2))


def test_the_evaluator_selects_what_the_store_selects(store: VectorStore) -> None:
    rng = random.Random(28)
    points = [
        VectorPoint(id=pid(n), dense=[1.0, 0.0, 0.0, 0.0], payload=random_payload(rng))
        for n in range(1, POINTS + 1)
    ]
    store.upsert(points)
    ids = [p.id for p in points]
    decided = total = 0
    for _ in range(FILTERS):
        flt = random_filter(rng, 2, ids)
        found, _ = store.scroll(flt, limit=POINTS + 1)
        chosen = {p.id for p in found}
        assert store.count(flt) == len(chosen)
        for p in points:
            answer = selects(flt, p.id, p.payload)
            total += 1
            if answer is None:
                continue
            decided += 1
            assert answer == (p.id in chosen), (flt, p.payload)
    assert decided > 0.6 * total, f"decided only {decided} of {total}"


def test_the_filters_the_core_counts_with_are_always_decided(store: VectorStore) -> None:
    """The filters a vector tier counts (tenant, user, tier, kinds, metadata, not deleted,
    live) decide every payload the tiers write."""
    payload = {
        "tenant": "t1",
        "user_id": "u1",
        "tier": "long_term",
        "kind": "note",
        "deleted": False,
        "expires_at": None,
        "metadata": {"a": "b"},
        TERMS_FIELD: [1, 2],
    }
    store.upsert([VectorPoint(id=pid(1), dense=[1.0, 0.0, 0.0, 0.0], payload=payload)])
    for metadata, kinds, now in [({}, [], 5.0), ({"a": "b"}, ["note"], 5.0), ({"a": "c"}, [], 1)]:
        flt = Filter(
            must=[
                MatchValue("tenant", "t1"),
                MatchValue("user_id", "u1"),
                MatchValue("tier", "long_term"),
                *[MatchValue(field_path("metadata", k), v) for k, v in metadata.items()],
                *([MatchAny("kind", kinds)] if kinds else []),
                live_condition(now),
            ],
            must_not=[MatchValue("deleted", True)],
        )
        answer = selects(flt, pid(1), payload)
        assert answer is not None
        assert answer == (store.count(flt) == 1)
