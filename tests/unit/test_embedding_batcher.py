"""The micro-batching embedder: concurrent requests share model calls, within bounds.

The model is `HashEmbedder` behind `GatedEmbedder`, which records every call and can hold
a call until the test lets it finish: that is how a test keeps the model "busy" while more
requests arrive, without relying on timing.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import AsyncIterator, Sequence

import pytest

from memoryd.core.memory.embedding_batcher import EmbeddingBatcher
from memoryd.core.tasks import in_background
from memoryd.stores.embeddings.cache import CachedEmbedder
from memoryd.stores.embeddings.port import EmbedderUnavailable
from tests.unit.unit_kit import LIVENESS_S, GatedEmbedder, HashEmbedder


def alone(text: str) -> list[float]:
    [vector] = HashEmbedder().embed([text])
    return vector


@pytest.fixture
def model() -> GatedEmbedder:
    return GatedEmbedder()


@pytest.fixture
async def batcher(model: GatedEmbedder) -> AsyncIterator[EmbeddingBatcher]:
    batcher = EmbeddingBatcher(model, max_batch=4, max_wait_s=0.0)
    yield batcher
    model.release()
    await batcher.close()


async def settle() -> None:
    """Let every ready task run until it waits (requests queue, the dispatcher wakes)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_each_request_gets_its_vectors_in_order(batcher: EmbeddingBatcher) -> None:
    texts = ["the cat sleeps", "stock market", "green tea", "the cat sleeps"]
    assert await batcher.embed(texts) == [alone(t) for t in texts]
    assert await batcher.embed([]) == []


async def test_requests_arriving_while_the_model_is_busy_share_one_call(
    batcher: EmbeddingBatcher, model: GatedEmbedder
) -> None:
    first = await model.hold_first_call(batcher)
    waiting = [asyncio.create_task(batcher.embed([f"text {i}"])) for i in range(3)]
    await settle()
    model.release()
    results = await asyncio.wait_for(asyncio.gather(first, *waiting), LIVENESS_S)

    assert model.calls == [["first"], ["text 0", "text 1", "text 2"]]
    assert results[1:] == [[alone(f"text {i}")] for i in range(3)]
    stats = batcher.stats()
    assert (stats.batches, stats.texts, stats.largest) == (2, 4, 3)


async def test_a_batch_holds_at_most_max_batch_texts_and_never_splits_a_request(
    batcher: EmbeddingBatcher, model: GatedEmbedder
) -> None:
    first = await model.hold_first_call(batcher)
    singles = [asyncio.create_task(batcher.embed([f"s{i}"])) for i in range(5)]
    large = asyncio.create_task(batcher.embed([f"big{i}" for i in range(6)]))
    await settle()
    model.release()
    await asyncio.wait_for(asyncio.gather(first, *singles, large), LIVENESS_S)

    assert [len(call) for call in model.calls] == [1, 4, 1, 6]
    assert model.calls[3] == [f"big{i}" for i in range(6)]


async def test_a_full_batch_does_not_wait_for_max_wait(model: GatedEmbedder) -> None:
    batcher = EmbeddingBatcher(model, max_batch=2, max_wait_s=3600)
    try:
        results = await asyncio.wait_for(
            asyncio.gather(batcher.embed(["a"]), batcher.embed(["b"])), LIVENESS_S
        )
    finally:
        await batcher.close()
    assert list(results) == [[alone("a")], [alone("b")]]
    assert model.calls == [["a", "b"]]


async def test_a_lone_request_on_an_idle_batcher_does_not_wait(model: GatedEmbedder) -> None:
    batcher = EmbeddingBatcher(model, max_batch=64, max_wait_s=3600)
    try:
        assert await asyncio.wait_for(batcher.embed(["alone"]), LIVENESS_S) == [alone("alone")]
        assert await asyncio.wait_for(batcher.embed(["again"]), LIVENESS_S) == [alone("again")]
    finally:
        await batcher.close()
    assert model.calls == [["alone"], ["again"]]


async def test_under_load_a_batch_waits_for_company_until_it_is_full(
    model: GatedEmbedder,
) -> None:
    batcher = EmbeddingBatcher(model, max_batch=3, max_wait_s=3600)
    try:
        # Two requests in one batch: the batcher is under load from then on.
        await asyncio.gather(batcher.embed(["a"]), batcher.embed(["b"]))
        waiting = asyncio.create_task(batcher.embed(["c"]))
        await settle()
        assert model.calls == [["a", "b"]]  # "c" waits for company
        late = [asyncio.create_task(batcher.embed([t])) for t in ("d", "e")]
        await asyncio.wait_for(asyncio.gather(waiting, *late), LIVENESS_S)
    finally:
        await batcher.close()
    assert model.calls == [["a", "b"], ["c", "d", "e"]]


