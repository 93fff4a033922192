"""Structured memory: a user's JSON documents (orders, tickets, profiles...), searched by
meaning and filtered by field.

A document is kept whole (`document_json`) and as readable text (`content`: one `path:
value` line per leaf), which is what is embedded and keyword-searched. Retrieve and
Prune `filters` match a document's top-level scalar fields (string-compared, see
`core.bodies`) as well as its metadata: each filter entry is met by either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from memoryd.core.errors import FieldViolation, QuotaExceeded
from memoryd.core.lifecycle.cold_archive import ColdArchive
from memoryd.core.lifecycle.quotas import QuotaProfiles, quota_full, quota_percent
from memoryd.core.memory.payload import content_hash, embed_text_of, to_payload
from memoryd.core.memory.vector_memory import NewPoint, VectorMemory
from memoryd.core.models import (
    AddCommand,
    AddResult,
    Kind,
    MemoryRecord,
    Operation,
    Scope,
    Tier,
    TierUsage,
)
from memoryd.core.text import utf8_len
from memoryd.core.tiers.archiving import ArchivingVectorTier
from memoryd.core.tiers.bodies import (
    document_problems,
    field_filter_key,
    flatten_document,
    parse_document,
)
from memoryd.core.tiers.vector_tier import Room
from memoryd.core.validation import Violations
from memoryd.settings import LongTermSettings, QuotaSettings, StructuredSettings
from memoryd.stores.usage.port import UsageCounters
from memoryd.stores.vectors.port import Condition, Filter, MatchValue, field_path


class StructuredTier(ArchivingVectorTier):
    tier = Tier.STRUCTURED

    def __init__(
        self,
        memory: VectorMemory,
        settings: StructuredSettings,
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
        # The limits are the user's quota profile's (unset there: `settings`').
        self._quotas = quotas or QuotaProfiles(
            QuotaSettings(), LongTermSettings(), structured=settings
        )
        self._max_content_bytes = max_content_bytes

    def check_add(self, cmd: AddCommand, v: Violations) -> None:
        for problem in document_problems(cmd.document_json, self._max_content_bytes):
            v.add("document_json", problem)
        if cmd.content:
            v.add("content", "must be empty for the structured tier: the document is the content")
        if cmd.kind not in (Kind.UNSPECIFIED, Kind.DOCUMENT):
            v.add("kind", "must be DOCUMENT (or unset) for the structured tier")
        if cmd.expires_at is not None and cmd.expires_at <= self._clock():
            v.add("expires_at", "must be in the future")

    def _filter_conditions(self, filters: Mapping[str, str]) -> list[Condition]:
        """Each entry matches the document's top-level field or the metadata entry."""
        return [
            Filter(
                should=[
                    MatchValue(field_path("metadata", k), v),
                    MatchValue(field_filter_key(k), v),
                ]
            )
            for k, v in filters.items()
        ]

    def _full(self, scope: Scope, what: str, limit: int, message: str) -> QuotaExceeded:
        return quota_full(
            f"structured:{scope.user_id}",
            f"structured.{what}",
            limit,
            f"{message}; delete old documents or upgrade your plan",
        )

    def _room(self, scope: Scope) -> Room:
        """The user's structured quota: live documents, and their JSON bytes."""
        limits = self._quotas.profile_for(scope).limits
        limit, max_bytes = limits.structured_max_documents, limits.structured_max_bytes
        return Room(
            lock_key=(scope.tenant, scope.user_id),
            live=self._live(scope),
            max_count=limit,
            scope=scope,
            count_full=lambda: self._full(
                scope,
                "max_documents",
                limit,
                f"structured memory is full (max: {limit:,} documents)",
            ),
            max_bytes=max_bytes,
            bytes_full=lambda new_bytes, used: self._full(
                scope,
                "max_bytes",
                max_bytes,
                f"structured memory would exceed its size quota with {new_bytes:,} more bytes "
                f"({used:,} bytes used, max: {max_bytes:,} bytes)",
            ),
        )

    def _rooms(
        self, scope: Scope, records: Sequence[MemoryRecord]
    ) -> list[tuple[Room, list[MemoryRecord]]]:
        return [(self._room(scope), list(records))] if records else []

    async def add(self, cmd: AddCommand) -> AddResult:
        scope = cmd.scope
        document = parse_document(cmd.document_json)  # check_add made sure it parses
        room = self._room(scope)
        max_bytes = room.max_bytes
        new_bytes = utf8_len(cmd.document_json)

        def too_big(new_bytes: int, used: int) -> QuotaExceeded:
            # Auto-prune frees room by count only; a byte overflow is always refused.
            return self._full(
                scope,
                "max_bytes",
                max_bytes,
                f"structured memory would exceed its size quota with this {new_bytes:,}-"
                f"byte document ({used:,} bytes used, max: {max_bytes:,} bytes)",
            )

        async with self._locks(room.lock_key):
            hold = await self._hold_one(room, new_bytes, cmd.auto_prune, too_big=too_big)
            now = self._clock()
            record = cmd.new_record(
                flatten_document(document),
                Kind.DOCUMENT,
                now,
                cmd.expires_at,
                document_json=cmd.document_json,
            )
            digest = content_hash(scope, Tier.STRUCTURED, "", record.content)
            payload = to_payload(record, scope, digest, self._compress_over_bytes)
            point = NewPoint(record, payload, embed_text_of(payload))
            await hold.write([record.id], lambda: self._memory.insert([point], fresh=True))
        operation = Operation.ADD_WITH_PRUNE if hold.pruned else Operation.ADD
        held = hold.held.count + 1
        return AddResult(record.id, operation, Tier.STRUCTURED, max(0, room.max_count - held))

    def check_restore(self, record: MemoryRecord) -> list[FieldViolation]:
        problems = self._check_vector_restore(record)
        problems += [
            FieldViolation("document_json", p)
            for p in document_problems(record.document_json, self._max_content_bytes)
        ]
        if record.kind is not Kind.DOCUMENT:
            problems.append(FieldViolation("kind", "must be DOCUMENT for structured items"))
        return problems

    def _content_of(self, record: MemoryRecord) -> str:
        return flatten_document(parse_document(record.document_json))

    async def usage(self, scope: Scope) -> TierUsage:
        """Documents held (what the quota counts) and their JSON bytes: the counters."""
        held = await self._ledger.held(scope)
        count, size = held.count, held.bytes
        limits = self._quotas.profile_for(scope).limits
        max_count, max_bytes = limits.structured_max_documents, limits.structured_max_bytes
        return TierUsage(
            Tier.STRUCTURED,
            count=count,
            bytes=size,
            max_count=max_count,
            max_bytes=max_bytes,
            percent=quota_percent(count, max_count, size, max_bytes),
        )
