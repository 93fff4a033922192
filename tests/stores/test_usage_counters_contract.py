"""The usage-counter contract, the same for every adapter (in-process, Redis, Redis
Cluster): reservations check and count in one step, a failed write gives its room back,
a removed id is uncounted once, and a recount corrects drift without losing what is in
flight."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from memoryd.stores import usage
from memoryd.stores.usage.port import Counted, CounterKey, Outcome, UsageCounters
from tests.conftest import redis_settings


@pytest.fixture(params=sorted(usage.ADAPTERS))
async def counters(request: pytest.FixtureRequest) -> AsyncIterator[UsageCounters]:
    store = usage.ADAPTERS[request.param](redis_settings(request, request.param))
    yield store
    await store.close()


@pytest.fixture
def key() -> CounterKey:
    return CounterKey("acme", f"user-{uuid.uuid4().hex[:8]}", "long_term")


async def test_a_counter_is_missing_until_built_and_built_once(
    counters: UsageCounters, key: CounterKey
) -> None:
    assert await counters.get(key) is None
    got = await counters.reserve(key, 1, 10, max_count=5, max_bytes=0)
    assert got.outcome is Outcome.MISSING  # never read as zero
    assert await counters.init(key, Counted(3, 30))
    assert not await counters.init(key, Counted(0, 0))  # a second builder changes nothing
    assert await counters.get(key) == Counted(3, 30)


async def test_reserve_counts_what_fits_and_names_the_limit_it_hits(
    counters: UsageCounters, key: CounterKey
) -> None:
    await counters.init(key, Counted(0, 0))
    ok = await counters.reserve(key, 2, 60, max_count=3, max_bytes=100)
    assert ok.granted and ok.held == Counted(0, 0)
    by_count = await counters.reserve(key, 2, 10, max_count=3, max_bytes=100)
    assert by_count.outcome is Outcome.COUNT_FULL and by_count.held == Counted(2, 60)
    by_bytes = await counters.reserve(key, 1, 41, max_count=3, max_bytes=100)
    assert by_bytes.outcome is Outcome.BYTES_FULL
    assert (await counters.reserve(key, 1, 40, max_count=3, max_bytes=100)).granted
    assert await counters.get(key) == Counted(3, 100)
    # A limit of 0 is no limit.
    assert (await counters.reserve(key, 10, 10_000, max_count=0, max_bytes=0)).granted


async def test_concurrent_reservations_never_pass_the_limits(
    counters: UsageCounters, key: CounterKey
) -> None:
    await counters.init(key, Counted(0, 0))
    results = await asyncio.gather(
        *(counters.reserve(key, 1, 7, max_count=20, max_bytes=100) for _ in range(50))
    )
    granted = sum(r.granted for r in results)
    assert granted == 100 // 7  # the byte limit binds first: 14 x 7 bytes
    assert await counters.get(key) == Counted(granted, 7 * granted)


async def test_a_released_reservation_gives_its_room_back(
    counters: UsageCounters, key: CounterKey
) -> None:
    await counters.init(key, Counted(4, 40))
    assert (await counters.reserve(key, 1, 10, max_count=5, max_bytes=0)).granted
    await counters.release(key, 1, 10)
    assert await counters.get(key) == Counted(4, 40)
    assert (await counters.reserve(key, 1, 10, max_count=5, max_bytes=0)).granted


async def test_a_removed_id_is_uncounted_once(counters: UsageCounters, key: CounterKey) -> None:
    await counters.init(key, Counted(3, 30))
    assert await counters.forget(key, {"a": 10, "b": 5}) == Counted(2, 15)
    assert await counters.forget(key, {"a": 10, "c": 5}) == Counted(1, 5)  # "a" was gone
    assert await counters.get(key) == Counted(0, 10)


async def test_an_id_written_again_after_removal_is_uncounted_again(
    counters: UsageCounters, key: CounterKey
) -> None:
    await counters.init(key, Counted(1, 10))
    await counters.forget(key, {"a": 10})
    assert (await counters.reserve(key, 1, 10, max_count=0, max_bytes=0)).granted
    await counters.settle(key, 1, 10, ["a"])  # restored under the same id
    assert await counters.forget(key, {"a": 10}) == Counted(1, 10)
    assert await counters.get(key) == Counted(0, 0)


async def test_a_recount_corrects_drift_and_keeps_reservations_in_flight(
    counters: UsageCounters, key: CounterKey
) -> None:
    await counters.init(key, Counted(10, 100))
    assert (await counters.reserve(key, 1, 5, max_count=0, max_bytes=0)).granted  # in flight
    snap = await counters.snapshot(key)
    assert snap is not None and snap.pending == Counted(1, 5)
    # The store holds 7 memories (3 were lost to drift), the one in flight not yet written.
    fixed = await counters.correct(key, snap.version, Counted(7, 70))
    assert fixed is not None and fixed.before == Counted(11, 105)
    assert fixed.after == Counted(8, 75)  # 7 stored + 1 reserved
    await counters.settle(key, 1, 5, ["x"])
    assert await counters.get(key) == Counted(8, 75)


async def test_a_recount_is_not_applied_if_the_counter_moved_meanwhile(
    counters: UsageCounters, key: CounterKey
) -> None:
    await counters.init(key, Counted(5, 50))
    snap = await counters.snapshot(key)
    assert snap is not None
    await counters.forget(key, {"gone": 10})  # a delete during the recount
    assert await counters.correct(key, snap.version, Counted(5, 50)) is None
    assert await counters.get(key) == Counted(4, 40)


async def test_reservations_left_pending_by_a_dead_replica_are_dropped_by_the_next_recount(
    counters: UsageCounters, key: CounterKey
) -> None:
    await counters.init(key, Counted(2, 20))
    assert (await counters.reserve(key, 1, 10, max_count=0, max_bytes=0)).granted
    # The replica died before writing or settling: nothing moves any more.
    for _ in range(2):
        snap = await counters.snapshot(key)
        assert snap is not None
        fixed = await counters.correct(key, snap.version, Counted(2, 20))
        assert fixed is not None
    assert await counters.get(key) == Counted(2, 20)
    snap = await counters.snapshot(key)
    assert snap is not None and snap.pending == Counted(0, 0)


async def test_a_recount_builds_a_missing_counter_and_drop_forgets_it(
    counters: UsageCounters, key: CounterKey
) -> None:
    fixed = await counters.correct(key, 0, Counted(6, 60))
    assert fixed is not None and fixed.after == Counted(6, 60)
    assert await counters.get(key) == Counted(6, 60)
    await counters.drop(key)
    assert await counters.get(key) is None


async def test_a_counter_of_items_only_moves_by_zero_bytes(
    counters: UsageCounters, key: CounterKey
) -> None:
    """The entity tier counts no bytes: every step with 0 bytes works (never "-0")."""
    await counters.init(key, Counted(0, 0))
    assert (await counters.reserve(key, 2, 0, max_count=3, max_bytes=0)).granted
    await counters.settle(key, 1, 0, ["a"])
    await counters.release(key, 1, 0)
    assert await counters.get(key) == Counted(1, 0)
    assert await counters.forget(key, {"a": 0}) == Counted(1, 0)
    assert await counters.get(key) == Counted(0, 0)
