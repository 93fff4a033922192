"""The durable copy of conversation messages: short-term Add queues it, a background
worker embeds queued messages in batches and stores them in long-term memory."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, wait_fixed

from memoryd.core.errors import MemorydError, StoreUnavailable
from memoryd.core.models import Kind, MemoryRecord, Role, Scope, Tier
from memoryd.core.tasks import stop_task
from memoryd.core.tiers.long_term import LongTermTier
from memoryd.settings import WriteBehindSettings
from memoryd.stores.queue.port import QueueDown, QueueEntry, WriteBehindQueue

log = logging.getLogger(__name__)


def _body(scope: Scope, message: MemoryRecord) -> dict[str, Any]:
    return {
        "scope": asdict(scope),
        "id": message.id,
        "content": message.content,
        "role": message.role.value,
        "created_at": message.created_at,
        "metadata": message.metadata,
    }


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
        self, queue: WriteBehindQueue, long_term: LongTermTier, settings: WriteBehindSettings
    ) -> None:
        self._queue = queue
        self._long_term = long_term
        self._settings = settings
        self._task: asyncio.Task[None] | None = None

    async def enqueue(self, scope: Scope, message: MemoryRecord) -> None:
        try:
            await self._queue.put(_body(scope, message))
        except QueueDown as exc:
            raise StoreUnavailable("write-behind queue", str(exc)) from exc

    async def drain_once(self, wait_s: float = 0.0) -> int:
        """Copy one batch; returns how many messages were stored."""
        entries: list[QueueEntry] = await self._queue.take(self._settings.batch_size, wait_s)
        if not entries:
            return 0
        await self._long_term.add_messages([_parse(e.body) for e in entries])
        await self._queue.ack([e.id for e in entries])
        return len(entries)

    async def drain(self, timeout_s: float = 30.0) -> None:
        """Wait until everything queued now is copied (shutdown, `memoryd` tools, tests).

        The background worker may hold some entries in flight; those count as pending
        until it acks them.
        """
        async with asyncio.timeout(timeout_s):
            while await self._queue.pending():
                if not await self.drain_once():
                    await asyncio.sleep(0.02)

    async def _run(self) -> None:
        # Never gives up: after a failure the worker goes on in `retry_seconds`; the failed
        # batch stays queued (replayed after a restart, never dropped). Cancellation is no
        # Exception, so tenacity lets it through.
        retrying = AsyncRetrying(
            wait=wait_fixed(self._settings.retry_seconds), before_sleep=_log_failure
        )
        async for attempt in retrying:
            with attempt:
                while True:
                    await self.drain_once(wait_s=1.0)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="conversation-copier")

    async def stop(self) -> None:
        """Stop copying; entries taken but not acked are replayed after a restart."""
        task, self._task = self._task, None
        await stop_task(task)


def _log_failure(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome is not None else None
    if isinstance(exc, MemorydError | QueueDown):
        log.warning("conversation copy paused: %s", exc)  # a store is down
    else:
        log.error("conversation copy failed; retrying", exc_info=exc)
