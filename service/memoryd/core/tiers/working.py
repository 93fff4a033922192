"""Working memory: key/value scratch space of one task, with LRU eviction past its size."""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import AsyncIterator, Callable, Sequence

from memoryd.core.errors import FieldViolation, QuotaExceeded
from memoryd.core.lifecycle.quotas import add_scope, quota_full
from memoryd.core.models import (
    AddCommand,
    AddResult,
    GetResult,
    ImportResult,
    Kind,
    Lookup,
    MemoryRecord,
    Operation,
    PruneCommand,
    RetrieveQuery,
    Scope,
    Tier,
    TierUsage,
)
from memoryd.core.text import overlap_score, utf8_len, words
from memoryd.core.tiers.base import TierHits
from memoryd.core.tiers.hot_errors import hot_store_calls
from memoryd.core.tiers.hot_prune import HOT_STRATEGIES, metadata_matches, prune_hot
from memoryd.core.validation import Violations, check_key
from memoryd.settings import LimitSettings, WorkingSettings
from memoryd.stores.hot.port import EntryLimitReached, HotStore, TaskKey, WorkingEntry

_ID_NAMESPACE = uuid.UUID("6f1c1f8e-3b7a-4d0e-9a43-5f2b8c1d7e10")


def task_of(scope: Scope) -> TaskKey:
    return TaskKey(scope.tenant, scope.user_id, scope.agent_id, scope.task_id)


def scope_of(task: TaskKey) -> Scope:
    return Scope(task.tenant, task.user_id, agent_id=task.agent_id, task_id=task.task_id)


def entry_id(scope: Scope, key: str) -> str:
    """Stable per (scope, key): replacing a key keeps its id, and ids need no index."""
    return _id_of("\x00".join((scope.tenant, scope.user_id, scope.agent_id, scope.task_id, key)))


@functools.lru_cache(maxsize=4096)
def _id_of(name: str) -> str:
    # A task's keys are written again and again: the SHA-1 of uuid5 once per key.
    return str(uuid.uuid5(_ID_NAMESPACE, name))


def entry_size(key: str, content: str, metadata: dict[str, str]) -> int:
    return (
        utf8_len(key)
        + utf8_len(content)
        + sum(utf8_len(k) + utf8_len(v) for k, v in metadata.items())
    )


def _record(entry: WorkingEntry, scope: Scope, score: float = 0.0) -> MemoryRecord:
    return MemoryRecord(
        id=entry.id,
        tier=Tier.WORKING,
        content=entry.content,
        kind=Kind(entry.kind) if entry.kind else Kind.UNSPECIFIED,
        key=entry.key,
        score=score,
        metadata=dict(entry.metadata),
        importance=entry.importance,
        created_at=entry.created_at,
        updated_at=entry.updated_at,
        agent_id=scope.agent_id,
        task_id=scope.task_id,
    )


