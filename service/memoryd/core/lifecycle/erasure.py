"""Erasure of a user (GDPR "right to be forgotten", RT-005): every tier, the cold
archive, the write-behind queue's pending copies and the backups, then the stores' own
files (the queue's journal, Redis's append-only file, the vector store's segments) are
rewritten where the store allows; one audit line per erasure, holding counts and
identifiers only. What stays on disk, and for how long: docs/operations.md, "Erasure"."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime

from memoryd.core.errors import StoreUnavailable
from memoryd.core.models import PruneCommand, PruneResult, PruneStrategy, Scope, Tier
from memoryd.core.observe import NullObserver, Observer
from memoryd.core.tiers.base import TierHandler
from memoryd.core.tiers.registry import spec
from memoryd.stores.audit.port import AuditLog, AuditLogError
from memoryd.stores.backup.port import BackupStore, BackupStoreError
from memoryd.stores.queue.port import QueueDown
from memoryd.stores.vectors.port import VectorStoreError

# Waits until every conversation copy queued so far is in long-term memory (not for those
# queued meanwhile: `ConversationCopier.copy_queued`).
Flush = Callable[[], Awaitable[None]]
# Has a store drop from its files what was deleted (a journal rewritten, a WAL flushed).
Compaction = Callable[[], Awaitable[None]]


class Erasure:
    def __init__(
        self,
        tiers: Mapping[Tier, TierHandler],
        audit: AuditLog,
        clock: Callable[[], float],
        backups: BackupStore | None = None,
        flush: Flush | None = None,
        observer: Observer | None = None,
        compactions: Sequence[Compaction] = (),
    ) -> None:
        self._tiers = {t: h for t, h in tiers.items() if spec(t).erased}
        self._observer = observer or NullObserver()
        self._audit = audit
        self._clock = clock
        self._backups = backups
        self._flush = flush
        self._compactions = tuple(compactions)

    async def _flush_queue(self) -> None:
        """Copies queued before the erasure land first, so the erasure removes them:
        none can resurrect the user afterwards."""
        if self._flush is None:
            return
        try:
            await self._flush()
        except TimeoutError as exc:
            raise StoreUnavailable(
                "write-behind queue", "pending conversation copies could not be flushed"
            ) from exc

    async def _compact(self) -> None:
        """After the deletes: the stores' files, so that the user's text leaves the disk.
        Failing, the erasure answers UNAVAILABLE; the user is erased already and a retry
        (which finds nothing more to delete) compacts again."""
        for step in self._compactions:
            try:
                await step()
            except (QueueDown, VectorStoreError) as exc:
                raise StoreUnavailable(
                    "erasure", f"erased, but a store's files were not rewritten: {exc}"
                ) from exc

    async def _backup_files(self, scope: Scope, dry_run: bool) -> int:
        backups = self._backups
        if backups is None:
            return 0

        def count() -> int:
            return sum(
                1
                for day in backups.days()
                if backups.file_of(day, scope.tenant, scope.user_id) in backups.files(day)
            )

        try:
            if dry_run:
                return await asyncio.to_thread(count)
            return await asyncio.to_thread(backups.delete_user, scope.tenant, scope.user_id)
        except BackupStoreError as exc:
            raise StoreUnavailable("backups", str(exc)) from exc

    async def erase(self, cmd: PruneCommand, requested_by: str) -> PruneResult:
        """Every memory of `cmd.scope`'s user (agent/session/task ignored); on dry_run,
        only counts."""
        scope = Scope(tenant=cmd.scope.tenant, user_id=cmd.scope.user_id)
        if not cmd.dry_run:
            await self._flush_queue()
        result = PruneResult(dry_run=cmd.dry_run)
        for tier, handler in self._tiers.items():
            n = await handler.prune(
                PruneCommand(scope, PruneStrategy.ALL, tiers=[tier], dry_run=cmd.dry_run)
            )
            result.per_tier[tier] = n
            result.deleted_count += n
            if not cmd.dry_run:
                self._observer.deleted(tier, "erasure", n)
        backup_files = await self._backup_files(scope, cmd.dry_run)
        if not cmd.dry_run:
            await self._compact()
            entry = {
                "time": datetime.fromtimestamp(self._clock(), tz=UTC).isoformat(),
                "event": "erasure",
                "tenant": scope.tenant,
                "user_id": scope.user_id,
                "requested_by": requested_by,
                "per_tier": {t.value: n for t, n in result.per_tier.items()},
                "deleted_count": result.deleted_count,
                "backup_files": backup_files,
            }
            try:
                await asyncio.to_thread(self._audit.append, entry)
            except AuditLogError as exc:
                raise StoreUnavailable("audit log", str(exc)) from exc
        return result
