"""Retention maintenance (RT-005): archive what is past its tier's retention and purge
what is expired or soft-deleted, for every user; then recount each user's usage from the
store and correct the usage counters' drift. Runs in the server on an interval (on one
replica at a time) and once from `memoryd maintain`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from memoryd.core.memory.vector_memory import VectorMemory
from memoryd.core.models import PruneCommand, PruneStrategy, Scope, Tier
from memoryd.core.tasks import stop_task
from memoryd.core.tiers.base import TierHandler
from memoryd.core.tiers.registry import StoreFamily, retained, spec
from memoryd.core.tiers.vector_tier import VectorTier
from memoryd.settings import RetentionSettings

log = logging.getLogger(__name__)


@dataclass
class MaintenanceReport:
    users: int = 0
    archived: int = 0
    purged: int = 0
    # Usage counters found off and corrected (users x tiers).
    corrected: int = 0
    # Per tier, for the tiers that archived or purged anything.
    archived_by_tier: dict[Tier, int] = field(default_factory=dict)
    purged_by_tier: dict[Tier, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Plan:
    handler: TierHandler
    archive_after_days: int
    # Episodes: archive first, so one whose TTL has just lapsed reaches the archive
    # instead of the purge (its TTL and retention are both 90 days by default).
    archive_first: bool = False


class Maintenance:
    def __init__(
        self,
        memory: VectorMemory,
        tiers: Mapping[Tier, TierHandler],
        retention: RetentionSettings,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """Plans every tier the registry gives a retention, among those served."""
        self._memory = memory
        self._sleep = sleep
        self._survey_share = retention.survey_share
        self._surveyed = [t for t in tiers if spec(t).store is StoreFamily.VECTORS]
        self._plans = [
            _Plan(tiers[s.tier], s.archive_after_days(retention), s.archive_first)
            for s in retained()
            if s.tier in tiers
        ]
        # Counted tiers without retention: only their usage counters are recounted.
        planned = {p.handler.tier for p in self._plans}
        self._recounted = [
            h
            for h in tiers.values()
            if isinstance(h, VectorTier) and h.counted and h.tier not in planned
        ]

    async def _purge(self, plan: _Plan, scope: Scope) -> int:
        tier = plan.handler.tier
        purged = await plan.handler.prune(PruneCommand(scope, PruneStrategy.EXPIRED, tiers=[tier]))
        self._memory.observer.deleted(tier, "purge", purged)
        return purged

    async def _archive(self, plan: _Plan, scope: Scope) -> int:
        tier = plan.handler.tier
        return await plan.handler.prune(
            PruneCommand(
                scope,
                PruneStrategy.ARCHIVE_OLDER_THAN,
                tiers=[tier],
                older_than_days=plan.archive_after_days,
            )
        )

    async def run_once(self) -> MaintenanceReport:
        """For every user of a retained tier (long-term, structured, episodic): purge what is
        expired or deleted (first, so it is never archived), then archive what is past the
        tier's retention; episodes the other way round (see `_Plan.archive_first`)."""
        report = MaintenanceReport()
        users: set[tuple[str, str]] = set()
        for plan in self._plans:
            tier = plan.handler.tier
            for tenant, user_id in await self._memory.owners(tier):
                users.add((tenant, user_id))
                scope = Scope(tenant=tenant, user_id=user_id)
                if plan.archive_first:
                    archived = await self._archive(plan, scope)
                    purged = await self._purge(plan, scope)
                else:
                    purged = await self._purge(plan, scope)
                    archived = await self._archive(plan, scope)
                report.archived += archived
                report.purged += purged
                report.corrected += await self._reconcile(plan.handler, scope)
                if archived:
                    report.archived_by_tier[tier] = report.archived_by_tier.get(tier, 0) + archived
                if purged:
                    report.purged_by_tier[tier] = report.purged_by_tier.get(tier, 0) + purged
        for handler in self._recounted:
            for tenant, user_id in await self._memory.owners(handler.tier):
                users.add((tenant, user_id))
                scope = Scope(tenant=tenant, user_id=user_id)
                report.corrected += await self._reconcile(handler, scope)
        report.users = len(users)
        log.info(
            "maintenance: %d users, %d memories archived, %d purged, %d usage counters corrected",
            report.users,
            report.archived,
            report.purged,
            report.corrected,
        )
        return report

    async def _reconcile(self, handler: TierHandler, scope: Scope) -> int:
        """Recount the user's usage of the tier and correct its counter; 1 if it was off."""
        if not isinstance(handler, VectorTier):
            return 0
        fixed = await handler.reconcile(scope)
        if fixed is None or fixed.before == fixed.after:
            return 0
        log.info(
            "usage of %s/%s in %s corrected: %d memories, %d bytes (counted %d, %d)",
            scope.tenant,
            scope.user_id,
            handler.tier.value,
            fixed.after.count,
            fixed.after.bytes,
            fixed.before.count,
            fixed.before.bytes,
        )
        return 1

    async def survey(self) -> None:
        """Report what each vector tier stores (bytes, ages of its memories): the RT-005
        storage metrics. It reads every stored memory (minutes of CPU at millions, and it
        starts with the server), so it pauses after each page: its work is at most
        `survey_share` of its time, and requests keep the rest."""
        rest = 1.0 / self._survey_share - 1.0
        pause = (lambda work: self._sleep(work * rest)) if rest > 0 else None
        for tier in self._surveyed:
            self._memory.observer.stored_bytes(tier, await self._memory.survey(tier, pause))