async def test_the_same_text_from_two_requests_is_embedded_once(
    batcher: EmbeddingBatcher, model: GatedEmbedder
) -> None:
    first = await model.hold_first_call(batcher)
    a = asyncio.create_task(batcher.embed(["shared", "only a"]))
    b = asyncio.create_task(batcher.embed(["shared"]))
    await settle()
    model.release()
    _, got_a, got_b = await asyncio.wait_for(asyncio.gather(first, a, b), LIVENESS_S)

    assert model.calls[1] == ["shared", "only a"]
    assert got_a[0] == got_b[0] == alone("shared")
    got_a[0].append(1.0)  # each request owns its lists
    assert got_b[0] == alone("shared")


async def test_a_cancelled_request_leaves_the_queue_unembedded(
    batcher: EmbeddingBatcher, model: GatedEmbedder
) -> None:
    first = await model.hold_first_call(batcher)
    gone = asyncio.create_task(batcher.embed(["cancelled text"]))
    kept = asyncio.create_task(batcher.embed(["kept text"]))
    await settle()
    gone.cancel()
    model.release()
    await asyncio.wait_for(asyncio.gather(first, kept), LIVENESS_S)

    with pytest.raises(asyncio.CancelledError):
        await gone
    assert "cancelled text" not in model.texts_embedded
    assert kept.result() == [alone("kept text")]


async def test_a_request_past_its_deadline_stops_waiting_and_is_not_embedded(
    batcher: EmbeddingBatcher, model: GatedEmbedder
) -> None:
    first = await model.hold_first_call(batcher)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await batcher.embed(["too late"])
    model.release()
    await asyncio.wait_for(first, LIVENESS_S)
    await batcher.embed(["after"])

    assert "too late" not in model.texts_embedded


async def test_a_provider_failure_reaches_every_request_of_the_batch() -> None:
    class Down(HashEmbedder):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            raise EmbedderUnavailable("provider down", embedder=self.name, status_code=503)

    down = EmbeddingBatcher(Down(), max_batch=8, max_wait_s=0.01)
    try:
        results = await asyncio.gather(down.embed(["a"]), down.embed(["b"]), return_exceptions=True)
    finally:
        await down.close()
    assert all(isinstance(r, EmbedderUnavailable) for r in results)


async def test_a_rejected_input_fails_only_the_request_that_sent_it() -> None:
    model = GatedEmbedder(reject="poison")
    batcher = EmbeddingBatcher(model, max_batch=8, max_wait_s=0.0)
    try:
        first = await model.hold_first_call(batcher)
        bad = asyncio.create_task(batcher.embed(["poison"]))
        good = asyncio.create_task(batcher.embed(["fine"]))
        await settle()
        model.release()
        await asyncio.wait_for(asyncio.gather(first, bad, good, return_exceptions=True), LIVENESS_S)
    finally:
        await batcher.close()

    assert isinstance(bad.exception(), EmbedderUnavailable)
    assert good.result() == [alone("fine")]
    assert model.calls[1:] == [["poison", "fine"], ["poison"], ["fine"]]


async def test_cached_texts_are_answered_without_a_model_call() -> None:
    model = GatedEmbedder()
    batcher = EmbeddingBatcher(CachedEmbedder(model), max_batch=8, max_wait_s=0.0)
    try:
        await batcher.embed(["known", "other"])
        model.gate.clear()  # a model call would now block the test
        assert await batcher.embed(["other", "known"]) == [alone("other"), alone("known")]
        model.gate.set()
        assert await batcher.embed(["known", "new"]) == [alone("known"), alone("new")]
    finally:
        model.gate.set()
        await batcher.close()

    assert model.calls == [["known", "other"], ["new"]]
    assert batcher.stats().cached == 1


async def test_close_fails_queued_requests_and_refuses_new_ones(
    batcher: EmbeddingBatcher, model: GatedEmbedder
) -> None:
    first = await model.hold_first_call(batcher)
    queued = asyncio.create_task(batcher.embed(["queued"]))
    await settle()
    closing = asyncio.create_task(batcher.close())
    await settle()
    model.release()
    await asyncio.wait_for(closing, LIVENESS_S)

    assert await first == [alone("first")]  # a running batch finishes
    with pytest.raises(RuntimeError, match="closed"):
        await queued
    with pytest.raises(RuntimeError, match="closed"):
        await batcher.embed(["later"])


async def two_below_the_backlog(
    model: GatedEmbedder,
) -> tuple[EmbeddingBatcher, list[asyncio.Task[list[list[float]]]]]:
    """A batcher that may run two calls once three texts wait, its first call held in the
    model and two single texts queued; the tasks returned start with the held one."""
    batcher = EmbeddingBatcher(model, max_batch=8, concurrency=2, parallel_backlog=3)
    first = await model.hold_first_call(batcher)
    queued = [asyncio.create_task(batcher.embed([f"q{i}"])) for i in range(2)]
    await settle()
    return batcher, [first, *queued]


async def test_a_second_call_starts_beside_a_running_one_once_the_backlog_is_reached(
    model: GatedEmbedder,
) -> None:
    batcher, tasks = await two_below_the_backlog(model)
    assert model.calls == [["first"]]  # two texts wait: below the backlog

    tasks.append(asyncio.create_task(batcher.embed(["q2"])))
    await model.until_calls(2)  # a second call, beside the held one
    assert model.calls == [["first"], ["q0", "q1", "q2"]]
    model.release()
    results = await asyncio.wait_for(asyncio.gather(*tasks), LIVENESS_S)
    assert results == [[alone(t)] for t in ("first", "q0", "q1", "q2")]
    await batcher.close()


