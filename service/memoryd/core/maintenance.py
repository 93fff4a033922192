"""Retention maintenance (RT-005): archive what is past its tier's retention and purge
what is expired or soft-deleted, for every user. Runs in the server on an interval and
once from `memoryd maintain`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from memoryd.core.models import PruneCommand, PruneStrategy, Scope, Tier
from memoryd.core.tasks import stop_task
from memoryd.core.tier import TierHandler
from memoryd.core.vector_memory import VectorMemory
from memoryd.settings import RetentionSettings

log = logging.getLogger(__name__)


@dataclass
class MaintenanceReport:
    users: int = 0
    archived: int = 0
    purged: int = 0


class Maintenance:
    def __init__(
        self, memory: VectorMemory, long_term: TierHandler, retention: RetentionSettings
    ) -> None:
        self._memory = memory
        self._long_term = long_term
        self._retention = retention

    async def run_once(self) -> MaintenanceReport:
        report = MaintenanceReport()
        days = self._retention.long_term_archive_after_days
        for tenant, user_id in await self._memory.owners(Tier.LONG_TERM):
            scope = Scope(tenant=tenant, user_id=user_id)
            report.users += 1
            # Purge first, so what is expired or deleted is never archived.
            report.purged += await self._long_term.prune(
                PruneCommand(scope, PruneStrategy.EXPIRED, tiers=[Tier.LONG_TERM])
            )
            report.archived += await self._long_term.prune(
                PruneCommand(
                    scope,
                    PruneStrategy.ARCHIVE_OLDER_THAN,
                    tiers=[Tier.LONG_TERM],
                    older_than_days=days,
                )
            )
        log.info(
            "maintenance: %d users, %d memories archived, %d purged",
            report.users,
            report.archived,
            report.purged,
        )
        return report


class MaintenanceLoop:
    """Runs `run` every `interval_s` seconds in a background task (first run one interval
    after start); a failed run is logged and the loop goes on."""

    def __init__(
        self,
        run: Callable[[], Awaitable[object]],
        interval_s: float,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._run = run
        self._interval_s = interval_s
        self._sleep = sleep
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._interval_s > 0 and self._task is None:
            self._task = asyncio.create_task(self._loop(), name="memoryd-maintenance")

    async def stop(self) -> None:
        await stop_task(self._task)
        self._task = None

    async def _loop(self) -> None:
        while True:
            await self._sleep(self._interval_s)
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("maintenance run failed; next try in %.0f s", self._interval_s)