class WorkingTier:
    tier = Tier.WORKING

    def __init__(
        self,
        store: HotStore,
        settings: WorkingSettings,
        limits: LimitSettings,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._settings = settings
        self._limits = limits
        self._clock = clock

    def check_add(self, cmd: AddCommand, v: Violations) -> None:
        if not cmd.scope.task_id:
            v.add("scope.task_id", "is required for the working tier")
        check_key(v, cmd.key, self._limits, required=True)
        size = entry_size(cmd.key, cmd.content, cmd.metadata)
        if size > self._settings.max_bytes:
            v.add(
                "content",
                f"the entry is {size:,} bytes; a task's working memory holds at most "
                f"{self._settings.max_bytes:,} bytes",
            )

    def can_retrieve(self, scope: Scope) -> bool:
        return bool(scope.task_id)

    def _full(self, scope: Scope) -> QuotaExceeded:
        max_entries = self._settings.max_entries
        return quota_full(
            f"working:{scope.user_id}/{scope.task_id}",
            "working.max_entries",
            max_entries,
            (
                f"working memory of this task is full (max: {max_entries:,} entries); "
                "delete keys you no longer need or end the task"
            ),
        )

    async def add(self, cmd: AddCommand) -> AddResult:
        now = self._clock()
        entry = WorkingEntry(
            key=cmd.key,
            id=entry_id(cmd.scope, cmd.key),
            content=cmd.content,
            size=entry_size(cmd.key, cmd.content, cmd.metadata),
            kind=cmd.kind.value if cmd.kind is not Kind.UNSPECIFIED else "",
            metadata=dict(cmd.metadata),
            importance=0.5 if cmd.importance is None else cmd.importance,
            created_at=now,
            updated_at=now,
        )
        max_entries = self._settings.max_entries
        try:
            with hot_store_calls():
                outcome = await self._store.put_entry(
                    task_of(cmd.scope), entry, max_entries, self._settings.max_bytes
                )
        except EntryLimitReached:
            raise self._full(cmd.scope) from None
        return AddResult(
            memory_id=entry.id,
            operation=Operation.UPDATED if outcome.replaced else Operation.ADD,
            tier=Tier.WORKING,
            quota_remaining=max(0, max_entries - outcome.count),
            evicted_keys=outcome.evicted_keys,
        )

    async def retrieve(self, query: RetrieveQuery, top_k: int) -> TierHits:
        with hot_store_calls():
            entries = await self._store.list_entries(task_of(query.scope))
        wanted = words(query.query)
        records = [
            _record(e, query.scope, overlap_score(wanted, f"{e.key} {e.content}"))
            for e in entries
            if _matches(e, query)
        ]
        if wanted:
            # Working entries come first in a multi-tier retrieve: only those the query
            # touches, so stale task keys never crowd relevant memories out of top_k.
            records = [r for r in records if r.score > 0]
        # Stable sort: entries sharing words with the query first, most recent use next.
        records.sort(key=lambda r: r.score, reverse=True)
        return TierHits(items=records[:top_k], total=len(records))

    async def get(self, lookup: Lookup) -> GetResult:
        task = task_of(lookup.scope)
        keys = list(lookup.keys)
        by_id = {}
        if lookup.ids:
            with hot_store_calls():
                by_id = {e.id: e.key for e in await self._store.list_entries(task)}
            keys += [by_id[i] for i in lookup.ids if i in by_id]
        with hot_store_calls():
            found = await self._store.get_entries(task, list(dict.fromkeys(keys)))
        found_keys = {e.key for e in found}
        found_ids = {e.id for e in found}
        missing = [k for k in lookup.keys if k not in found_keys]
        missing += [i for i in lookup.ids if i not in found_ids]
        return GetResult(items=[_record(e, lookup.scope) for e in found], missing=missing)

    async def delete(self, lookup: Lookup) -> int:
        task = task_of(lookup.scope)
        keys = list(lookup.keys)
        with hot_store_calls():
            if lookup.ids:
                wanted = set(lookup.ids)
                keys += [e.key for e in await self._store.list_entries(task) if e.id in wanted]
            return await self._store.delete_entries(task, list(dict.fromkeys(keys)))

    async def prune(self, cmd: PruneCommand) -> int:
        # Working entries live until their task ends: nothing expires or ages out.
        if cmd.strategy not in HOT_STRATEGIES:
            return 0
        if not cmd.scope.task_id:
            # No task named (an erasure, or a prune of every tier): every task of the user.
            return sum(
                [
                    await self.prune(dataclasses.replace(cmd, scope=scope_of(t)))
                    for t in await self._tasks(cmd.scope)
                ]
            )
        task = task_of(cmd.scope)
        return await prune_hot(
            cmd,
            listing=lambda: self._store.list_entries(task),
            metadata_of=lambda e: e.metadata,
            name_of=lambda e: e.key,
            clear=lambda: self._store.clear_task(task),
            delete=lambda keys: self._store.delete_entries(task, keys),
        )

    async def live_scopes(self, scope: Scope) -> list[Scope]:
        """The user's tasks holding working memory (for operators to pick one)."""
        return [scope_of(t) for t in await self._tasks(scope)]

    async def _tasks(self, scope: Scope) -> list[TaskKey]:
        with hot_store_calls():
            return await self._store.list_tasks(scope.tenant, scope.user_id)

    async def export_count(self, scope: Scope) -> int:
        with hot_store_calls():
            return sum([len(await self._store.list_entries(t)) for t in await self._tasks(scope)])

    async def export_pages(self, scope: Scope) -> AsyncIterator[list[MemoryRecord]]:
        for task in await self._tasks(scope):
            with hot_store_calls():
                entries = await self._store.list_entries(task)
            # Least recently used first: restoring in stream order rebuilds the recency.
            yield [_record(e, scope_of(task)) for e in reversed(entries)]

    def check_restore(self, record: MemoryRecord) -> list[FieldViolation]:
        problems = []
        if not record.task_id:
            problems.append(FieldViolation("task_id", "is required for working items"))
        if not record.key:
            problems.append(FieldViolation("key", "is required for working items"))
        elif utf8_len(record.key) > self._limits.max_key_bytes:
            problems.append(FieldViolation("key", f"is over {self._limits.max_key_bytes} bytes"))
        if entry_size(record.key, record.content, record.metadata) > self._settings.max_bytes:
            problems.append(
                FieldViolation("content", f"is over {self._settings.max_bytes:,} bytes per task")
            )
        return problems

    async def check_room(
        self, scope: Scope, records: Sequence[MemoryRecord], auto_prune: bool
    ) -> None:
        """A task's new keys must fit its entry limit (the size limit evicts, as on Add)."""
        by_task: dict[TaskKey, set[str]] = {}
        for r in records:
            by_task.setdefault(
                TaskKey(scope.tenant, scope.user_id, r.agent_id, r.task_id), set()
            ).add(r.key)
        for task, keys in by_task.items():
            with hot_store_calls():
                existing = {e.key for e in await self._store.list_entries(task)}
            if len(existing | keys) > self._settings.max_entries:
                raise self._full(scope_of(task))

    async def restore(
        self, scope: Scope, records: Sequence[MemoryRecord], auto_prune: bool = False
    ) -> ImportResult:
        """Entries go under their own agent and task, for the importing user."""
        result = ImportResult()
        by_task: dict[TaskKey, list[MemoryRecord]] = {}
        for r in records:
            task = TaskKey(scope.tenant, scope.user_id, r.agent_id, r.task_id)
            by_task.setdefault(task, []).append(r)
        for task, items in by_task.items():
            with hot_store_calls():
                existing = {e.id for e in await self._store.list_entries(task)}
            for r in items:
                if r.id in existing:
                    result.skipped_count += 1
                    continue
                entry = WorkingEntry(
                    key=r.key,
                    id=r.id,
                    content=r.content,
                    size=entry_size(r.key, r.content, r.metadata),
                    kind=r.kind.value if r.kind is not Kind.UNSPECIFIED else "",
                    metadata=dict(r.metadata),
                    importance=r.importance,
                    created_at=r.created_at,
                    updated_at=r.updated_at,
                )
                try:
                    with hot_store_calls():
                        await self._store.put_entry(
                            task, entry, self._settings.max_entries, self._settings.max_bytes
                        )
                except EntryLimitReached:
                    raise self._full(scope_of(task)) from None
                existing.add(r.id)
                result.imported_count += 1
        return result

    async def usage(self, scope: Scope) -> TierUsage:
        """Totals over the user's tasks; the limits (and percent) are per task, so percent
        is that of the fullest task."""
        s = self._settings
        usage = TierUsage(Tier.WORKING, max_count=s.max_entries, max_bytes=s.max_bytes)
        for task in await self._tasks(scope):
            with hot_store_calls():
                entries = await self._store.list_entries(task)
            add_scope(usage, len(entries), sum(x.size for x in entries))
        return usage


def _matches(entry: WorkingEntry, query: RetrieveQuery) -> bool:
    if not metadata_matches(entry.metadata, query.filters):
        return False
    return not query.kinds or (bool(entry.kind) and Kind(entry.kind) in query.kinds)
