"""The core's reporting port: store calls timed through a proxy, fan-out, request ids."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

import pytest

from memoryd.core.models import Scope, Tier
from memoryd.core.observe import (
    NullObserver,
    Observers,
    correlated,
    observed,
    request_id,
    user_hash,
)
from memoryd.transport.observability import caller_request_id


@dataclass
class Recorder(NullObserver):
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    removed: list[tuple[Tier, str, int]] = field(default_factory=list)

    def store_call(self, store: str, operation: str) -> AbstractContextManager[None]:
        @contextmanager
        def record() -> Iterator[None]:
            try:
                yield
                self.calls.append((store, operation, "ok"))
            except Exception:
                self.calls.append((store, operation, "error"))
                raise

        return record()

    def deleted(self, tier: Tier, reason: str, count: int) -> None:
        self.removed.append((tier, reason, count))


class Store:
    def __init__(self) -> None:
        self.size = 3

    def count(self) -> int:
        return self.size

    async def fetch(self, key: str) -> str:
        return key.upper()

    async def ping(self) -> bool:
        return True

    def broken(self) -> None:
        raise OSError("down")


async def test_each_public_store_call_is_reported_unless_skipped() -> None:
    recorder = Recorder()
    store = observed(Store(), "redis", recorder, skip=("ping",))
    assert store.count() == 3
    assert await store.fetch("k") == "K"
    assert await store.ping()
    assert store.size == 3  # attributes pass through untouched
    with pytest.raises(OSError):
        store.broken()
    assert recorder.calls == [
        ("redis", "count", "ok"),
        ("redis", "fetch", "ok"),
        ("redis", "broken", "error"),
    ]


def test_the_null_observer_leaves_stores_unwrapped() -> None:
    store = Store()
    assert observed(store, "redis", NullObserver()) is store


def test_observers_hand_every_report_to_each_part() -> None:
    first, second = Recorder(), Recorder()
    both = Observers(first, second)
    with both.store_call("qdrant_edge", "search"):
        pass
    both.deleted(Tier.WORKING, "evicted", 2)
    for part in (first, second):
        assert part.calls == [("qdrant_edge", "search", "ok")]
        assert part.removed == [(Tier.WORKING, "evicted", 2)]


async def test_a_request_id_holds_inside_its_block_and_its_tasks_only() -> None:
    assert request_id() == ""
    with correlated("abc") as rid:
        assert rid == "abc" and request_id() == "abc"

        async def seen() -> str:
            return request_id()

        assert await asyncio.create_task(seen()) == "abc"
    assert request_id() == ""
    with correlated("") as made:
        assert made and request_id() == made


def test_the_user_hash_is_stable_and_hides_the_id() -> None:
    one = user_hash(Scope("t", "alice"))
    assert one == user_hash(Scope("t", "alice", session_id="s")) and len(one) == 16
    assert one != user_hash(Scope("t2", "alice")) and "alice" not in one


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ((("x-request-id", "req-1.a:b/c"),), "req-1.a:b/c"),
        ((), ""),
        ((("x-request-id", "has space"),), ""),
        ((("x-request-id", "x" * 129),), ""),
        ((("x-request-id", "line\nbreak"),), ""),
        ((("other", "v"),), ""),
    ],
)
def test_only_a_short_plain_caller_request_id_is_used(
    metadata: tuple[tuple[str, str], ...], expected: str
) -> None:
    assert caller_request_id(metadata) == expected
