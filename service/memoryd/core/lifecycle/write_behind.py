"""The durable copy of conversation messages: short-term Add queues it, a background
worker embeds queued messages in batches and stores them in long-term memory.

Each queued message carries the id of the request that queued it, so the log lines of
its copy, written later by the worker, can be found with that request's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, wait_fixed

from memoryd.core.errors import MemorydError, StoreUnavailable
from memoryd.core.models import Kind, MemoryRecord, Role, Scope, Tier
from memoryd.core.observe import NullObserver, Observer, request_id
from memoryd.core.ratelimit_log import EveryFewSeconds
from memoryd.core.tasks import in_background, stop_task
from memoryd.core.tiers.long_term import LongTermTier
from memoryd.settings import WriteBehindSettings
from memoryd.stores.queue.port import QueueDown, QueueEntry, WriteBehindQueue

log = logging.getLogger(__name__)
# A store that stays down would otherwise add a line per retry (every second).
_paused_log = EveryFewSeconds(log, interval_s=30.0)

QUEUE_NAME = "write_behind"
# The backlog is reported at most this often (each report asks the queue twice).
_BACKLOG_EVERY_S = 1.0
# A batch's lines are written this many at a time, the event loop free in between: a JSON
# line costs ~40 µs (64 on a busy 2 vCPU box), so the 64 lines of a batch in one step held
# every request for 2.5-4 ms; 16 hold them for under 1 ms.
_LINES_PER_STEP = 16


def _body(scope: Scope, message: MemoryRecord) -> dict[str, Any]:
    return {
        "scope": asdict(scope),
        "id": message.id,
        "content": message.content,
        "role": message.role.value,
        "created_at": message.created_at,
        "metadata": message.metadata,
        "request_id": request_id(),
    }


def _request_ids(entries: Sequence[QueueEntry]) -> list[str]:
    return [str(e.body.get("request_id") or "") for e in entries]


def _parse(body: dict[str, Any]) -> tuple[Scope, MemoryRecord]:
    scope = Scope(**body["scope"])
    record = MemoryRecord(
        id=body["id"],
        tier=Tier.SHORT_TERM,
        content=body["content"],
        kind=Kind.MESSAGE,
        role=Role(body["role"]),
        created_at=float(body["created_at"]),
        metadata=dict(body.get("metadata") or {}),
        session_id=scope.session_id,
    )
    return scope, record


class ConversationCopier:
    def __init__(
        self,
        queue: WriteBehindQueue,
        long_term: LongTermTier,
        settings: WriteBehindSettings,
        observer: Observer | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._queue = queue
        self._long_term = long_term
        self._settings = settings
        self._observer = observer or NullObserver()
        self._task: asyncio.Task[None] | None = None
        self._backlog_reported = -_BACKLOG_EVERY_S
        self._clock = clock
        # When the background copy started failing without a success since; None: it works.
        self._failing_since: float | None = None

    async def healthy(self) -> bool:
        """A health probe: False once copying has failed for `stuck_after_seconds` in a
        row (messages pile up uncopied), True again after the next success."""
        since = self._failing_since
        return since is None or self._clock() - since < self._settings.stuck_after_seconds

    async def enqueue(self, scope: Scope, message: MemoryRecord) -> None:
        try:
            await self._queue.put(_body(scope, message))
        except QueueDown as exc:
            raise StoreUnavailable("write-behind queue", str(exc)) from exc

    async def drain_once(self, wait_s: float = 0.0) -> int:
        """Copy one batch; returns how many queue entries were handled."""
        entries: list[QueueEntry] = await self._queue.take(self._settings.batch_size, wait_s)
        if not entries:
            return 0
        messages = []
        for entry in entries:
            try:
                messages.append(_parse(entry.body))
            except (KeyError, TypeError, ValueError) as exc:
                # No retry can copy an entry that does not parse: drop it (acked below)
                # rather than let it block every message behind it.
                log.error("dropping an unreadable write-behind entry %s: %r", entry.id, exc)
        ids = [e.id for e in entries]
        try:
            await self._long_term.add_messages(messages)
            await self._queue.ack(ids)
        except BaseException as exc:
            _log_copy_failure(exc, entries)
            await self._queue.release(ids)  # copied again (idempotently) on the next try
            raise
        for n, (entry, rid) in enumerate(zip(entries, _request_ids(entries), strict=True)):
            if n and not n % _LINES_PER_STEP:
                await asyncio.sleep(0)
            log.info(
                "conversation copy stored",
                extra={
                    "request_id": rid,
                    "tier": Tier.LONG_TERM.value,
                    "memory_id": entry.body["id"],
                },
            )
        return len(entries)

    async def report_backlog(self) -> None:
        """Tell the observer how many messages wait for their copy, and for how long."""
        pending = await self._queue.pending()
        oldest = await self._queue.oldest_put_at()
        # Queues stamp entries with the wall clock.
        age = 0.0 if oldest is None else max(0.0, time.time() - oldest)
        self._observer.backlog(QUEUE_NAME, pending, age)

    async def _maybe_report_backlog(self) -> None:
        now = time.monotonic()
        if now - self._backlog_reported < _BACKLOG_EVERY_S:
            return
        self._backlog_reported = now
        try:
            await self.report_backlog()
        except Exception:  # a metric must never stop the copy
            log.debug("write-behind backlog unknown", exc_info=True)

    async def drain(self, timeout_s: float = 30.0) -> None:
        """Wait until the queue is empty (shutdown, `memoryd` tools, tests): entries queued
        meanwhile are waited for too, so a steady flow of Adds can keep it waiting until
        `timeout_s`. An erasure waits with `copy_queued` instead.

        The background worker may hold some entries in flight; those count as pending
        until it acks them. A queue that is down (Redis restarting; a pooled connection
        it closed) is waited for within `timeout_s`; then its last error is raised.
        """

        async def empty() -> bool:
            return not await self._queue.pending()

        await self._copy_until(empty, timeout_s)

    async def copy_queued(self, timeout_s: float = 30.0) -> None:
        """Wait until every entry queued before this call is copied (an erasure: none of
        them may land after it), whichever replica holds it; entries queued meanwhile are
        not waited for. The mark of "before" is the queue's newest entry id, exact across
        replicas (no clocks compared). Down queue and `timeout_s`: as `drain`."""
        mark: str | None = None
        marked = False

        async def copied() -> bool:
            nonlocal mark, marked
            if not marked:  # taken again until the queue answers (it may be down)
                mark, marked = await self._queue.newest_id(), True
            return mark is None or not await self._queue.pending_through(mark)

        await self._copy_until(copied, timeout_s)

    async def _copy_until(self, done: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
        """Copy batches (beside the background worker, and other replicas) until `done`."""
        down: QueueDown | None = None
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    try:
                        if await done():
                            return
                        copied = await self.drain_once()
                        down = None
                    except QueueDown as exc:
                        down, copied = exc, 0
                    if not copied:
                        await asyncio.sleep(0.02)
        except TimeoutError:
            if down is not None:
                raise down from None
            raise

    async def _run(self) -> None:
        # Never gives up: after a failure the worker goes on in `retry_seconds`; the failed
        # batch was released, so it is copied again first. Cancellation is no Exception, so
        # tenacity lets it through.
        retrying = AsyncRetrying(
            wait=wait_fixed(self._settings.retry_seconds), before_sleep=self._on_failure
        )
        # The copy yields to requests (the embedder's background lane); an erasure's or a
        # shutdown's copy of the queue is not in this task, so it is a request's.
        with in_background():
            async for attempt in retrying:
                with attempt:
                    while True:
                        await self._maybe_report_backlog()
                        await self.drain_once(wait_s=1.0)
                        if self._failing_since is not None:
                            log.info("conversation copy resumed")
                        self._failing_since = None

    def _on_failure(self, state: RetryCallState) -> None:
        self._failed()
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, QueueDown):  # other failures were logged by drain_once
            _paused_log.warning("conversation copy paused: %s", exc)

    def _failed(self) -> None:
        if self._failing_since is None:
            self._failing_since = self._clock()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="conversation-copier")

    async def stop(self) -> None:
        """Stop copying; entries taken but not acked are replayed after a restart."""
        task, self._task = self._task, None
        await stop_task(task)

    async def flush(self, timeout_s: float) -> int:
        """At shutdown, once stopped: copy what this replica can take now, for at most
        `timeout_s`; returns how many were copied. Unlike `drain` it does not wait for
        entries other replicas hold: what is left stays queued, for another replica or the
        next start, never dropped."""
        copied = 0
        try:
            async with asyncio.timeout(timeout_s):
                while batch := await self.drain_once():
                    copied += batch
        except (TimeoutError, MemorydError, QueueDown) as exc:
            log.warning("write-behind not flushed at shutdown, the rest stays queued: %r", exc)
        return copied


def _log_copy_failure(exc: BaseException, entries: Sequence[QueueEntry]) -> None:
    """Says why a batch was not copied, with the request ids of its messages."""
    if isinstance(exc, QueueDown) or not isinstance(exc, Exception):
        return  # the queue itself is down (the worker loop says so), or cancellation
    ids = _request_ids(entries)
    if isinstance(exc, MemorydError):
        # Store down: the entries are released and copied again, never dropped. At most
        # one line every few seconds while it lasts.
        _paused_log.warning("conversation copy paused: %s (request ids %s)", exc, ids)
    else:
        log.exception(
            "conversation copy failed; retrying", exc_info=exc, extra={"request_ids": ids}
        )
