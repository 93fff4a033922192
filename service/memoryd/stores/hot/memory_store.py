"""In-process hot store: the embedded default. Data lives as long as the process."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from copy import copy
from dataclasses import dataclass, field, replace

from memoryd.stores.hot.port import (
    AppendOutcome,
    EntryLimitReached,
    PutOutcome,
    SessionKey,
    SessionMessage,
    TaskKey,
    WorkingEntry,
)

# Sweep every session for expiry once per this many appends, so sessions that are never
# read again do not pile up.
_SWEEP_EVERY = 1000


@dataclass
class _Session:
    messages: deque[SessionMessage] = field(default_factory=deque)
    total_bytes: int = 0
    expires_at: float = 0.0


class _Entries(OrderedDict[str, WorkingEntry]):
    """A task's entries, with their byte total kept on every change (so a put costs a
    dict write, not a sum over the task)."""

    total_bytes = 0


class InProcessHotStore:
    """All operations run on the event loop without awaiting, so each one is atomic."""

    def __init__(self) -> None:
        # OrderedDict order is recency: last = most recently used.
        self._tasks: dict[TaskKey, _Entries] = {}
        self._sessions: dict[SessionKey, _Session] = {}
        self._appends = 0

    async def put_entry(
        self, task: TaskKey, entry: WorkingEntry, max_entries: int, max_bytes: int
    ) -> PutOutcome:
        entries = self._tasks.get(task)
        if entries is None:
            entries = self._tasks[task] = _Entries()
        old = entries.get(entry.key)
        if old is None and len(entries) >= max_entries:
            raise EntryLimitReached(entry.key)
        total = entries.total_bytes - (old.size if old else 0)  # the others'
        evicted: list[str] = []
        if total + entry.size > max_bytes:
            for key in list(entries):
                if total + entry.size <= max_bytes:
                    break
                if key == entry.key:
                    continue
                total -= entries.pop(key).size
                evicted.append(key)
        stored = copy(entry)  # a shallow copy, as `replace` makes, for a fraction of its cost
        if old is not None:
            stored.created_at = old.created_at
        entries[entry.key] = stored
        entries.move_to_end(entry.key)
        entries.total_bytes = total + entry.size
        return PutOutcome(replaced=old is not None, evicted_keys=evicted, count=len(entries))

    async def get_entries(self, task: TaskKey, keys: list[str]) -> list[WorkingEntry]:
        entries = self._tasks.get(task) or _Entries()
        found = []
        for key in keys:
            if key in entries:
                entries.move_to_end(key)
                found.append(replace(entries[key]))
        return found

    async def list_entries(self, task: TaskKey) -> list[WorkingEntry]:
        return [replace(e) for e in reversed(self._tasks.get(task, _Entries()).values())]

    async def delete_entries(self, task: TaskKey, keys: list[str]) -> int:
        entries = self._tasks.get(task)
        if not entries:
            return 0
        deleted = 0
        for key in keys:
            gone = entries.pop(key, None)
            if gone is not None:
                entries.total_bytes -= gone.size
                deleted += 1
        if not entries:
            del self._tasks[task]
        return deleted

    async def clear_task(self, task: TaskKey) -> int:
        return len(self._tasks.pop(task, {}))

    async def append_message(
        self,
        session: SessionKey,
        message: SessionMessage,
        max_messages: int,
        max_bytes: int,
        ttl_seconds: int,
    ) -> AppendOutcome:
        now = time.monotonic()
        self._appends += 1
        if self._appends % _SWEEP_EVERY == 0:
            self._sweep(now)
        state = self._live_session(session, now) or self._sessions.setdefault(session, _Session())
        state.messages.append(replace(message))
        state.total_bytes += message.size
        dropped = 0
        while len(state.messages) > 1 and (
            len(state.messages) > max_messages or state.total_bytes > max_bytes
        ):
            state.total_bytes -= state.messages.popleft().size
            dropped += 1
        state.expires_at = now + ttl_seconds
        return AppendOutcome(count=len(state.messages), dropped=dropped)

    async def list_messages(self, session: SessionKey) -> list[SessionMessage]:
        state = self._live_session(session, time.monotonic())
        return [replace(m) for m in state.messages] if state else []

    async def delete_messages(self, session: SessionKey, ids: list[str]) -> int:
        state = self._live_session(session, time.monotonic())
        if state is None:
            return 0
        wanted = set(ids)
        kept = deque(m for m in state.messages if m.id not in wanted)
        deleted = len(state.messages) - len(kept)
        state.messages = kept
        state.total_bytes = sum(m.size for m in kept)
        return deleted

    async def clear_session(self, session: SessionKey) -> int:
        state = self._sessions.pop(session, None)
        return len(state.messages) if state else 0

    async def list_tasks(self, tenant: str, user_id: str) -> list[TaskKey]:
        return [
            task
            for task, entries in self._tasks.items()
            if entries and (task.tenant, task.user_id) == (tenant, user_id)
        ]

    async def list_sessions(self, tenant: str, user_id: str) -> list[SessionKey]:
        now = time.monotonic()
        return [
            key
            for key in list(self._sessions)
            if (key.tenant, key.user_id) == (tenant, user_id)
            and (state := self._live_session(key, now)) is not None
            and state.messages
        ]

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        self._tasks.clear()
        self._sessions.clear()

    def _live_session(self, session: SessionKey, now: float) -> _Session | None:
        state = self._sessions.get(session)
        if state is not None and state.expires_at <= now:
            del self._sessions[session]
            return None
        return state

    def _sweep(self, now: float) -> None:
        for key in [k for k, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[key]
