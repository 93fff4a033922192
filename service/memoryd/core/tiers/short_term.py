"""Short-term memory: the conversation window of one session (newest messages, TTL)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from memoryd.core.errors import FieldViolation
from memoryd.core.lifecycle.quotas import add_scope
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
    Role,
    Scope,
    Tier,
    TierUsage,
)
from memoryd.core.text import overlap_score, utf8_len, words
from memoryd.core.tiers.base import TierHits
from memoryd.core.tiers.hot_errors import hot_store_calls
from memoryd.core.tiers.hot_prune import HOT_STRATEGIES, metadata_matches, prune_hot
from memoryd.core.validation import Violations
from memoryd.settings import ShortTermSettings
from memoryd.stores.hot.port import HotStore, SessionKey, SessionMessage

# Called before a message is stored, to queue its durable long-term copy: a message the
# caller sees acknowledged always has its copy queued.
MessageListener = Callable[[Scope, MemoryRecord], Awaitable[None]]


def session_of(scope: Scope) -> SessionKey:
    return SessionKey(scope.tenant, scope.user_id, scope.session_id)


def scope_of(session: SessionKey) -> Scope:
    return Scope(session.tenant, session.user_id, session_id=session.session_id)


def _record(message: SessionMessage, scope: Scope, score: float = 0.0) -> MemoryRecord:
    return MemoryRecord(
        id=message.id,
        tier=Tier.SHORT_TERM,
        content=message.content,
        kind=Kind.MESSAGE,
        score=score,
        metadata=dict(message.metadata),
        created_at=message.created_at,
        updated_at=message.created_at,
        role=Role(message.role),
        session_id=scope.session_id,
    )


class ShortTermTier:
    tier = Tier.SHORT_TERM

    def __init__(
        self,
        store: HotStore,
        settings: ShortTermSettings,
        clock: Callable[[], float],
        listener: MessageListener | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._listener = listener

    def check_add(self, cmd: AddCommand, v: Violations) -> None:
        if not cmd.scope.session_id:
            v.add("scope.session_id", "is required for the short-term tier")
        if cmd.kind not in (Kind.UNSPECIFIED, Kind.MESSAGE):
            v.add("kind", "short-term entries are messages (leave kind unset or MESSAGE)")
        if utf8_len(cmd.content) > self._settings.max_bytes:
            v.add("content", f"is over the session limit of {self._settings.max_bytes:,} bytes")

    def can_retrieve(self, scope: Scope) -> bool:
        return bool(scope.session_id)

    async def add(self, cmd: AddCommand) -> AddResult:
        role = Role.USER if cmd.role is Role.UNSPECIFIED else cmd.role
        message = SessionMessage(
            id=str(uuid.uuid4()),
            content=cmd.content,
            role=role.value,
            created_at=self._clock(),
            size=utf8_len(cmd.content),
            metadata=dict(cmd.metadata),
        )
        if self._listener is not None:
            await self._listener(cmd.scope, _record(message, cmd.scope))
        with hot_store_calls():
            outcome = await self._store.append_message(
                session_of(cmd.scope),
                message,
                self._settings.max_messages,
                self._settings.max_bytes,
                self._settings.ttl_seconds,
            )
        return AddResult(
            memory_id=message.id,
            operation=Operation.ADD,
            tier=Tier.SHORT_TERM,
            quota_remaining=max(0, self._settings.max_messages - outcome.count),
        )

    async def retrieve(self, query: RetrieveQuery, top_k: int) -> TierHits:
        with hot_store_calls():
            messages = await self._store.list_messages(session_of(query.scope))
        wanted = words(query.query)
        records = [
            _record(m, query.scope, overlap_score(wanted, m.content))
            for m in messages
            if metadata_matches(m.metadata, query.filters)
        ]
        if query.kinds and Kind.MESSAGE not in query.kinds:
            records = []
        # Messages sharing words with the query first, then newest first.
        records.sort(key=lambda r: (r.score, r.created_at), reverse=True)
        return TierHits(items=records[:top_k], total=len(records))

    async def messages(self, scope: Scope) -> list[MemoryRecord]:
        """The session's messages, oldest first (what EndSession reads)."""
        with hot_store_calls():
            messages = await self._store.list_messages(session_of(scope))
        return [_record(m, scope) for m in messages]

    async def get(self, lookup: Lookup) -> GetResult:
        with hot_store_calls():
            messages = await self._store.list_messages(session_of(lookup.scope))
        wanted = set(lookup.ids)
        found = [_record(m, lookup.scope) for m in messages if m.id in wanted]
        found_ids = {r.id for r in found}
        return GetResult(items=found, missing=[i for i in lookup.ids if i not in found_ids])

    async def delete(self, lookup: Lookup) -> int:
        with hot_store_calls():
            return await self._store.delete_messages(session_of(lookup.scope), lookup.ids)

    async def prune(self, cmd: PruneCommand) -> int:
        # Messages otherwise leave by TTL and trimming: nothing else ages out of a session.
        if cmd.strategy not in HOT_STRATEGIES:
            return 0
        if not cmd.scope.session_id:
            # No session named (an erasure, or a prune of every tier): every session.
            return sum(
                [
                    await self.prune(dataclasses.replace(cmd, scope=scope_of(s)))
                    for s in await self._sessions(cmd.scope)
                ]
            )
        session = session_of(cmd.scope)
        return await prune_hot(
            cmd,
            listing=lambda: self._store.list_messages(session),
            metadata_of=lambda m: m.metadata,
            name_of=lambda m: m.id,
            clear=lambda: self._store.clear_session(session),
            delete=lambda ids: self._store.delete_messages(session, ids),
        )

    async def live_scopes(self, scope: Scope) -> list[Scope]:
        """The user's sessions holding a window (for operators to pick one)."""
        return [scope_of(s) for s in await self._sessions(scope)]

    async def _sessions(self, scope: Scope) -> list[SessionKey]:
        with hot_store_calls():
            return await self._store.list_sessions(scope.tenant, scope.user_id)

    async def export_count(self, scope: Scope) -> int:
        with hot_store_calls():
            return sum(
                [len(await self._store.list_messages(s)) for s in await self._sessions(scope)]
            )

    async def export_pages(self, scope: Scope) -> AsyncIterator[list[MemoryRecord]]:
        for session in await self._sessions(scope):
            with hot_store_calls():
                messages = await self._store.list_messages(session)
            if messages:
                yield [_record(m, scope_of(session)) for m in messages]

    def check_restore(self, record: MemoryRecord) -> list[FieldViolation]:
        problems = []
        if not record.session_id:
            problems.append(FieldViolation("session_id", "is required for short-term items"))
        if record.kind not in (Kind.UNSPECIFIED, Kind.MESSAGE):
            problems.append(FieldViolation("kind", "short-term items are messages"))
        if utf8_len(record.content) > self._settings.max_bytes:
            problems.append(
                FieldViolation("content", f"is over {self._settings.max_bytes:,} bytes per session")
            )
        return problems

    async def check_room(
        self, scope: Scope, records: Sequence[MemoryRecord], auto_prune: bool
    ) -> None:
        return None  # a session keeps its newest messages: older ones are trimmed, not refused

    async def restore(
        self, scope: Scope, records: Sequence[MemoryRecord], auto_prune: bool = False
    ) -> ImportResult:
        """Messages are appended to their session, oldest first, with their ids and times.
        No durable long-term copy is queued: an export carries those copies itself."""
        result = ImportResult()
        by_session: dict[SessionKey, list[MemoryRecord]] = {}
        for r in records:
            by_session.setdefault(SessionKey(scope.tenant, scope.user_id, r.session_id), []).append(
                r
            )
        s = self._settings
        for session, items in by_session.items():
            with hot_store_calls():
                existing = {m.id for m in await self._store.list_messages(session)}
            for r in sorted(items, key=lambda r: r.created_at):
                if r.id in existing:
                    result.skipped_count += 1
                    continue
                role = Role.USER if r.role is Role.UNSPECIFIED else r.role
                message = SessionMessage(
                    id=r.id,
                    content=r.content,
                    role=role.value,
                    created_at=r.created_at,
                    size=utf8_len(r.content),
                    metadata=dict(r.metadata),
                )
                with hot_store_calls():
                    await self._store.append_message(
                        session, message, s.max_messages, s.max_bytes, s.ttl_seconds
                    )
                existing.add(r.id)
                result.imported_count += 1
        return result

    async def usage(self, scope: Scope) -> TierUsage:
        """Totals over the user's live sessions; the limits (and percent) are per session,
        so percent is that of the fullest session."""
        s = self._settings
        usage = TierUsage(Tier.SHORT_TERM, max_count=s.max_messages, max_bytes=s.max_bytes)
        for session in await self._sessions(scope):
            with hot_store_calls():
                messages = await self._store.list_messages(session)
            add_scope(usage, len(messages), sum(x.size for x in messages))
        return usage
