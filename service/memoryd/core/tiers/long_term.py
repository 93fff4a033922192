"""Long-term memory: typed, persistent, semantically searchable memories of a user."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memoryd.core.errors import FieldViolation
from memoryd.core.lifecycle.cold_archive import ColdArchive
from memoryd.core.lifecycle.quotas import QuotaProfiles, quota_full, quota_percent
from memoryd.core.memory.payload import content_hash, embed_text_of, to_payload
from memoryd.core.memory.vector_memory import NewPoint, VectorMemory, check_vector_restore
from memoryd.core.models import (
    AddCommand,
    AddResult,
    ImportResult,
    Kind,
    Lookup,
    MemoryRecord,
    Operation,
    Role,
    Scope,
    Source,
    Tier,
    TierUsage,
)
from memoryd.core.tiers.archiving import ArchivingVectorTier
from memoryd.core.validation import Violations
from memoryd.settings import LongTermSettings, QuotaSettings
from memoryd.stores.vectors.port import MatchValue


class LongTermTier(ArchivingVectorTier):
    """Get, Prune, Export and retrieval come from ArchivingVectorTier; long-term memory
    adds quota profiles, de-duplication, soft delete and the durable message copies."""

    tier = Tier.LONG_TERM

    def __init__(
        self,
        memory: VectorMemory,
        settings: LongTermSettings,
        clock: Callable[[], float],
        archive: ColdArchive | None = None,
        quotas: QuotaProfiles | None = None,
        max_content_bytes: int = 65_536,
        *,
        foreign_kinds: frozenset[Kind],
    ) -> None:
        super().__init__(memory, clock, archive, settings.compress_over_bytes)
        # Kinds that belong to other tiers (the registry knows which).
        self._foreign_kinds = foreign_kinds
        self._max_content_bytes = max_content_bytes
        self._settings = settings
        self._quotas = quotas or QuotaProfiles(QuotaSettings(), settings)

    def check_add(self, cmd: AddCommand, v: Violations) -> None:
        if cmd.kind in self._foreign_kinds:
            v.add("kind", f"{cmd.kind.value} memories belong to another tier")
        if cmd.expires_at is not None and cmd.expires_at <= self._clock():
            v.add("expires_at", "must be in the future")

    def _new_point(self, record: MemoryRecord, scope: Scope) -> NewPoint:
        digest = content_hash(scope, record.tier, record.key, record.content)
        payload = to_payload(record, scope, digest, self._settings.compress_over_bytes)
        return NewPoint(record=record, payload=payload, embed_text=embed_text_of(payload))

    async def add(self, cmd: AddCommand) -> AddResult:
        scope = cmd.scope
        digest = content_hash(scope, Tier.LONG_TERM, "", cmd.content)
        live = self._memory.scope_filter(scope, Tier.LONG_TERM)
        profile = self._quotas.profile_for(scope)
        limit = profile.limits.long_term_max_memories
        max_bytes = profile.limits.long_term_max_bytes
        new_bytes = len(cmd.content.encode())
        async with self._locks((scope.tenant, scope.user_id)):
            if cmd.kind is not Kind.MESSAGE:
                same = await self._memory.first(live.and_(MatchValue("content_hash", digest)))
                if same is not None:
                    count = await self._memory.call(self._memory.store.count, live)
                    return AddResult(
                        same.id, Operation.DEDUPLICATED, Tier.LONG_TERM, max(0, limit - count)
                    )
            count, operation = await self._make_room(
                live,
                await self._memory.call(self._memory.store.count, live),
                limit,
                cmd.auto_prune,
                lambda: quota_full(
                    f"long_term:{scope.user_id}",
                    "long_term.max_memories",
                    limit,
                    f"long-term memory is full (max: {limit:,} memories, quota profile "
                    f"{profile.name!r}); delete old memories or upgrade your plan",
                ),
            )
            size = await self._memory.bytes_used(
                live, count, max_bytes - new_bytes, self._max_content_bytes
            )
            if size + new_bytes > max_bytes:
                # Auto-prune frees room by count only; a byte overflow is always refused.
                raise quota_full(
                    f"long_term:{scope.user_id}",
                    "long_term.max_bytes",
                    max_bytes,
                    f"long-term memory would exceed its size quota with this {new_bytes:,}-byte "
                    f"memory ({size:,} bytes used, max: {max_bytes:,} bytes, quota profile "
                    f"{profile.name!r}); delete old memories or upgrade your plan",
                )
            now = self._clock()
            kind = Kind.NOTE if cmd.kind is Kind.UNSPECIFIED else cmd.kind
            record = cmd.new_record(cmd.content, kind, now, cmd.expires_at)
            if scope.session_id:
                record.position = await self._next_position(scope)
            await self._memory.insert([self._new_point(record, scope)])
        return AddResult(record.id, operation, Tier.LONG_TERM, max(0, limit - count - 1))

    async def _next_position(self, scope: Scope, taken: int = 0) -> int:
        """The position after the last one of the scope's session (deleted memories
        included, so a position is never given twice), plus `taken` already handed out."""
        session = self._memory.scope_filter(
            scope,
            Tier.LONG_TERM,
            live_only=False,
            extra=[MatchValue("session_id", scope.session_id)],
        )
        last = await self._memory.records(session, 1, newest_first=True, order_by="position")
        return (last[0].position if last else 0) + 1 + taken

    async def add_messages(self, items: Sequence[tuple[Scope, MemoryRecord]]) -> None:
        """The durable copies of conversation messages; ids are the messages' own, so a
        replay after a restart rewrites the same points instead of adding new ones."""
        points = []
        # Replays keep the positions they were given; new messages follow their session's.
        known = {
            p.id: int(p.payload.get("position") or 0)
            for p in await self._memory.call(self._memory.store.retrieve, [m.id for _, m in items])
        }
        handed: dict[tuple[str, str, str], int] = {}
        for scope, message in items:
            position = known.get(message.id, 0)
            if not position and scope.session_id:
                session = (scope.tenant, scope.user_id, scope.session_id)
                position = await self._next_position(scope, handed.get(session, 0))
                handed[session] = handed.get(session, 0) + 1
            record = MemoryRecord(
                id=message.id,
                tier=Tier.LONG_TERM,
                content=message.content,
                kind=Kind.MESSAGE,
                metadata=dict(message.metadata),
                created_at=message.created_at,
                updated_at=message.created_at,
                source=Source.AUTO,
                role=message.role if message.role is not Role.UNSPECIFIED else Role.USER,
                agent_id=scope.agent_id,
                session_id=scope.session_id,
                occurred_at=message.created_at,
                position=position,
            )
            points.append(self._new_point(record, scope))
        await self._memory.insert(points)

    async def delete(self, lookup: Lookup) -> int:
        """Soft delete: hidden at once, purged by a later Prune (EXPIRED or ALL)."""
        ids = [r.id for r in await self._memory.by_ids(self._live(lookup.scope), lookup.ids)]
        if ids:
            patch = {"deleted": True, "updated_at": self._clock()}
            await self._memory.call(self._memory.store.set_payload, ids, patch)
        return len(ids)

    def check_restore(self, record: MemoryRecord) -> list[FieldViolation]:
        problems = check_vector_restore(record)
        if record.kind in self._foreign_kinds:
            problems.append(FieldViolation("kind", f"{record.kind.value} belongs to another tier"))
        return problems

    async def restore(self, scope: Scope, records: Sequence[MemoryRecord]) -> ImportResult:
        # Unlike episodes and documents, the content is the memory itself: kept as is.
        return await self._memory.restore(scope, records, self._compress_over_bytes)

    async def usage(self, scope: Scope) -> TierUsage:
        """Live memories (what the quota counts) and their content bytes."""
        count, size = await self._memory.measure(self._live(scope))
        profile = self._quotas.profile_for(scope)
        max_count = profile.limits.long_term_max_memories
        max_bytes = profile.limits.long_term_max_bytes
        return TierUsage(
            Tier.LONG_TERM,
            count=count,
            bytes=size,
            max_count=max_count,
            max_bytes=max_bytes,
            percent=quota_percent(count, max_count, size, max_bytes),
            quota_profile=profile.name,
        )
