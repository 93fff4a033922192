"""The engine: checks requests, routes them to tiers, merges multi-tier results."""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import AsyncIterator, Mapping, Sequence

from memoryd.core.errors import FieldViolation, InvalidArgument, Unimplemented
from memoryd.core.lifecycle.cold_archive import ColdArchive
from memoryd.core.lifecycle.erasure import Erasure
from memoryd.core.lifecycle.usage import usage_report
from memoryd.core.models import (
    AddCommand,
    AddResult,
    ExportQuery,
    GetResult,
    ImportResult,
    Lookup,
    MemoryRecord,
    PruneCommand,
    PruneResult,
    PruneStrategy,
    RenderQuery,
    RetrieveQuery,
    RetrieveResult,
    Scope,
    Tier,
    UsageReport,
)
from memoryd.core.retrieval.render_context import RenderedContext, render_memory_block
from memoryd.core.retrieval.token_budget import TokenCounter, fit_to_budget
from memoryd.core.text import utf8_len
from memoryd.core.tiers.base import TierHandler
from memoryd.core.tiers.registry import TIERS, spec
from memoryd.core.validation import (
    Violations,
    check_batch,
    check_content,
    check_fraction,
    check_metadata,
    check_scope,
    resolve_top_k,
)
from memoryd.settings import LimitSettings, RetrievalSettings, UsageSettings

# An invalid import is refused naming at most this many of its bad items.
_MAX_REPORTED_ITEMS = 20


def _body_problems(tier: Tier, item: AddCommand | MemoryRecord) -> list[FieldViolation]:
    """A structured body (an episode, a JSON document) is only for the tier that owns it."""
    return [
        FieldViolation(s.body_field, f"is only for the {s.tier.value} tier")
        for s in TIERS.values()
        if s.body_field and s.tier is not tier and getattr(item, s.body_field)
    ]


