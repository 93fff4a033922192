"""The durable copy of conversation messages: short-term Add queues it, a background
worker embeds queued messages in batches and stores them in long-term memory."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from memoryd.core.errors import MemorydError, StoreUnavailable
from memoryd.core.models import Kind, MemoryRecord, Role, Scope, Tier
from memoryd.core.ratelimit_log import EveryFewSeconds
from memoryd.core.tasks import stop_task
from memoryd.core.tiers.long_term import LongTermTier
from memoryd.settings import WriteBehindSettings
from memoryd.stores.queue.port import QueueDown, QueueEntry, WriteBehindQueue

log = logging.getLogger(__name__)
# A store that stays down would otherwise add a line per retry (every second).
_paused_log = EveryFewSeconds(log, interval_s=30.0)


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
        self,
        queue: WriteBehindQueue,
        long_term: LongTermTier,
        settings: WriteBehindSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._queue = queue
        self._long_term = long_term
        self._settings = settings
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
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
        except BaseException:
            await self._queue.release(ids)  # copied again (idempotently) on the next try
            raise
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
        while True:
            try:
                await self.drain_once(wait_s=1.0)
            except asyncio.CancelledError:
                raise
            except (MemorydError, QueueDown) as exc:
                # Store down: entries stay pending and are retried, never dropped.
                self._failed()
                _paused_log.warning("conversation copy paused: %s", exc)
                await asyncio.sleep(self._settings.retry_seconds)
            except Exception:
                self._failed()
                log.exception("conversation copy failed; retrying")
                await asyncio.sleep(self._settings.retry_seconds)
            else:
                if self._failing_since is not None:
                    log.info("conversation copy resumed")
                self._failing_since = None

    def _failed(self) -> None:
        if self._failing_since is None:
            self._failing_since = self._clock()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="conversation-copier")

    async def stop(self) -> None:
        """Stop copying; entries taken but not acked are replayed after a restart."""
        task, self._task = self._task, None
        await stop_task(task)
