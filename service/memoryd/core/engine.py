"""The engine: checks requests, routes them to tiers, merges multi-tier results."""

from __future__ import annotations

import time
from collections.abc import Mapping

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
    RetrieveQuery,
    RetrieveResult,
    Scope,
    Tier,
)
from memoryd.core.tier import TierHandler
from memoryd.core.validation import (
    Violations,
    check_batch,
    check_content,
    check_fraction,
    check_metadata,
    check_scope,
    resolve_top_k,
)
from memoryd.settings import LimitSettings

# Tiers addressed by key as well as by id.
_KEYED_TIERS = frozenset({Tier.WORKING, Tier.PERSONA})


class MemoryEngine:
    def __init__(self, tiers: Mapping[Tier, TierHandler], limits: LimitSettings) -> None:
        self._tiers = dict(tiers)
        self._limits = limits

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

    async def retrieve(self, query: RetrieveQuery) -> RetrieveResult:
        started = time.perf_counter()
        v = Violations()
        check_scope(v, query.scope, self._limits)
        top_k = resolve_top_k(v, query.top_k, self._limits)
        check_metadata(v, "filters", query.filters, self._limits)
        check_fraction(v, "min_score", query.min_score)
        tiers = list(dict.fromkeys(query.tiers))
        for tier in tiers:
            self._check_tier_scope(v, tier, query.scope)
        v.raise_if_any()
        if not tiers:
            tiers = [t for t, h in self._tiers.items() if h.can_retrieve(query.scope)]
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
        return RetrieveResult(
            items=unique,
            total_count=total,
            embedding_ms=embedding_ms,
            retrieval_ms=(time.perf_counter() - started) * 1000 - embedding_ms,
        )

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
