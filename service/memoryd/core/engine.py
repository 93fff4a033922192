"""The engine: checks requests, routes them to tiers, merges multi-tier results."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from memoryd.core.errors import Unimplemented
from memoryd.core.models import (
    AddCommand,
    AddResult,
    GetResult,
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
)
from memoryd.core.render_context import RenderedContext, render_memory_block
from memoryd.core.tier import TierHandler
from memoryd.core.token_budget import TokenCounter, fit_to_budget
from memoryd.core.validation import (
    Violations,
    check_batch,
    check_content,
    check_fraction,
    check_metadata,
    check_scope,
    resolve_top_k,
)
from memoryd.settings import LimitSettings, RetrievalSettings

# Tiers addressed by key as well as by id.
_KEYED_TIERS = frozenset({Tier.WORKING, Tier.PERSONA})


class MemoryEngine:
    def __init__(
        self,
        tiers: Mapping[Tier, TierHandler],
        limits: LimitSettings,
        retrieval: RetrievalSettings,
        counter: TokenCounter,
    ) -> None:
        self._tiers = dict(tiers)
        self._limits = limits
        self._retrieval = retrieval
        self._counter = counter

    def _tier(self, tier: Tier) -> TierHandler:
        handler = self._tiers.get(tier)
        if handler is None:
            raise Unimplemented(f"the {tier.value} tier")
        return handler

    @staticmethod
    def _check_tier_scope(v: Violations, tier: Tier, scope: Scope) -> None:
        if tier is Tier.WORKING and not scope.task_id:
            v.add("scope.task_id", "is required for the working tier")
        if tier is Tier.SHORT_TERM and not scope.session_id:
            v.add("scope.session_id", "is required for the short-term tier")

    async def add(self, cmd: AddCommand) -> AddResult:
        v = Violations()
        check_scope(v, cmd.scope, self._limits)
        check_content(v, cmd.content, self._limits)
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

    async def _search(
        self, query: RetrieveQuery, tiers: Sequence[Tier], top_k: int
    ) -> tuple[list[MemoryRecord], int, float]:
        """Every tier's hits: working first, then the rest by score, each id once."""
        handlers = [self._tier(t) for t in tiers]
        working: list[MemoryRecord] = []
        others: list[MemoryRecord] = []
        total = 0
        embedding_ms = 0.0
        for handler in handlers:
            hits = await handler.retrieve(query, top_k)
            total += hits.total
            embedding_ms += hits.embedding_ms
            (working if handler.tier is Tier.WORKING else others).extend(hits.items)
        # Working memory is the current task's state: always first, then by relevance.
        others.sort(key=lambda r: r.score, reverse=True)
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
        for tier in request.tiers:
            self._check_tier_scope(v, tier, request.scope)
        v.raise_if_any()
        persona: list[MemoryRecord] = []
        if Tier.PERSONA in self._tiers:
            listing = RetrieveQuery(scope=request.scope)
            persona = (await self._tier(Tier.PERSONA).retrieve(listing, top_k)).items
        memories: list[MemoryRecord] = []
        if request.query.strip():
            tiers: list[Tier] = [t for t in request.tiers if t is not Tier.PERSONA] or [
                t
                for t, h in self._tiers.items()
                if t is not Tier.PERSONA and h.can_retrieve(request.scope)
            ]
            query = RetrieveQuery(
                scope=request.scope,
                query=request.query,
                tiers=tiers,
                top_k=top_k,
                min_score=request.min_score,
            )
            found, _, _ = await self._search(query, tiers, top_k)
            # Hot tiers list everything of the task/session; only what the query touches
            # belongs in a prompt.
            memories = [m for m in found if m.score > 0]
        return render_memory_block(persona, memories, budget, self._counter)

    def _check_lookup(self, lookup: Lookup) -> TierHandler:
        v = Violations()
        check_scope(v, lookup.scope, self._limits)
        check_batch(v, lookup.ids, lookup.keys, self._limits)
        if lookup.keys and lookup.tier not in _KEYED_TIERS:
            v.add("keys", "only the working and persona tiers are addressed by key")
        self._check_tier_scope(v, lookup.tier, lookup.scope)
        v.raise_if_any()
        return self._tier(lookup.tier)

    async def get(self, lookup: Lookup) -> GetResult:
        return await self._check_lookup(lookup).get(lookup)

    async def delete(self, lookup: Lookup) -> int:
        return await self._check_lookup(lookup).delete(lookup)

    async def prune(self, cmd: PruneCommand) -> PruneResult:
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
            raise Unimplemented("pruning every tier of a user at once (name the tiers)")
        result = PruneResult(dry_run=cmd.dry_run)
        for tier in dict.fromkeys(cmd.tiers):
            count = await self._tier(tier).prune(cmd)
            result.per_tier[tier] = count
            result.deleted_count += count
        return result