class Lease(Protocol):
    """A lease shared by the replicas: at most one holds it at a time. It lapses on its own
    when its holder stops renewing it (a replica that died)."""

    @property
    def renew_every_s(self) -> float:
        """How often the holder renews it: well within its time to live."""
        ...

    async def hold(self) -> bool:
        """Take the lease if free or renew it if ours; True while this replica holds it."""
        ...

    async def release(self) -> None:
        """Give it up if ours, so that another replica takes over at once."""
        ...


class MaintenanceLoop:
    """Runs `run` every `interval_s` seconds in a background task (first run one interval
    after start; `first`, if given, right at start); a failed run is logged and the loop
    goes on.

    With a `lease` (several replicas on one Redis) only its holder runs `run`: a heartbeat
    takes or renews it every `lease.renew_every_s`, also during a run, and the others skip
    their turns. `first` (the storage survey, metrics of this replica) is not gated.
    """

    def __init__(
        self,
        run: Callable[[], Awaitable[object]],
        interval_s: float,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        first: Callable[[], Awaitable[object]] | None = None,
        lease: Lease | None = None,
    ) -> None:
        self._run = run
        self._first = first
        self._interval_s = interval_s
        self._sleep = sleep
        self._lease = lease
        self._leader = lease is None
        self._task: asyncio.Task[None] | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None

    @property
    def leader(self) -> bool:
        """Whether this replica runs maintenance now (always, without a lease)."""
        return self._leader

    def start(self) -> None:
        if self._interval_s > 0 and self._task is None:
            if self._lease is not None:
                self._heartbeat_task = asyncio.create_task(
                    self._heartbeat(self._lease), name="memoryd-maintenance-lease"
                )
            self._task = asyncio.create_task(self._loop(), name="memoryd-maintenance")

    async def stop(self) -> None:
        await stop_task(self._task)
        self._task = None
        await stop_task(self._heartbeat_task)
        self._heartbeat_task = None
        if self._lease is not None and self._leader:
            self._leader = False
            try:
                await self._lease.release()
            except Exception:
                log.warning("could not release the maintenance lease; it lapses on its own")

    async def _heartbeat(self, lease: Lease) -> None:
        while True:
            try:
                held = await lease.hold()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("maintenance lease unreachable; not running maintenance here")
                held = False
            if held != self._leader:
                log.info("maintenance lease %s", "taken" if held else "lost")
            self._leader = held
            await asyncio.sleep(lease.renew_every_s)

    async def _loop(self) -> None:
        if self._first is not None:
            await self._attempt(self._first)
        while True:
            await self._sleep(self._interval_s)
            if self._leader:
                await self._attempt(self._run)

    async def _attempt(self, run: Callable[[], Awaitable[object]]) -> None:
        try:
            await run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("maintenance run failed; next try in %.0f s", self._interval_s)
