"""The hot store port: working entries and session messages, kept in memory or Redis.

Stores know nothing of policy: the core passes the limits in, and the store applies them
atomically (a concurrent writer can never push a scope past them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class TaskKey:
    """Addresses one working-memory scope."""

    tenant: str
    user_id: str
    agent_id: str
    task_id: str


@dataclass(frozen=True)
class SessionKey:
    """Addresses one conversation window."""

    tenant: str
    user_id: str
    session_id: str


@dataclass
class WorkingEntry:
    key: str
    id: str
    content: str
    size: int
    kind: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    importance: float = 0.5
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass
class SessionMessage:
    id: str
    content: str
    role: str
    created_at: float
    size: int
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PutOutcome:
    replaced: bool
    evicted_keys: list[str]
    count: int


@dataclass(frozen=True)
class AppendOutcome:
    count: int
    dropped: int


class EntryLimitReached(Exception):
    """A new key would pass the scope's entry limit; nothing was written."""


class HotStoreDown(Exception):
    """The store cannot be reached."""


class HotStore(Protocol):
    async def put_entry(
        self, task: TaskKey, entry: WorkingEntry, max_entries: int, max_bytes: int
    ) -> PutOutcome:
        """Insert or replace `entry.key`; evict least recently used keys past max_bytes.

        A replaced entry keeps its created_at. Raises EntryLimitReached for a new key when
        the scope already holds max_entries.
        """
        ...

    async def get_entries(self, task: TaskKey, keys: list[str]) -> list[WorkingEntry]:
        """Entries found among `keys`, in the order asked; marks them recently used."""
        ...

    async def list_entries(self, task: TaskKey) -> list[WorkingEntry]:
        """Every entry of the scope, most recently used first."""
        ...

    async def delete_entries(self, task: TaskKey, keys: list[str]) -> int: ...

    async def clear_task(self, task: TaskKey) -> int:
        """Drop the whole scope; returns how many entries went."""
        ...

    async def append_message(
        self,
        session: SessionKey,
        message: SessionMessage,
        max_messages: int,
        max_bytes: int,
        ttl_seconds: int,
    ) -> AppendOutcome:
        """Append, keep only the newest max_messages within max_bytes, refresh the TTL."""
        ...

    async def list_messages(self, session: SessionKey) -> list[SessionMessage]:
        """The session's messages, oldest first (empty once the session expired)."""
        ...

    async def delete_messages(self, session: SessionKey, ids: list[str]) -> int: ...

    async def clear_session(self, session: SessionKey) -> int: ...

    async def list_tasks(self, tenant: str, user_id: str) -> list[TaskKey]:
        """Every task scope of the user that holds at least one entry (any order)."""
        ...

    async def list_sessions(self, tenant: str, user_id: str) -> list[SessionKey]:
        """Every live session of the user that holds at least one message (any order)."""
        ...

    async def ping(self) -> bool:
        """True when the store answers."""
        ...

    async def close(self) -> None: ...
