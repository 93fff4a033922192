"""Micro-batching in front of the embedder: concurrent requests share one model call.

Each request's texts wait in a queue; a dispatcher takes up to ``max_batch`` texts of the
oldest requests and embeds them in one ``Embedder.embed`` call on its own worker thread, so
the event loop never runs the model. Requests that come while a batch runs form the next
one. Under load (the previous batch held several requests) the dispatcher also waits up
to ``max_wait_s`` after the oldest request arrived for others to join, unless the batch is
full; a lone caller on an idle server never waits. The server's default is no wait at all:
under load a batch fills while the previous one runs, so a wait only delays it (at 50
callers a 2 ms wait cost ~10 % of long-term Add RPS).

With ``concurrency`` above one, a further call starts beside running ones only once
``parallel_backlog`` texts wait: a local model then spreads a real backlog over more cores
(long-term Adds at 50 callers), while a trickle of queries joins the next batch whole
instead of taking a core from the event loop for a batch of one (ADR 0301).

A request that is cancelled (its client went away, or its gRPC deadline passed: grpc.aio
cancels the handler) leaves the queue and its texts are not embedded; one whose batch is
already running just stops waiting for it.

Background work (``tasks.in_background``: the conversation copy) has a lane of its own:
its batches never hold a request's texts up, and its thread runs at a lower CPU priority
(``background_nice``), so on a busy machine requests take the cores first. On 2 vCPUs the
copy's model runs otherwise took a core from the event loop for tens of milliseconds at a
time, and a short-term Add's p99 rose from ~0.6 to ~4 ms while copies ran.

A request made ``beside`` (a query's second text, ADR 0408) is embedded in a call of its
own, which starts beside a running call as soon as a thread is free instead of waiting
for it: with two threads, a query and its second text take the time of one.

Texts found in the embedder's in-memory cache (``CacheLookup``) are answered on the event
loop without queueing, so cached queries pay neither the wait nor a thread hop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from memoryd.core.tasks import is_background
from memoryd.stores.embeddings.port import CacheLookup, Embedder, EmbedderUnavailable

__all__ = ["BatchStats", "EmbeddingBatcher"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BatchStats:
    """Counts since creation: ``requests`` (embed calls with texts), ``cached`` (requests
    answered from the cache alone), ``batches`` (model calls) and ``texts`` (texts in
    them), and the ``largest`` batch."""

    requests: int
    cached: int
    batches: int
    texts: int
    largest: int

    def __add__(self, other: BatchStats) -> BatchStats:
        """Two lanes' counts together."""
        return BatchStats(
            self.requests + other.requests,
            self.cached + other.cached,
            self.batches + other.batches,
            self.texts + other.texts,
            max(self.largest, other.largest),
        )


@dataclass(eq=False)
class _Request:
    texts: list[str]
    future: asyncio.Future[list[list[float]]]
    arrived: float  # loop time
    beside: bool = False  # a call of its own, started beside a running one

    @property
    def waiting(self) -> bool:
        return not self.future.done()


@dataclass
class _LoopState:
    """What binds the batcher to one event loop (recreated if used from another)."""

    loop: asyncio.AbstractEventLoop
    pending: deque[_Request] = field(default_factory=deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    running: set[asyncio.Task[None]] = field(default_factory=set)
    busy: int = 0  # model calls in flight (a finished task may linger in `running`)
    dispatcher: asyncio.Task[None] | None = None
    last_batch_requests: int = 0


def _lower_priority(nice: int) -> None:
    """Run the calling thread at niceness `nice` (never higher priority than it has).
    Linux schedules each thread on its own, so this thread alone yields; elsewhere the
    call fails and the thread keeps the process's priority."""
    if nice <= 0:
        return
    try:
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, max(nice, os.getpriority(os.PRIO_PROCESS, thread)))
    except OSError as exc:
        _log.debug("embedding thread priority unchanged: %r", exc)


