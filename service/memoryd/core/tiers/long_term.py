"""Long-term memory: typed, persistent, semantically searchable memories of a user."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from memoryd.core.errors import FieldViolation, MemorydError, QuotaExceeded
from memoryd.core.lifecycle.cold_archive import ColdArchive
from memoryd.core.lifecycle.quotas import QuotaProfiles, quota_full, quota_percent
from memoryd.core.memory.payload import (
    attach_lead,
    content_hash,
    embed_text_for,
    embed_text_of,
    is_turn,
    lead_for,
    lead_of,
    to_payload,
    with_lead,
)
from memoryd.core.memory.vector_memory import (
    NewPoint,
    VectorMemory,
    check_vector_restore,
)
from memoryd.core.models import (
    AddCommand,
    AddResult,
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
from memoryd.core.ratelimit_log import EveryFewSeconds
from memoryd.core.text import utf8_len
from memoryd.core.tiers.archiving import ArchivingVectorTier
from memoryd.core.tiers.vector_tier import Room
from memoryd.core.validation import Violations
from memoryd.settings import LongTermSettings, QuotaSettings
from memoryd.stores.usage.port import UsageCounters
from memoryd.stores.vectors.port import (
    Filter,
    HasId,
    MatchAny,
    MatchValue,
    canonical_id,
)

log = logging.getLogger(__name__)
# A user at the limit who keeps talking would log this for every message.
_copies_log = EveryFewSeconds(log, interval_s=60.0)


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
        counters: UsageCounters,
    ) -> None:
        super().__init__(
            memory, clock, archive, settings.compress_over_bytes, counters, settings.lead_chars
        )
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

    def _new_point(
        self, record: MemoryRecord, scope: Scope, before: MemoryRecord | None = None
    ) -> NewPoint:
        """The point of `record`; a turn is embedded after `before`, the turn before it in
        its session (ADR 0400: a reply is understood with what it answers)."""
        digest = content_hash(scope, record.tier, record.key, record.content)
        payload = to_payload(record, scope, digest, self._settings.compress_over_bytes)
        lead = attach_lead(payload, record, before, self._lead_chars)
        return NewPoint(record, payload, embed_text_of(payload), lead=lead)

    def _room(self, scope: Scope) -> Room:
        """The user's long-term quota: live memories against their quota profile."""
        profile = self._quotas.profile_for(scope)
        limit = profile.limits.long_term_max_memories
        max_bytes = profile.limits.long_term_max_bytes
        subject = f"long_term:{scope.user_id}"
        return Room(
            lock_key=(scope.tenant, scope.user_id),
            live=self._live(scope),
            max_count=limit,
            scope=scope,
            count_full=lambda: quota_full(
                subject,
                "long_term.max_memories",
                limit,
                f"long-term memory is full (max: {limit:,} memories, quota profile "
                f"{profile.name!r}); delete old memories or upgrade your plan",
            ),
            max_bytes=max_bytes,
            bytes_full=lambda new_bytes, used: quota_full(
                subject,
                "long_term.max_bytes",
                max_bytes,
                f"long-term memory would exceed its size quota with {new_bytes:,} more bytes "
                f"({used:,} bytes used, max: {max_bytes:,} bytes, quota profile "
                f"{profile.name!r}); delete old memories or upgrade your plan",
            ),
        )

    def _rooms(
        self, scope: Scope, records: Sequence[MemoryRecord]
    ) -> list[tuple[Room, list[MemoryRecord]]]:
        return [(self._room(scope), list(records))] if records else []

    def _restorable(self, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
        # Unlike episodes and documents, the content is the memory itself: kept as is.
        return list(records)

    async def add(self, cmd: AddCommand) -> AddResult:
        [outcome] = await self.add_many([cmd])
        if isinstance(outcome, MemorydError):
            raise outcome
        return outcome

    async def add_many(self, cmds: Sequence[AddCommand]) -> list[AddResult | MemorydError]:
        """Add each memory as one Add would, in order, with one embedding batch and one
        store write: a memory refused (quota) gets its error and the others go on. Each
        user's quota is checked for all of its memories at once, under its lock."""
        outcomes: list[AddResult | MemorydError | None] = [None] * len(cmds)
        users: dict[tuple[str, str], list[int]] = {}
        for i, cmd in enumerate(cmds):
            users.setdefault((cmd.scope.tenant, cmd.scope.user_id), []).append(i)
        # Embedded before any lock is taken: the lock guards the quota check and the write
        # only, so concurrent Adds of one user share model calls instead of queueing for
        # them. (A memory that turns out a duplicate or over quota was embedded for nothing;
        # the embedding cache makes a repeat of it cheap.)
        texts = []
        for c, lead in zip(cmds, await self._expected_leads(cmds), strict=True):
            texts.append(with_lead(lead, self._embed_text(c)))
            if self._memory.keeps_own(lead):  # its own vector too (ADR 0409)
                texts.append(self._embed_text(c))
        texts = list(dict.fromkeys(texts))
        vectors, _ = await self._memory.embed(texts)
        embedded = dict(zip(texts, vectors, strict=True))
        for user, indices in users.items():
            async with self._locks(user):
                done = await self._add_for_user([cmds[i] for i in indices], embedded)
            for i, outcome in zip(indices, done, strict=True):
                outcomes[i] = outcome
        return [o for o in outcomes if o is not None]

    async def _expected_leads(self, cmds: Sequence[AddCommand]) -> list[str]:
        """The lead each turn is expected to get, so that it is embedded before the lock:
        its session's last turn now, or the turn before it in this batch. A turn placed
        after another by then gets its real lead and is embedded again, under the lock."""
        if self._lead_chars <= 0:
            return [""] * len(cmds)
        following: dict[tuple[str, str, str], str] = {}  # session -> the next turn's lead
        leads = []
        for cmd in cmds:
            scope = cmd.scope
            if not scope.session_id or not is_turn(cmd.kind, cmd.metadata):
                leads.append("")
                if scope.session_id:  # the turn after it has no lead
                    following[(scope.tenant, scope.user_id, scope.session_id)] = ""
                continue
            key = (scope.tenant, scope.user_id, scope.session_id)
            if key not in following:
                last = await self._last_turn(scope)
                following[key] = lead_for(cmd.kind, cmd.metadata, last, self._lead_chars)
            leads.append(following[key])
            following[key] = lead_of(cmd.content, cmd.metadata, self._lead_chars)
        return leads

    @staticmethod
    def _embed_text(cmd: AddCommand) -> str:
        return embed_text_for(Tier.LONG_TERM.value, "", cmd.content, cmd.metadata)

    async def _add_for_user(
        self, cmds: Sequence[AddCommand], embedded: Mapping[str, list[float]]
    ) -> list[AddResult | MemorydError]:
        """`cmds` all belong to one user, whose lock is held; `embedded` has the vectors
        of their texts. The quota is a reservation
        on the usage counters (atomic across replicas): one for the whole batch when it
        fits, else one per memory, in order."""
        scope, ledger = cmds[0].scope, self._ledger
        room = self._room(scope)
        limit = room.max_count

        def too_big(new_bytes: int, used: int) -> QuotaExceeded:
            return self._bytes_full(scope, new_bytes, used, room.max_bytes)

        digests = [content_hash(c.scope, Tier.LONG_TERM, "", c.content) for c in cmds]
        deduped = {d for c, d in zip(cmds, digests, strict=True) if c.kind is not Kind.MESSAGE}
        stored = await self._stored_ids(room.live, deduped)
        sizes = [utf8_len(c.content) for c in cmds]
        firsts: dict[str, int] = {}
        writes = [
            i
            for i, (c, d) in enumerate(zip(cmds, digests, strict=True))
            if c.kind is Kind.MESSAGE or (d not in stored and firsts.setdefault(d, i) == i)
        ]
        if writes:
            whole = await ledger.reserve(
                scope, len(writes), sum(sizes[i] for i in writes), limit, room.max_bytes
            )
            prepaid, held = whole.granted, whole.held.count
        else:  # nothing new: every memory is there already
            prepaid, held = True, (await ledger.held(scope)).count
        # `held`: what the user holds after the last memory placed.
        # Reserved and not yet written: settled once written, released on any failure.
        owed = [len(writes), sum(sizes[i] for i in writes)] if prepaid else [0, 0]
        first_of: dict[str, str] = {}  # digest -> id of a memory this batch adds
        placed: dict[str, MemoryRecord] = {}  # session -> the last turn this batch placed
        points: list[NewPoint] = []
        outcomes: list[AddResult | MemorydError] = []

        async def flush() -> None:
            nonlocal points
            # The turns placed last are kept (the next turn of a conversation then finds
            # its place and its lead without a store read) unless another write landed.
            derived, owner = self._memory.derived, (scope.tenant, scope.user_id)
            before = derived.generation(owner)
            await self._memory.insert(points, fresh=True)  # new ids (`new_record`)
            placed_last = {p.record.session_id: p.record for p in points if p.record.session_id}
            derived.keep_written(
                owner, [(_last_turn_key(s), r) for s, r in placed_last.items()], before
            )
            await ledger.settle(scope, owed[0], owed[1], [p.record.id for p in points])
            points, owed[:] = [], [0, 0]

        try:
            for cmd, digest, new_bytes in zip(cmds, digests, sizes, strict=True):
                same = stored.get(digest) or first_of.get(digest)
                if cmd.kind is not Kind.MESSAGE and same is not None:
                    outcomes.append(
                        AddResult(
                            same, Operation.DEDUPLICATED, Tier.LONG_TERM, max(0, limit - held)
                        )
                    )
                    continue
                operation = Operation.ADD
                if prepaid:
                    held += 1
                else:
                    try:
                        hold = await self._hold_one(room, new_bytes, cmd.auto_prune, flush, too_big)
                    except QuotaExceeded as exc:
                        outcomes.append(exc)
                        continue
                    # Settled with the batch's other items by the next `flush`.
                    if hold.pruned:
                        operation = Operation.ADD_WITH_PRUNE
                    held = hold.held.count + 1
                    owed[0], owed[1] = owed[0] + 1, owed[1] + new_bytes
                kind = Kind.NOTE if cmd.kind is Kind.UNSPECIFIED else cmd.kind
                record = cmd.new_record(cmd.content, kind, self._clock(), cmd.expires_at)
                before: MemoryRecord | None = None
                if cmd.scope.session_id:
                    # A turn's place in its session: after its last turn, or after the turn
                    # this batch placed last.
                    session = cmd.scope.session_id
                    before = placed.get(session) or await self._last_turn(cmd.scope)
                    record.position = (before.position if before is not None else 0) + 1
                    placed[session] = record
                point = self._new_point(record, cmd.scope, before)
                # The texts embedded before the lock, unless the payload or the lead turned
                # out otherwise (then `insert` embeds them).
                own = embedded.get(point.embed_text) if point.lead else None
                points.append(replace(point, vector=embedded.get(point.dense_text), own_vector=own))
                first_of.setdefault(digest, record.id)
                outcomes.append(
                    AddResult(record.id, operation, Tier.LONG_TERM, max(0, limit - held))
                )
            await flush()
        except BaseException:
            await asyncio.shield(ledger.release(scope, owed[0], owed[1]))
            raise
        return outcomes

    async def _stored_ids(self, live: Filter, digests: set[str]) -> dict[str, str]:
        """The id of a stored memory for each content hash the user already has."""
        found: dict[str, str] = {}
        if not digests:
            return found
        flt = live.and_(MatchAny("content_hash", sorted(digests)))
        async for points in self._memory.points(flt):
            for point in points:
                found.setdefault(str(point.payload["content_hash"]), point.id)
        return found

    async def _last_turn(self, scope: Scope) -> MemoryRecord | None:
        """The turn of the scope's session with the highest position, deleted ones included
        (so a position is never given twice)."""
        owner = (scope.tenant, scope.user_id)
        kept = self._memory.derived.get(owner, _last_turn_key(scope.session_id), MemoryRecord)
        if kept is not None:
            return kept
        session = self._memory.scope_filter(
            scope,
            Tier.LONG_TERM,
            live_only=False,
            extra=[MatchValue("session_id", scope.session_id)],
        )
        last = await self._memory.records(session, 1, newest_first=True, order_by="position")
        return last[0] if last else None

    def _bytes_full(self, scope: Scope, new_bytes: int, size: int, max_bytes: int) -> QuotaExceeded:
        profile = self._quotas.profile_for(scope)
        return quota_full(
            f"long_term:{scope.user_id}",
            "long_term.max_bytes",
            max_bytes,
            f"long-term memory would exceed its size quota with this {new_bytes:,}-byte "
            f"memory ({size:,} bytes used, max: {max_bytes:,} bytes, quota profile "
            f"{profile.name!r}); delete old memories or upgrade your plan",
        )

    async def add_messages(self, items: Sequence[tuple[Scope, MemoryRecord]]) -> int:
        """The durable copies of conversation messages; ids are the messages' own, so a
        replay after a restart rewrites the same points instead of adding new ones.

        Copies count against the long-term quota like every other write: a user at the
        limit makes room by dropping their oldest message copies (never a memory they
        added themselves); a copy that still does not fit is not made (the message stays
        in its session) and a warning is logged. Returns how many new copies were stored."""
        by_user: dict[tuple[str, str], list[tuple[Scope, MemoryRecord]]] = {}
        for scope, message in items:
            by_user.setdefault((scope.tenant, scope.user_id), []).append((scope, message))
        stored = 0
        for (tenant, user_id), messages in by_user.items():
            user = Scope(tenant=tenant, user_id=user_id)
            room = self._room(user)
            # Placed under the user's lock, as an Add places its memories: a turn added
            # meanwhile is seen, and no two memories of a session share a position.
            async with self._locks(room.lock_key):
                stored += await self._copy(user, room, await self._copies(messages))
        return stored

    async def _copies(self, messages: Sequence[tuple[Scope, MemoryRecord]]) -> list[NewPoint]:
        """Each message's copy, after the turn it follows in its session; a copy made
        before (a replay, or another worker's) keeps its position."""
        memory = self._memory
        known = {
            p.id: int(p.payload.get("position") or 0)
            for p in await memory.points_by_id([m.id for _, m in messages])
        }
        placed: dict[str, MemoryRecord] = {}  # session -> the last copy placed here
        copies: list[NewPoint] = []
        for scope, message in messages:
            position = known.get(message.id, 0)
            before: MemoryRecord | None = None
            if not position and scope.session_id:
                before = placed.get(scope.session_id) or await self._last_turn(scope)
                position = (before.position if before is not None else 0) + 1
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
            if scope.session_id:
                placed[scope.session_id] = record
            copies.append(self._new_point(record, scope, before))
        return copies

    async def _copy(self, scope: Scope, room: Room, points: list[NewPoint]) -> int:
        """Write the copies of one user's messages, whose lock is held."""
        memory, ledger = self._memory, self._ledger
        ids = [p.record.id for p in points]
        known = {p.id for p in await memory.points_by_id(ids)}
        new = [p for p in points if canonical_id(p.record.id) not in known]
        skipped: list[NewPoint] = []
        purged = dropped = False
        while new:
            size = sum(utf8_len(p.record.content) for p in new)
            got = await ledger.reserve(scope, len(new), size, room.max_count, room.max_bytes)
            if got.granted:
                break
            if not purged:
                purged = True
                if await self._purge_expired(scope):
                    continue
            over = got.held.count + len(new) - room.max_count
            if not dropped and over > 0:
                dropped = True
                if await self._make_room_for_copies(scope, room, known, new, skipped, over):
                    continue
            # What still does not fit: the batch's oldest messages go without a copy.
            skipped.append(new.pop(0))
        if skipped:
            _copies_log.warning(
                "long-term memory of user %s/%s is full: %d conversation message(s) kept "
                "in their session without a durable copy",
                scope.tenant,
                scope.user_id,
                len(skipped),
            )
        left_out = {p.record.id for p in skipped}
        writing = [p for p in points if p.record.id not in left_out]
        await ledger.write(scope, [p.record for p in new], lambda: memory.insert(writing))
        return len(new)

    async def _make_room_for_copies(
        self,
        scope: Scope,
        room: Room,
        known: set[str],
        new: list[NewPoint],
        skipped: list[NewPoint],
        over: int,
    ) -> int:
        """Room is made from the oldest message copies only: the `over` oldest of the
        stored copies and the batch's new ones together. A new copy among them is not made
        (moved from `new` to `skipped`), so a batch that arrives late (copies are taken by
        several workers) never pushes out copies of later messages. Returns how many
        went."""
        copies = Filter(
            must=[room.live, MatchValue("kind", Kind.MESSAGE.value)],
            must_not=[HasId(sorted(known))] if known else [],
        )
        stored = await self._memory.records(copies, over, newest_first=False)
        candidates: list[tuple[float, int, MemoryRecord | NewPoint]] = [
            (r.created_at, 0, r) for r in stored
        ] + [(p.record.created_at, 1, p) for p in new]
        # Stable: at equal times a stored copy goes before a new one.
        candidates.sort(key=lambda c: (c[0], c[1]))
        going = [c[2] for c in candidates[:over]]
        drop = [g for g in going if isinstance(g, MemoryRecord)]
        late = {id(g) for g in going if isinstance(g, NewPoint)}
        if drop:
            await self._delete_records(scope, drop)
            self._memory.observer.deleted(self.tier, "quota", len(drop))
        skipped += [p for p in new if id(p) in late]
        new[:] = [p for p in new if id(p) not in late]
        return len(going)

    async def delete(self, lookup: Lookup) -> int:
        """Soft delete: hidden at once, purged by a later Prune (EXPIRED or ALL)."""
        found = await self._memory.by_ids(self._live(lookup.scope), lookup.ids)
        if found:
            patch = {"deleted": True, "updated_at": self._clock()}
            await self._memory.update_fields([r.id for r in found], patch)
            await self._forget(lookup.scope, found)
        return len(found)

    def check_restore(self, record: MemoryRecord) -> list[FieldViolation]:
        problems = check_vector_restore(record)
        if record.kind in self._foreign_kinds:
            problems.append(FieldViolation("kind", f"{record.kind.value} belongs to another tier"))
        return problems

    async def usage(self, scope: Scope) -> TierUsage:
        """Memories held (what the quota counts) and their content bytes: the counters."""
        held = await self._ledger.held(scope)
        count, size = held.count, held.bytes
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


def _last_turn_key(session_id: str) -> tuple[str, str]:
    """The key of the last turn placed in a session, in the cache of what is derived from
    the user's points."""
    return ("last turn", session_id)