async def test_a_backlog_below_the_threshold_joins_the_next_batch_whole(
    model: GatedEmbedder,
) -> None:
    batcher, tasks = await two_below_the_backlog(model)
    model.release()
    await asyncio.wait_for(asyncio.gather(*tasks), LIVENESS_S)
    assert model.calls == [["first"], ["q0", "q1"]]
    await batcher.close()


async def test_without_a_backlog_threshold_each_free_slot_takes_what_waits(
    model: GatedEmbedder,
) -> None:
    batcher = EmbeddingBatcher(model, max_batch=8, concurrency=2)
    first = await model.hold_first_call(batcher)
    queued = asyncio.create_task(batcher.embed(["q0"]))
    await model.until_calls(2)
    assert model.calls == [["first"], ["q0"]]
    model.release()
    await asyncio.wait_for(asyncio.gather(first, queued), LIVENESS_S)
    await batcher.close()


async def test_a_request_made_beside_starts_at_once_in_a_call_of_its_own(
    model: GatedEmbedder,
) -> None:
    # A query's second text (ADR 0408): it does not wait for the running call, as a
    # request below the backlog would, nor take others into its call.
    batcher = EmbeddingBatcher(model, max_batch=8, concurrency=2, parallel_backlog=16)
    first = await model.hold_first_call(batcher)
    aside = asyncio.create_task(batcher.embed(["aside"], beside=True))
    await model.until_calls(2)
    queued = asyncio.create_task(batcher.embed(["queued"]))
    await settle()
    assert model.calls == [["first"], ["aside"]]
    model.release()
    results = await asyncio.wait_for(asyncio.gather(first, aside, queued), LIVENESS_S)
    assert list(results) == [[alone(t)] for t in ("first", "aside", "queued")]
    assert model.calls == [["first"], ["aside"], ["queued"]]
    await batcher.close()


async def test_a_request_made_beside_waits_when_every_thread_is_busy(
    batcher: EmbeddingBatcher, model: GatedEmbedder
) -> None:
    first = await model.hold_first_call(batcher)  # the only thread
    aside = asyncio.create_task(batcher.embed(["aside"], beside=True))
    queued = asyncio.create_task(batcher.embed(["queued"]))
    await settle()
    assert model.calls == [["first"]]
    model.release()
    await asyncio.wait_for(asyncio.gather(first, aside, queued), LIVENESS_S)
    assert model.calls == [["first"], ["aside"], ["queued"]]  # alone, then the rest


async def background(batcher: EmbeddingBatcher, texts: list[str]) -> list[list[float]]:
    with in_background():
        return await batcher.embed(texts)


async def test_background_work_has_a_lane_of_its_own_that_never_holds_a_request_up(
    model: GatedEmbedder,
) -> None:
    batcher = EmbeddingBatcher(model, max_batch=8, background_nice=0)
    copy = await model.hold(lambda: background(batcher, ["copy 1", "copy 2"]))
    query = asyncio.create_task(batcher.embed(["query"]))
    await model.until_calls(2)  # beside the held call, though one call at a time per lane
    assert model.calls == [["copy 1", "copy 2"], ["query"]]
    model.release()
    assert await asyncio.wait_for(query, LIVENESS_S) == [alone("query")]
    assert await asyncio.wait_for(copy, LIVENESS_S) == [alone("copy 1"), alone("copy 2")]
    stats = batcher.stats()  # both lanes
    assert (stats.requests, stats.batches, stats.texts) == (2, 2, 3)
    await batcher.close()


class NicenessOfEachCall(HashEmbedder):
    def __init__(self) -> None:
        self.niceness: dict[str, int] = {}

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        thread = threading.get_native_id()
        self.niceness[texts[0]] = os.getpriority(os.PRIO_PROCESS, thread)
        return super().embed(texts)


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own niceness is Linux's")
async def test_background_work_is_embedded_at_the_background_niceness() -> None:
    model = NicenessOfEachCall()
    batcher = EmbeddingBatcher(model, background_nice=19)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    await background(batcher, ["copy"])
    await batcher.embed(["query"])
    assert model.niceness == {"copy": 19, "query": own}
    await batcher.close()


def test_works_from_one_event_loop_after_another() -> None:
    batcher = EmbeddingBatcher(HashEmbedder(), max_wait_s=0.0)
    assert asyncio.run(batcher.embed(["x"])) == [alone("x")]
    assert asyncio.run(batcher.embed(["y"])) == [alone("y")]
    asyncio.run(batcher.close())


@pytest.mark.parametrize(
    "kwargs",
    [{"max_batch": 0}, {"max_wait_s": -1.0}, {"concurrency": 0}, {"parallel_backlog": 0}],
)
def test_bounds_are_validated(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        EmbeddingBatcher(HashEmbedder(), **kwargs)  # type: ignore[arg-type]