def _rejects_input(exc: Exception) -> bool:
    """The provider refused the request's content (HTTP 4xx other than timeout and rate
    limit): another request of the batch must not fail for it."""
    code = exc.status_code if isinstance(exc, EmbedderUnavailable) else None
    return code is not None and 400 <= code < 500 and code not in (408, 429)


class EmbeddingBatcher:
    """Awaitable embedding with micro-batching; safe to share by every coroutine of a loop."""

    def __init__(
        self,
        embedder: Embedder,
        *,
        max_batch: int = 64,
        max_wait_s: float = 0.0,
        concurrency: int = 1,
        parallel_backlog: int = 1,
        background_nice: int | None = None,
        thread_nice: int = 0,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if max_wait_s < 0:
            raise ValueError("max_wait_s must be >= 0")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if parallel_backlog < 1:
            raise ValueError("parallel_backlog must be >= 1")
        self._embedder = embedder
        self._max_batch = max_batch
        self._max_wait_s = max_wait_s
        self._concurrency = concurrency
        self._parallel_backlog = parallel_backlog
        self._executor = ThreadPoolExecutor(
            concurrency,
            thread_name_prefix="memoryd-embed",
            initializer=_lower_priority,
            initargs=(thread_nice,),
        )
        # One call at a time: background work is a steady stream, never a burst to spread.
        self._background = (
            None
            if background_nice is None
            else EmbeddingBatcher(embedder, max_batch=max_batch, thread_nice=background_nice)
        )
        self._state: _LoopState | None = None
        self._closed = False
        self._requests = self._cached = self._batches = self._texts = self._largest = 0

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    def stats(self) -> BatchStats:
        """Both lanes together."""
        own = BatchStats(self._requests, self._cached, self._batches, self._texts, self._largest)
        return own if self._background is None else own + self._background.stats()

    def queued(self) -> int:
        """Texts waiting for a batch (not those of running batches), in both lanes."""
        state = self._state
        own = 0 if state is None else sum(len(r.texts) for r in state.pending if r.waiting)
        return own + (self._background.queued() if self._background is not None else 0)

    async def embed(self, texts: Sequence[str], *, beside: bool = False) -> list[list[float]]:
        """One vector per text, in order. Raises what the embedder raises. `beside`: in a
        call of its own, started while another runs if a thread is free."""
        if not texts:
            return []
        if self._closed:
            raise RuntimeError("the embedding batcher is closed")
        if self._background is not None and is_background():
            return await self._background.embed(texts)
        self._requests += 1
        found: list[list[float] | None] = (
            self._embedder.lookup(texts)
            if isinstance(self._embedder, CacheLookup)
            else [None] * len(texts)
        )
        missing = list(dict.fromkeys(t for t, v in zip(texts, found, strict=True) if v is None))
        if not missing:
            self._cached += 1
            return [v for v in found if v is not None]
        state = self._running_state()
        request = _Request(missing, state.loop.create_future(), state.loop.time(), beside)
        state.pending.append(request)
        state.wakeup.set()
        # Cancelling this await cancels the future: the dispatcher then skips the request.
        vectors = dict(zip(missing, await request.future, strict=True))
        return [v if v is not None else vectors[t] for t, v in zip(texts, found, strict=True)]

    async def close(self) -> None:
        """Fail what still waits, stop the dispatcher; running batches finish first."""
        self._closed = True
        state, self._state = self._state, None
        if state is not None:
            if state.dispatcher is not None:
                state.dispatcher.cancel()
            for request in state.pending:
                if request.waiting:
                    request.future.set_exception(RuntimeError("the embedding batcher closed"))
            state.pending.clear()
            if state.running:
                await asyncio.gather(*state.running, return_exceptions=True)
        self._executor.shutdown(wait=False)
        if self._background is not None:
            await self._background.close()

    # --- dispatching ---

    def _running_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._state
        if state is None or state.loop is not loop or state.loop.is_closed():
            state = _LoopState(loop)
            self._state = state
        if state.dispatcher is None or state.dispatcher.done():
            state.dispatcher = loop.create_task(self._dispatch(state), name="embed-dispatcher")
        return state

    async def _dispatch(self, state: _LoopState) -> None:
        while True:
            await state.wakeup.wait()
            state.wakeup.clear()
            self._drop_gone(state)
            if not state.pending:
                continue
            if state.busy and (
                state.busy >= self._concurrency
                or (
                    self._queued_texts(state) < self._parallel_backlog
                    and not state.pending[0].beside
                )
            ):
                continue  # a running call's end wakes this loop for the queue, whole
            await self._fill(state)
            batch = self._take(state)
            if not batch:
                continue
            state.last_batch_requests = len(batch)
            state.busy += 1
            task = state.loop.create_task(self._run_batch(state, batch))
            state.running.add(task)
            task.add_done_callback(state.running.discard)
            if state.pending:
                state.wakeup.set()  # more is queued than one batch takes

    async def _fill(self, state: _LoopState) -> None:
        """Under load, wait for more requests until the batch is full or the oldest
        waited enough."""
        if state.last_batch_requests <= 1 or state.pending[0].beside:
            return
        while True:
            self._drop_gone(state)
            if not state.pending or self._queued_texts(state) >= self._max_batch:
                return
            remaining = state.pending[0].arrived + self._max_wait_s - state.loop.time()
            if remaining <= 0:
                return
            state.wakeup.clear()
            try:
                await asyncio.wait_for(state.wakeup.wait(), remaining)
            except TimeoutError:
                return

    def _take(self, state: _LoopState) -> list[_Request]:
        batch: list[_Request] = []
        size = 0
        while state.pending:
            request = state.pending[0]
            if not request.waiting:
                state.pending.popleft()
                continue
            # A request is never split; one larger than max_batch goes alone, and so does
            # one made beside.
            if batch and (
                size + len(request.texts) > self._max_batch or request.beside or batch[0].beside
            ):
                break
            batch.append(state.pending.popleft())
            size += len(request.texts)
        return batch

    @staticmethod
    def _drop_gone(state: _LoopState) -> None:
        if any(not r.waiting for r in state.pending):
            state.pending = deque(r for r in state.pending if r.waiting)

    @staticmethod
    def _queued_texts(state: _LoopState) -> int:
        return sum(len(r.texts) for r in state.pending)

    async def _run_batch(self, state: _LoopState, batch: list[_Request]) -> None:
        try:
            await self._embed_into(state, batch)
        finally:
            state.busy -= 1
            if state.pending:
                state.wakeup.set()

    async def _embed_into(self, state: _LoopState, batch: list[_Request]) -> None:
        # A request cancelled while queued for this batch costs nothing.
        batch = [r for r in batch if r.waiting]
        if not batch:
            return
        texts = list(dict.fromkeys(t for r in batch for t in r.texts))
        try:
            vectors = await state.loop.run_in_executor(self._executor, self._embedder.embed, texts)
            if len(vectors) != len(texts):
                raise RuntimeError(
                    f"{self._embedder.name}: {len(vectors)} vectors for {len(texts)} texts"
                )
        except Exception as exc:
            if len(batch) > 1 and _rejects_input(exc):
                for request in batch:  # find whose input it was; the others get vectors
                    await self._embed_into(state, [request])
                return
            for request in batch:
                if request.waiting:
                    request.future.set_exception(exc)
            return
        self._batches += 1
        self._texts += len(texts)
        self._largest = max(self._largest, len(texts))
        by_text = dict(zip(texts, vectors, strict=True))
        for request in batch:
            if request.waiting:
                # Copies: two requests sharing a text must not share a mutable list.
                request.future.set_result([list(by_text[t]) for t in request.texts])
