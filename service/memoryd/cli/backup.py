"""`memoryd backup` and `memoryd restore`: per-user export files of the tiers the registry
marks backed up (`TierSpec.backed_up`: the durable ones), written and read through the
engine's export and import paths, in the export stream format of the Export RPC
(transport.export_stream).

    <data_dir>/backups/<YYYY-MM-DD>/<tenant>/<user>.jsonl.gz

A file holds JSON lines: a `memorydBackup` line (tenant, user, time), then Export
responses in their protobuf JSON form: the header, every item, and the trailer (item
count and checksum, checked again on restore; docs/reference/export-format.md). Backup
days older than `backup.retention_days` are deleted by each backup run.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from memoryd.core.engine import MemoryEngine
from memoryd.core.errors import InvalidArgument
from memoryd.core.memory.vector_memory import VectorMemory
from memoryd.core.models import ExportQuery, MemoryRecord, Scope
from memoryd.core.tiers.registry import backed_up_tiers
from memoryd.stores.backup.port import BackupStore
from memoryd.transport import convert, export_stream

log = logging.getLogger(__name__)

FORMAT_VERSION = "1"
_WRITE_BATCH = 256

Progress = Callable[[int, int], None]


class BackupCorrupt(Exception):
    """A backup file is incomplete or does not match its checksum; nothing was restored."""


@dataclass
class BackupReport:
    day: str = ""
    users: int = 0
    items: int = 0
    days_deleted: int = 0
    # "tenant/user" of the users whose backup failed (each logged with its reason).
    failed: list[str] = field(default_factory=list)


@dataclass
class RestoreReport:
    day: str = ""
    users: int = 0
    imported: int = 0
    skipped: int = 0


def day_of(now: float) -> str:
    return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%d")


async def _backup_user(
    engine: MemoryEngine, store: BackupStore, day: str, scope: Scope, now: float
) -> int:
    query = ExportQuery(scope=scope, tiers=backed_up_tiers())
    counts = await engine.export_counts(query)
    meta = {
        "memorydBackup": {
            "formatVersion": FORMAT_VERSION,
            "tenant": scope.tenant,
            "userId": scope.user_id,
            "createdAt": datetime.fromtimestamp(now, tz=UTC).isoformat(),
        }
    }
    header = export_stream.header(scope.user_id, now, counts)
    items = (convert.exported_item(r) async for r in engine.export_records(query))
    writer = await asyncio.to_thread(store.writer, day, scope.tenant, scope.user_id)
    count = 0
    try:
        lines = [json.dumps(meta, separators=(",", ":"))]
        async for message in export_stream.frame(header, items):
            lines.append(export_stream.to_json_line(message))
            count = message.trailer.item_count  # the last message is the trailer
            if len(lines) >= _WRITE_BATCH:
                await asyncio.to_thread(writer.write, lines)
                lines = []
        await asyncio.to_thread(writer.write, lines)
        await asyncio.to_thread(writer.commit)
    except BaseException:
        await asyncio.to_thread(writer.abort)
        raise
    return count


async def backup(
    engine: MemoryEngine,
    memory: VectorMemory,
    store: BackupStore,
    now: float,
    retention_days: int,
    progress: Progress = lambda done, total: None,
) -> BackupReport:
    """Write today's file for every user with backed-up memories, then delete the backup
    days older than `retention_days`."""
    owners: set[tuple[str, str]] = set()
    for tier in backed_up_tiers():
        owners.update(await memory.owners(tier))
    report = BackupReport(day=day_of(now))
    users = sorted(owners)
    for tenant, user_id in users:
        scope = Scope(tenant=tenant, user_id=user_id)
        try:
            report.items += await _backup_user(engine, store, report.day, scope, now)
        except Exception as exc:
            # One user's bad record (or a failing store) must not cost every later user
            # their backup: note it, go on, and let the command's exit status say so.
            log.error(
                "backup of user %s/%s failed: %s: %s", tenant, user_id, type(exc).__name__, exc
            )
            report.failed.append(f"{tenant}/{user_id}")
        else:
            report.users += 1
        progress(report.users + len(report.failed), len(users))
    oldest_kept = day_of(now - timedelta(days=retention_days).total_seconds())
    for day in await asyncio.to_thread(store.days):
        if day < oldest_kept:
            await asyncio.to_thread(store.delete_day, day)
            report.days_deleted += 1
    return report


def _parse(lines: Sequence[str]) -> tuple[Scope, list[MemoryRecord]]:
    if not lines:
        raise BackupCorrupt("the file is empty")
    # Backups are always written whole: a header first and a checksum in the trailer.
    receiver = export_stream.Receiver(header_first=True, checksum_required=True)
    try:
        meta: dict[str, Any] = json.loads(lines[0])["memorydBackup"]
        scope = Scope(tenant=str(meta["tenant"]), user_id=str(meta["userId"]))
        messages = [export_stream.from_json_line(line) for line in lines[1:]]
    except (ValueError, KeyError, TypeError) as exc:
        raise BackupCorrupt(f"unreadable: {exc}") from exc
    try:
        for message in messages:
            receiver.add(message)
        items = receiver.finish().items
    except InvalidArgument as exc:
        raise BackupCorrupt(f"incomplete or damaged: {exc}") from exc
    try:
        return scope, [convert.record_from_item(i) for i in items]
    except InvalidArgument as exc:
        raise BackupCorrupt(f"an item cannot be restored: {exc}") from exc


def _read_all(store: BackupStore, day: str, name: str) -> list[str]:
    return list(store.read(day, name))


async def restore(
    engine: MemoryEngine,
    store: BackupStore,
    day: str | None = None,
    user_id: str | None = None,
    tenant: str | None = None,
    progress: Progress = lambda done, total: None,
) -> RestoreReport:
    """Import the backups of `day` (default: the latest) through the engine; items whose
    id the user already has are skipped, so restoring twice changes nothing."""
    days = await asyncio.to_thread(store.days)
    if day is None:
        if not days:
            return RestoreReport()
        day = days[-1]
    report = RestoreReport(day=day)
    names = await asyncio.to_thread(store.files, day)
    if user_id is not None:
        # The file name is the user's; the directory is the tenant's.
        own_name = store.file_of(day, tenant or "-", user_id).rsplit("/", 1)[-1]
        names = [n for n in names if n.rsplit("/", 1)[-1] == own_name]
    for i, name in enumerate(names, 1):
        lines = await asyncio.to_thread(_read_all, store, day, name)
        try:
            scope, records = _parse(lines)
        except BackupCorrupt as exc:
            raise BackupCorrupt(f"{day}/{name}: {exc}") from exc
        if tenant is not None and scope.tenant != tenant:
            continue
        batch = engine.max_import_items
        for start in range(0, len(records), batch):
            # A restore puts back what was (a backup holds no origin: see exported_item).
            done = await engine.import_records(scope, records[start : start + batch], origin=None)
            report.imported += done.imported_count
            report.skipped += done.skipped_count
        report.users += 1
        progress(i, len(names))
    return report
