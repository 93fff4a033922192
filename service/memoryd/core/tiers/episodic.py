"""Episodic memory: an agent's past tasks (task, steps, outcome), found again by
similarity when a new task looks like an old one.

Episodes belong to a (user, agent): the quota counts per agent, and Retrieve with an
`agent_id` searches that agent's episodes (without one, every agent's of the user). An
episode expires `ttl_days` after it was added (sooner if the Add asks); retention then
moves it to the cold archive (see `_archivable`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from memoryd.core.errors import FieldViolation
from memoryd.core.lifecycle.cold_archive import ColdArchive
from memoryd.core.lifecycle.ledger import Hold, size_of
from memoryd.core.lifecycle.quotas import QuotaProfiles, add_scope, quota_full
from memoryd.core.memory.payload import content_hash, embed_text_of, to_payload
from memoryd.core.memory.vector_memory import NewPoint, VectorMemory
from memoryd.core.models import (
    AddCommand,
    AddResult,
    Episode,
    Kind,
    MemoryRecord,
    Operation,
    Scope,
    Source,
    Tier,
    TierUsage,
)
from memoryd.core.tiers.archiving import DAY_S, ArchivingVectorTier
from memoryd.core.tiers.bodies import episode_problems, render_episode
from memoryd.core.tiers.vector_tier import Room
from memoryd.core.validation import Violations
from memoryd.settings import EpisodicSettings, LongTermSettings, QuotaSettings
from memoryd.stores.usage.port import Correction, Counted, UsageCounters
from memoryd.stores.vectors.port import Condition, Filter, MatchValue

# An expiry this much before the TTL date was asked for on Add (not the TTL's own).
_EARLY_S = 1.0


class EpisodicTier(ArchivingVectorTier):
    tier = Tier.EPISODIC
    _archives_expired = True  # an episode whose TTL lapsed is archived, see `_archivable`
    _per_agent = True  # the quota counts per agent

    def __init__(
        self,
        memory: VectorMemory,
        settings: EpisodicSettings,
        clock: Callable[[], float],
        archive: ColdArchive | None = None,
        max_content_bytes: int = 65_536,
        compress_over_bytes: int = 1024,
        *,
        counters: UsageCounters,
        quotas: QuotaProfiles | None = None,
    ) -> None:
        super().__init__(memory, clock, archive, compress_over_bytes, counters)
        self._settings = settings
        # The per-agent limit is the user's quota profile's (unset there: `settings`').
        self._quotas = quotas or QuotaProfiles(QuotaSettings(), LongTermSettings(), settings)
        self._max_content_bytes = max_content_bytes

    def check_add(self, cmd: AddCommand, v: Violations) -> None:
        if not cmd.scope.agent_id:
            v.add("scope.agent_id", "is required for the episodic tier: episodes are per agent")
        for problem in episode_problems(
            cmd.episode, self._settings.max_steps, self._max_content_bytes
        ):
            v.add(problem.field, problem.description)
        if cmd.content:
            v.add("content", "must be empty for the episodic tier: the episode is the content")
        if cmd.kind not in (Kind.UNSPECIFIED, Kind.EPISODE):
            v.add("kind", "must be EPISODE (or unset) for the episodic tier")
        if cmd.expires_at is not None and cmd.expires_at <= self._clock():
            v.add("expires_at", "must be in the future")

    def _query_conditions(self, scope: Scope) -> list[Condition]:
        return [MatchValue("agent_id", scope.agent_id)] if scope.agent_id else []

    def _of_agent(self, scope: Scope) -> Filter:
        return self._live(scope).and_(MatchValue("agent_id", scope.agent_id))

    def _archivable(self, record: MemoryRecord, now: float) -> bool:
        """An episode whose TTL has lapsed is archived: the TTL ends its time in search,
        not its existence. One whose Add asked for an earlier expiry is left to be purged:
        archiving it would keep what the caller asked to forget."""
        if record.deleted:
            return False
        if record.expires_at is None or record.expires_at > now:
            return True
        ttl_date = record.created_at + self._settings.ttl_days * DAY_S
        return record.expires_at >= ttl_date - _EARLY_S

    def _room(self, scope: Scope) -> Room:
        """The quota of one agent of the user: its live episodes."""
        limit = self._quotas.profile_for(scope).limits.episodic_max_episodes_per_agent
        return Room(
            lock_key=(scope.tenant, scope.user_id, scope.agent_id),
            live=self._of_agent(scope),
            max_count=limit,
            scope=scope,
            count_full=lambda: quota_full(
                f"episodic:{scope.user_id}/{scope.agent_id}",
                "episodic.max_episodes_per_agent",
                limit,
                f"episodic memory of agent {scope.agent_id!r} is full (max: {limit:,} "
                "episodes per agent); delete old episodes or upgrade your plan",
            ),
        )

    def _rooms(
        self, scope: Scope, records: Sequence[MemoryRecord]
    ) -> list[tuple[Room, list[MemoryRecord]]]:
        by_agent: dict[str, list[MemoryRecord]] = {}
        for record in records:
            by_agent.setdefault(record.agent_id, []).append(record)
        return [
            (self._room(dataclasses.replace(scope, agent_id=agent)), items)
            for agent, items in by_agent.items()
        ]

    async def reconcile(self, scope: Scope) -> Correction | None:
        """Recount each agent of the user: the counters are per agent. Returns the sums;
        None when an agent's counter kept moving."""
        before, after, moving = Counted(0, 0), Counted(0, 0), False
        for agent in await self._agents(scope):
            fixed = await self._ledger.reconcile(dataclasses.replace(scope, agent_id=agent))
            if fixed is None:
                moving = True
                continue
            before = Counted(before.count + fixed.before.count, before.bytes + fixed.before.bytes)
            after = Counted(after.count + fixed.after.count, after.bytes + fixed.after.bytes)
        return None if moving else Correction(before, after)

    async def _agents(self, scope: Scope) -> set[str]:
        """The agents the user holds episodes of (reading payloads only)."""
        memory, agents = self._memory, set[str]()
        held = Filter(
            must=[memory.scope_filter(scope, self.tier, live_only=False)],
            must_not=[MatchValue("deleted", True)],
        )
        async for points in memory.points(held):
            agents.update(str(p.payload.get("agent_id", "")) for p in points)
        return agents

    async def _write(self, hold: Hold, record: MemoryRecord) -> None:
        """Write the episode `hold` reserved room for."""
        digest = content_hash(hold.scope, Tier.EPISODIC, "", record.content)
        payload = to_payload(record, hold.scope, digest, self._compress_over_bytes)
        point = NewPoint(record, payload, embed_text_of(payload))
        # A new id, or one found absent under the user's lock.
        await hold.write([record.id], lambda: self._memory.insert([point], fresh=True))

    async def add_summary(
        self,
        scope: Scope,
        point_id: str,
        episode: Episode,
        *,
        auto_prune: bool = False,
        metadata: dict[str, str] | None = None,
    ) -> MemoryRecord | None:
        """An episode memoryd writes itself (a session's summary, source auto) under an id
        derived from what it summarises: None when that id is stored already, so writing
        it again changes nothing."""
        room = self._room(scope)
        async with self._locks(room.lock_key):
            if await self._memory.points_by_id([point_id]):
                return None
            now = self._clock()
            record = MemoryRecord(
                id=point_id,
                tier=Tier.EPISODIC,
                content=render_episode(episode),
                kind=Kind.EPISODE,
                metadata=dict(metadata or {}),
                created_at=now,
                updated_at=now,
                expires_at=now + self._settings.ttl_days * DAY_S,
                source=Source.AUTO,
                agent_id=scope.agent_id,
                session_id=scope.session_id,
                episode=episode,
            )
            hold = await self._hold_one(room, size_of(record), auto_prune)
            await self._write(hold, record)
        return record

    async def add(self, cmd: AddCommand) -> AddResult:
        scope, episode = cmd.scope, cmd.episode
        assert episode is not None  # check_add refused a request without one
        room = self._room(scope)
        async with self._locks(room.lock_key):
            now = self._clock()
            expires = now + self._settings.ttl_days * DAY_S
            if cmd.expires_at is not None:
                expires = min(expires, cmd.expires_at)  # the TTL is the longest an episode lives
            record = cmd.new_record(
                render_episode(episode), Kind.EPISODE, now, expires, episode=episode
            )
            hold = await self._hold_one(room, size_of(record), cmd.auto_prune)
            await self._write(hold, record)
        operation = Operation.ADD_WITH_PRUNE if hold.pruned else Operation.ADD
        held = hold.held.count + 1
        return AddResult(record.id, operation, Tier.EPISODIC, max(0, room.max_count - held))

    def check_restore(self, record: MemoryRecord) -> list[FieldViolation]:
        problems = self._check_vector_restore(record)
        problems += episode_problems(
            record.episode, self._settings.max_steps, self._max_content_bytes
        )
        if record.kind is not Kind.EPISODE:
            problems.append(FieldViolation("kind", "must be EPISODE for episodic items"))
        return problems

    def _content_of(self, record: MemoryRecord) -> str:
        assert record.episode is not None
        return render_episode(record.episode)

    async def usage(self, scope: Scope) -> TierUsage:
        """Live episodes of every agent of the user; the quota is per agent, so percent is
        that of the fullest agent. Reads payloads only (no content is decompressed)."""
        memory = self._memory
        per_agent: dict[str, list[int]] = {}
        async for points in memory.points(self._live(scope)):
            for point in points:
                counts = per_agent.setdefault(str(point.payload.get("agent_id", "")), [0, 0])
                counts[0] += 1
                counts[1] += int(point.payload.get("size", 0))
        limits = self._quotas.profile_for(scope).limits
        usage = TierUsage(Tier.EPISODIC, max_count=limits.episodic_max_episodes_per_agent)
        for count, size in per_agent.values():
            add_scope(usage, count, size)
        return usage
