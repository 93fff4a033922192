"""The cold archive as the core sees it: whole memory records, off the event loop.

Archived records keep every field of the memory (content decompressed); they come back
marked `archived`. An id is returned once even if a crash between archiving and removing
it from its tier made a later run archive it again.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, ParamSpec, TypeVar

from memoryd.core.errors import StoreUnavailable
from memoryd.core.models import Kind, MemoryRecord, Role, Scope, Source, Tier
from memoryd.core.observe import NullObserver, Observer
from memoryd.core.tiers.bodies import episode_from_dict, episode_to_dict
from memoryd.stores.archive.port import ArchiveStore, ArchiveStoreError

# Archived records read per worker-thread hop.
_READ_BATCH = 256

P = ParamSpec("P")
T = TypeVar("T")


def to_entry(record: MemoryRecord, scope: Scope, archived_at: float) -> dict[str, Any]:
    return {
        "id": record.id,
        "tenant": scope.tenant,
        "user_id": scope.user_id,
        "tier": record.tier.value,
        "kind": record.kind.value,
        "content": record.content,
        "key": record.key,
        "metadata": dict(record.metadata),
        "importance": record.importance,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "expires_at": record.expires_at,
        "source": record.source.value,
        "role": record.role.value,
        "agent_id": record.agent_id,
        "session_id": record.session_id,
        "task_id": record.task_id,
        "deleted": record.deleted,
        "archived_at": archived_at,
        "episode": episode_to_dict(record.episode) if record.episode is not None else None,
        "document_json": record.document_json,
        "occurred_at": record.occurred_at,
        "position": record.position,
    }


def from_entry(entry: dict[str, Any]) -> MemoryRecord:
    expires = entry.get("expires_at")
    return MemoryRecord(
        id=str(entry["id"]),
        tier=Tier(entry["tier"]),
        content=str(entry.get("content", "")),
        kind=Kind(entry.get("kind", Kind.UNSPECIFIED.value)),
        key=str(entry.get("key", "")),
        metadata=dict(entry.get("metadata") or {}),
        importance=float(entry.get("importance", 0.5)),
        created_at=float(entry.get("created_at", 0.0)),
        updated_at=float(entry.get("updated_at", 0.0)),
        expires_at=float(expires) if expires is not None else None,
        source=Source(entry.get("source", Source.UNSPECIFIED.value)),
        role=Role(entry.get("role", Role.UNSPECIFIED.value)),
        agent_id=str(entry.get("agent_id", "")),
        session_id=str(entry.get("session_id", "")),
        task_id=str(entry.get("task_id", "")),
        archived=True,
        deleted=bool(entry.get("deleted", False)),
        episode=episode_from_dict(entry.get("episode")),
        document_json=str(entry.get("document_json") or ""),
        occurred_at=float(entry.get("occurred_at") or 0.0),
        position=int(entry.get("position") or 0),
    )


class ColdArchive:
    def __init__(
        self, store: ArchiveStore, clock: Callable[[], float], observer: Observer | None = None
    ) -> None:
        self._store = store
        self._clock = clock
        self._observer = observer or NullObserver()

    async def _call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except ArchiveStoreError as exc:
            raise StoreUnavailable("archive", str(exc)) from exc

    async def put(self, scope: Scope, tier: Tier, records: Sequence[MemoryRecord]) -> int:
        """Durably archive `records` (on disk when this returns)."""
        if not records:
            return 0
        now = self._clock()
        entries = [to_entry(r, scope, now) for r in records]
        written = await self._call(
            self._store.append, scope.tenant, scope.user_id, tier.value, entries
        )
        self._observer.archived(tier, written)
        return written

    async def records(self, scope: Scope, tier: Tier) -> AsyncIterator[MemoryRecord]:
        """The user's archived records of `tier`, each id once, read in batches."""
        entries: Iterator[dict[str, Any]] = self._store.iter_records(
            scope.tenant, scope.user_id, tier.value
        )
        seen: set[str] = set()
        while True:
            batch = await self._call(lambda: list(itertools.islice(entries, _READ_BATCH)))
            if not batch:
                return
            for entry in batch:
                record = from_entry(entry)
                if record.id not in seen:
                    seen.add(record.id)
                    yield record

    async def count(self, scope: Scope, tier: Tier) -> int:
        """How many distinct memories the user has archived in `tier`."""
        n = 0
        async for _ in self.records(scope, tier):
            n += 1
        return n

    async def erase(self, scope: Scope, tier: Tier) -> int:
        """Delete the user's archived records of `tier`; returns how many memories went."""
        n = await self.count(scope, tier)
        await self._call(self._store.delete_user, scope.tenant, scope.user_id, tier.value)
        return n