class MemoryEngine:
    def __init__(
        self,
        tiers: Mapping[Tier, TierHandler],
        limits: LimitSettings,
        retrieval: RetrievalSettings,
        counter: TokenCounter,
        usage: UsageSettings | None = None,
        archive: ColdArchive | None = None,
        erasure: Erasure | None = None,
    ) -> None:
        self._tiers = dict(tiers)
        self._erasure = erasure
        self._archive = archive
        self._limits = limits
        self._retrieval = retrieval
        self._counter = counter
        self._usage = usage or UsageSettings()

    def _tier(self, tier: Tier) -> TierHandler:
        handler = self._tiers.get(tier)
        if handler is None:
            raise Unimplemented(f"the {tier.value} tier")
        return handler

    @staticmethod
    def _check_tier_scope(v: Violations, tier: Tier, scope: Scope) -> None:
        needs = spec(tier).scope_field
        if needs and not getattr(scope, needs):
            v.add(f"scope.{needs}", f"is required for the {spec(tier).title.split()[0]} tier")

    async def add(self, cmd: AddCommand) -> AddResult:
        v = Violations()
        check_scope(v, cmd.scope, self._limits)
        if not spec(cmd.tier).body_field:
            check_content(v, cmd.content, self._limits)
        for problem in _body_problems(cmd.tier, cmd):
            v.add(problem.field, problem.description)
        check_metadata(v, "metadata", cmd.metadata, self._limits)
        check_fraction(v, "importance", cmd.importance)
        handler = self._tier(cmd.tier)
        handler.check_add(cmd, v)
        v.raise_if_any()
        return await handler.add(cmd)

    def _resolve_budget(self, v: Violations, budget: int | None) -> int:
        if budget is None:
            return self._retrieval.default_token_budget
        if not 1 <= budget <= self._retrieval.max_token_budget:
            v.add("token_budget", f"must be between 1 and {self._retrieval.max_token_budget:,}")
        return budget

    async def retrieve(self, query: RetrieveQuery) -> RetrieveResult:
        started = time.perf_counter()
        v = Violations()
        check_scope(v, query.scope, self._limits)
        top_k = resolve_top_k(v, query.top_k, self._limits)
        budget = self._resolve_budget(v, query.token_budget)
        check_metadata(v, "filters", query.filters, self._limits)
        check_fraction(v, "min_score", query.min_score)
        self._check_context_window(v, query.context_window)
        for tier in query.tiers:
            self._check_tier_scope(v, tier, query.scope)
        v.raise_if_any()
        tiers = list(dict.fromkeys(query.tiers)) or [
            t for t, h in self._tiers.items() if h.can_retrieve(query.scope)
        ]
        items, total, embedding_ms = await self._search(query, tiers, top_k)
        fitted = fit_to_budget(items, budget, self._counter)
        return RetrieveResult(
            items=fitted.items,
            total_count=total,
            embedding_ms=embedding_ms,
            retrieval_ms=(time.perf_counter() - started) * 1000 - embedding_ms,
            token_count=fitted.token_count,
            truncated=fitted.truncated,
        )

    def _check_context_window(self, v: Violations, window: int) -> None:
        if not 0 <= window <= self._retrieval.max_context_window:
            v.add(
                "context_window",
                f"must be between 0 and {self._retrieval.max_context_window} turns",
            )

    async def _search(
        self, query: RetrieveQuery, tiers: Sequence[Tier], top_k: int
    ) -> tuple[list[MemoryRecord], int, float]:
        """Every tier's hits: working first, then the rest by score, each id once."""
        handlers = [self._tier(t) for t in tiers]
        working: list[MemoryRecord] = []
        ranked: list[list[MemoryRecord]] = []
        total = 0
        embedding_ms = 0.0
        # Tiers live in different stores: ask them all at once.
        found = await asyncio.gather(*(h.retrieve(query, top_k) for h in handlers))
        for handler, hits in zip(handlers, found, strict=True):
            total += hits.total
            embedding_ms += hits.embedding_ms
            if spec(handler.tier).first_in_retrieval:
                working.extend(hits.items)
            else:
                ranked.append(hits.items)
        # Working memory is the current task's state: always first, then by relevance. The
        # merge keeps each tier's own order (which may set a near-repeat back, see
        # vector_memory.diversify) and takes whichever tier's next item scores higher.
        others = list(heapq.merge(*ranked, key=lambda r: -r.score))
        # A message can be both in its session and (as its durable copy) in long-term
        # memory, under one id: return it once, from the tier that ranked it first.
        unique = list({r.id: r for r in reversed(working + others)}.values())[::-1]
        return unique, total, embedding_ms

    async def render_context(self, request: RenderQuery) -> RenderedContext:
        """Persona facts, then the memories relevant to the query, as a <memory> block."""
        v = Violations()
        check_scope(v, request.scope, self._limits)
        top_k = resolve_top_k(v, request.top_k, self._limits)
        budget = self._resolve_budget(v, request.token_budget)
        check_fraction(v, "min_score", request.min_score)
        self._check_context_window(v, request.context_window)
        for tier in request.tiers:
            self._check_tier_scope(v, tier, request.scope)
        v.raise_if_any()
        header: list[MemoryRecord] = []
        listing = RetrieveQuery(scope=request.scope)
        for tier in self._tiers:
            if spec(tier).render_header:
                header += (await self._tier(tier).retrieve(listing, top_k)).items
        memories: list[MemoryRecord] = []
        if request.query.strip():
            tiers: list[Tier] = [t for t in request.tiers if not spec(t).render_header] or [
                t
                for t, h in self._tiers.items()
                if not spec(t).render_header and h.can_retrieve(request.scope)
            ]
            query = RetrieveQuery(
                scope=request.scope,
                query=request.query,
                tiers=tiers,
                top_k=top_k,
                min_score=request.min_score,
                context_window=request.context_window,
            )
            found, _, _ = await self._search(query, tiers, top_k)
            # Hot tiers list everything of the task/session; only what the query touches
            # belongs in a prompt.
            memories = [m for m in found if m.score > 0]
        return render_memory_block(header, memories, budget, self._counter)

    def _check_lookup(self, lookup: Lookup) -> TierHandler:
        v = Violations()
        check_scope(v, lookup.scope, self._limits)
        check_batch(v, lookup.ids, lookup.keys, self._limits)
        if lookup.keys and not spec(lookup.tier).keyed:
            keyed = " and ".join(s.tier.value for s in TIERS.values() if s.keyed)
            v.add("keys", f"only the {keyed} tiers are addressed by key")
        self._check_tier_scope(v, lookup.tier, lookup.scope)
        v.raise_if_any()
        return self._tier(lookup.tier)

    async def get(self, lookup: Lookup) -> GetResult:
        return await self._check_lookup(lookup).get(lookup)

    async def delete(self, lookup: Lookup) -> int:
        return await self._check_lookup(lookup).delete(lookup)

    async def prune(self, cmd: PruneCommand, requested_by: str = "") -> PruneResult:
        """Prune the named tiers; ALL with no tier named erases the user everywhere
        (`requested_by`, the caller's subject, goes to the audit log)."""
        v = Violations()
        check_scope(v, cmd.scope, self._limits)
        check_metadata(v, "filters", cmd.filters, self._limits)
        if cmd.strategy is PruneStrategy.OLDEST_PERCENT and not 0 < cmd.percent <= 100:
            v.add("percent", "must be in (0, 100] for OLDEST_PERCENT")
        if cmd.strategy is PruneStrategy.ARCHIVE_OLDER_THAN and cmd.older_than_days <= 0:
            v.add("older_than_days", "must be positive for ARCHIVE_OLDER_THAN")
        if cmd.strategy is PruneStrategy.BY_FILTER and not cmd.filters:
            v.add("filters", "BY_FILTER needs at least one metadata filter")
        for tier in cmd.tiers:
            self._check_tier_scope(v, tier, cmd.scope)
        v.raise_if_any()
        if not cmd.tiers:
            if cmd.strategy is not PruneStrategy.ALL:
                raise Unimplemented(f"{cmd.strategy.value} on every tier at once (name the tiers)")
            if self._erasure is None:
                raise Unimplemented("erasing a user (this server has no erasure configured)")
            return await self._erasure.erase(cmd, requested_by)
        result = PruneResult(dry_run=cmd.dry_run)
        for tier in dict.fromkeys(cmd.tiers):
            count = await self._tier(tier).prune(cmd)
            result.per_tier[tier] = count
            if cmd.strategy is PruneStrategy.ARCHIVE_OLDER_THAN:
                result.archived_count += count
            else:
                result.deleted_count += count
        return result

    def _export_tiers(self, query: ExportQuery) -> list[Tier]:
        v = Violations()
        check_scope(v, query.scope, self._limits)
        v.raise_if_any()
        tiers = list(dict.fromkeys(query.tiers)) or [t for t in self._tiers if spec(t).exported]
        return [self._tier(t).tier for t in tiers]

    async def export_counts(self, query: ExportQuery) -> dict[Tier, int]:
        """Items per tier an export of the user holds (for its header), archived ones
        included when asked."""
        counts: dict[Tier, int] = {}
        for tier in self._export_tiers(query):
            counts[tier] = await self._tier(tier).export_count(query.scope)
            if query.include_archived and self._archive is not None:
                counts[tier] += await self._archive.count(query.scope, tier)
        return counts

    async def export_records(self, query: ExportQuery) -> AsyncIterator[MemoryRecord]:
        """Every item of the user in the asked tiers, read from the stores page by page;
        with `include_archived`, then each tier's archived items (marked `archived`)."""
        tiers = self._export_tiers(query)
        for tier in tiers:
            async for page in self._tier(tier).export_pages(query.scope):
                for record in page:
                    yield record
        if query.include_archived and self._archive is not None:
            for tier in tiers:
                async for record in self._archive.records(query.scope, tier):
                    yield record

    @property
    def max_import_items(self) -> int:
        return self._limits.max_import_items

    def check_import_scope(self, scope: Scope) -> None:
        v = Violations()
        check_scope(v, scope, self._limits)
        v.raise_if_any()

    def _check_item(self, record: MemoryRecord) -> list[FieldViolation]:
        handler = self._tiers.get(record.tier)
        if handler is None:
            return [FieldViolation("tier", f"this server does not store {record.tier.value} items")]
        problems = handler.check_restore(record)
        problems += _body_problems(record.tier, record)
        if not record.id or utf8_len(record.id) > self._limits.max_id_bytes:
            problems.append(FieldViolation("id", f"must be 1..{self._limits.max_id_bytes} bytes"))
        if spec(record.tier).body_field:
            pass  # the tier checked the body; the content is derived from it on restore
        elif not record.content.strip():
            problems.append(FieldViolation("content", "must not be empty"))
        elif utf8_len(record.content) > self._limits.max_content_bytes:
            problems.append(
                FieldViolation("content", f"is over {self._limits.max_content_bytes:,} bytes")
            )
        if not 0.0 <= record.importance <= 1.0:
            problems.append(FieldViolation("importance", "must be between 0 and 1"))
        v = Violations()
        check_metadata(v, "metadata", record.metadata, self._limits)
        try:
            v.raise_if_any()
        except InvalidArgument as exc:
            problems += exc.violations
        return problems

    async def import_records(self, scope: Scope, records: Sequence[MemoryRecord]) -> ImportResult:
        """Validate every item first (an invalid import writes nothing), then restore each
        tier's items under `scope`'s user: ids already there are skipped."""
        self.check_import_scope(scope)
        if len(records) > self._limits.max_import_items:
            raise InvalidArgument.of(
                "item", f"at most {self._limits.max_import_items:,} items per import"
            )
        bad: list[FieldViolation] = []
        bad_items = 0
        for i, record in enumerate(records):
            problems = self._check_item(record)
            if problems:
                bad += [
                    FieldViolation(f"item.{p.field}", f"item {i}: {p.description}")
                    for p in problems
                ]
                bad_items += 1
                if bad_items >= _MAX_REPORTED_ITEMS:
                    break
        if bad:
            raise InvalidArgument(bad)
        by_tier: dict[Tier, list[MemoryRecord]] = {}
        for record in records:
            by_tier.setdefault(record.tier, []).append(record)
        result = ImportResult()
        for tier, items in by_tier.items():
            done = await self._tier(tier).restore(scope, items)
            result.imported_count += done.imported_count
            result.skipped_count += done.skipped_count
        return result

    async def usage(self, scope: Scope) -> UsageReport:
        v = Violations()
        check_scope(v, scope, self._limits)
        v.raise_if_any()
        tiers = [
            await handler.usage(scope)
            for tier, handler in self._tiers.items()
            if spec(tier).counted_in_usage
        ]
        return usage_report(tiers, self._usage)
