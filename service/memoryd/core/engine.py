"""The engine: checks requests, routes them to tiers, merges multi-tier results."""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import TypeVar

from memoryd.core.errors import (
    FieldViolation,
    InvalidArgument,
    MemorydError,
    QuotaExceeded,
    StoreUnavailable,
    Unimplemented,
)
from memoryd.core.lifecycle.browse import Browser
from memoryd.core.lifecycle.cold_archive import ColdArchive
from memoryd.core.lifecycle.erasure import Erasure
from memoryd.core.lifecycle.usage import usage_report
from memoryd.core.models import (
    AddCommand,
    AddResult,
    EndSessionCommand,
    EndSessionResult,
    ExportQuery,
    GetResult,
    ImportResult,
    Lookup,
    MemoriesPage,
    MemoriesQuery,
    MemoryRecord,
    Origin,
    PruneCommand,
    PruneResult,
    PruneStrategy,
    RenderQuery,
    RetrieveQuery,
    RetrieveResult,
    Scope,
    Tier,
    UsageReport,
    UsersPage,
    UsersQuery,
)
from memoryd.core.observe import NullObserver, Observer, text_sha256, user_hash
from memoryd.core.retrieval.render_context import (
    ITEM_TOKENS,
    RenderedContext,
    render_memory_block,
)
from memoryd.core.retrieval.token_budget import TokenCounter, fit_to_budget
from memoryd.core.sessions.sessions import Sessions
from memoryd.core.text import utf8_len
from memoryd.core.tiers.base import BatchAdder, TierHandler, TierHits
from memoryd.core.tiers.registry import TIERS, spec
from memoryd.core.validation import (
    Violations,
    check_batch,
    check_content,
    check_filters,
    check_fraction,
    check_metadata,
    check_scope,
    resolve_top_k,
)
from memoryd.settings import LimitSettings, RetrievalSettings, UsageSettings

# An invalid import is refused naming at most this many of its bad items.
_MAX_REPORTED_ITEMS = 20

# The retrieval log (FR-008): one line per Retrieve and RenderContext.
retrieval_log = logging.getLogger("memoryd.retrieval")

T = TypeVar("T")


async def _each(calls: Mapping[Tier, Awaitable[T]]) -> list[tuple[Tier, T | BaseException]]:
    """Every call's result or error, in order (one at a time: they may share a store)."""
    results: list[tuple[Tier, T | BaseException]] = []
    for tier, call in calls.items():
        try:
            results.append((tier, await call))
        except Exception as exc:
            results.append((tier, exc))
    return results


def _reachable(
    answers: Sequence[tuple[Tier, T | BaseException]], skipped: list[Tier] | None
) -> dict[Tier, T]:
    """Each tier's answer. A tier whose store is down (StoreUnavailable) is left out and
    named in `skipped` while some other tier answered; with `skipped` None, or with no
    tier answering, the first failure is raised (as is any other error)."""
    for _, answer in answers:
        if isinstance(answer, BaseException) and not isinstance(answer, StoreUnavailable):
            raise answer
    down = [(t, a) for t, a in answers if isinstance(a, StoreUnavailable)]
    if down and (skipped is None or len(down) == len(answers)):
        raise down[0][1]
    if skipped is not None:
        skipped += [t for t, _ in down]
    return {t: a for t, a in answers if not isinstance(a, BaseException)}


def _body_problems(tier: Tier, item: AddCommand | MemoryRecord) -> list[FieldViolation]:
    """A structured body (an episode, a JSON document) is only for the tier that owns it."""
    return [
        FieldViolation(body, f"is only for the {s.tier.value} tier")
        for s in TIERS.values()
        for body in s.body_fields
        if s.tier is not tier and getattr(item, body)
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
        sessions: Sessions | None = None,
        observer: Observer | None = None,
        browser: Browser | None = None,
    ) -> None:
        self._tiers = dict(tiers)
        # ListUsers / ListMemories; told of every write and erasure (the user directory).
        self._browser = browser
        self._sessions = sessions
        self._observer = observer or NullObserver()
        self._erasure = erasure
        self._archive = archive
        self._limits = limits
        self._retrieval = retrieval
        self._counter = counter
        self._usage = usage or UsageSettings()

    @property
    def tiers(self) -> Mapping[Tier, TierHandler]:
        """The tiers this engine serves (maintenance plans from them)."""
        return self._tiers

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

    def _check_add(self, cmd: AddCommand) -> TierHandler:
        v = Violations()
        check_scope(v, cmd.scope, self._limits)
        if not spec(cmd.tier).body_fields:
            check_content(v, cmd.content, self._limits)
        for problem in _body_problems(cmd.tier, cmd):
            v.add(problem.field, problem.description)
        check_metadata(v, "metadata", cmd.metadata, self._limits)
        check_fraction(v, "importance", cmd.importance)
        handler = self._tier(cmd.tier)
        handler.check_add(cmd, v)
        v.raise_if_any()
        return handler

    async def add(self, cmd: AddCommand) -> AddResult:
        handler = self._check_add(cmd)
        # An explicit remember/forget in a user message takes effect before it is stored.
        command = await self._sessions.on_add(cmd) if self._sessions is not None else None
        try:
            result = await handler.add(cmd)
        except QuotaExceeded:
            self._observer.quota_alert(cmd.tier, "exceeded")
            raise
        if result.evicted_keys:
            self._observer.deleted(cmd.tier, "evicted", len(result.evicted_keys))
        result.command = command
        await self._noted([cmd.scope])
        return result

    async def add_batch(
        self, items: Sequence[AddCommand | MemorydError]
    ) -> list[AddResult | MemorydError]:
        """Each item as one Add would be, with its own result or error (an item that could
        not even be read arrives as its error). Items of a tier that adds in batches (see
        BatchAdder) are added together, one embedding batch and one store write per tier,
        their quota checked for all of a user's items at once; the others one by one, in
        request order, before them."""
        if not 1 <= len(items) <= self._limits.max_batch_items:
            raise InvalidArgument.of(
                "items", f"must hold 1 to {self._limits.max_batch_items:,} items"
            )
        outcomes: list[AddResult | MemorydError | None] = [None] * len(items)
        batched: dict[Tier, list[int]] = {}
        for i, item in enumerate(items):
            if isinstance(item, MemorydError):
                outcomes[i] = item
                continue
            try:
                handler = self._check_add(item)
                if isinstance(handler, BatchAdder):
                    batched.setdefault(item.tier, []).append(i)
                else:
                    outcomes[i] = await self.add(item)
            except MemorydError as exc:
                outcomes[i] = exc
        for tier, indices in batched.items():
            adder = self._tier(tier)
            assert isinstance(adder, BatchAdder)
            cmds = [items[i] for i in indices]
            try:
                done = await adder.add_many([c for c in cmds if isinstance(c, AddCommand)])
            except MemorydError as exc:
                done = [exc] * len(indices)
            if any(isinstance(o, QuotaExceeded) for o in done):
                self._observer.quota_alert(tier, "exceeded")
            for i, outcome in zip(indices, done, strict=True):
                outcomes[i] = outcome
        await self._noted(
            [
                c.scope
                for c, o in zip(items, outcomes, strict=True)
                if isinstance(c, AddCommand) and isinstance(o, AddResult)
            ]
        )
        return [o for o in outcomes if o is not None]

    async def end_session(self, cmd: EndSessionCommand) -> EndSessionResult:
        v = Violations()
        check_scope(v, cmd.scope, self._limits, need_session=True)
        v.raise_if_any()
        if self._sessions is None:
            raise Unimplemented("EndSession (this server has no session support configured)")
        return await self._sessions.end(cmd)

    def _resolve_budget(self, v: Violations, budget: int | None, default: int = 0) -> int:
        if budget is None:
            return default or self._retrieval.default_token_budget
        if not 1 <= budget <= self._retrieval.max_token_budget:
            v.add("token_budget", f"must be between 1 and {self._retrieval.max_token_budget:,}")
        return budget

    async def retrieve(self, query: RetrieveQuery) -> RetrieveResult:
        started = time.perf_counter()
        v = Violations()
        check_scope(v, query.scope, self._limits)
        top_k = resolve_top_k(v, query.top_k, self._limits)
        budget = self._resolve_budget(v, query.token_budget)
        check_filters(v, "filters", query.filters, self._limits)
        check_fraction(v, "min_score", query.min_score)
        self._check_context_window(v, query.context_window)
        for tier in query.tiers:
            self._check_tier_scope(v, tier, query.scope)
        v.raise_if_any()
        if query.min_score is None and query.filters:
            # The caller's filter selects; the query orders what it selects (ADR 0405).
            query = dataclasses.replace(query, min_score=self._retrieval.filtered_min_score)
        tiers = list(dict.fromkeys(query.tiers)) or [
            t for t, h in self._tiers.items() if h.can_retrieve(query.scope)
        ]
        skipped: list[Tier] = []
        items, total, embedding_ms = await self._search(
            query, tiers, top_k, skipped=None if query.tiers else skipped
        )
        fitted = fit_to_budget(items, budget, self._counter)
        result = RetrieveResult(
            items=fitted.items,
            total_count=total,
            embedding_ms=embedding_ms,
            retrieval_ms=(time.perf_counter() - started) * 1000 - embedding_ms,
            token_count=fitted.token_count,
            truncated=fitted.truncated,
            skipped_tiers=skipped,
        )
        _log_retrieval(
            "Retrieve",
            query.scope,
            query.query,
            tiers,
            len(result.items),
            result.truncated,
            started,
        )
        return result

    def _check_context_window(self, v: Violations, window: int) -> None:
        if not 0 <= window <= self._retrieval.max_context_window:
            v.add(
                "context_window",
                f"must be between 0 and {self._retrieval.max_context_window} turns",
            )

    async def _search(
        self,
        query: RetrieveQuery,
        tiers: Sequence[Tier],
        top_k: int,
        skipped: list[Tier] | None = None,
    ) -> tuple[list[MemoryRecord], int, float]:
        """Every tier's hits: working first, then the rest by score, each id once. Given
        `skipped`, a tier whose store is down is left out and listed there (unless every
        tier is down); without it, the call fails UNAVAILABLE."""
        working: list[MemoryRecord] = []
        ranked: list[list[MemoryRecord]] = []
        total = 0
        embedding_ms = 0.0
        hot = [t for t in tiers if spec(t).first_in_retrieval]
        rest = [t for t in tiers if not spec(t).first_in_retrieval]
        if hot and rest and self._retrieval.task_grounding and query.query.strip():
            # The task's state first (in process or Redis: well under a millisecond): the
            # entries the query matched ground the other tiers' query (ADR 0405).
            first = await self._ask(hot, query, top_k)
            grounded = dataclasses.replace(query, grounding=_grounding(first))
            answers = [*first, *await self._ask(rest, grounded, top_k)]
            tiers = [*hot, *rest]
        else:
            # Tiers live in different stores: ask them all at once.
            answers = await self._ask(tiers, query, top_k)
        found = _reachable(list(zip(tiers, answers, strict=True)), skipped)
        for tier, hits in found.items():
            total += hits.total
            embedding_ms += hits.embedding_ms
            if spec(tier).first_in_retrieval:
                working.extend(hits.items)
            else:
                ranked.append(hits.items)
        with self._observer.fusion("tiers"):
            # Working memory is the current task's state: always first, then by relevance.
            # The merge keeps each tier's own order (which may set a near-repeat back, see
            # vector_memory.diversify) and takes whichever tier's next item scores higher.
            others = list(heapq.merge(*ranked, key=lambda r: -r.score))
            # A message can be both in its session and (as its durable copy) in long-term
            # memory, under one id: return it once, from the tier that ranked it first.
            unique = list({r.id: r for r in reversed(working + others)}.values())[::-1]
        return unique, total, embedding_ms

    async def _ask(
        self, tiers: Sequence[Tier], query: RetrieveQuery, top_k: int
    ) -> list[TierHits | BaseException]:
        return await asyncio.gather(
            *(self._tier(t).retrieve(query, top_k) for t in tiers), return_exceptions=True
        )

    async def render_context(self, request: RenderQuery) -> RenderedContext:
        """Persona facts, then the memories relevant to the query, as a <memory> block."""
        started = time.perf_counter()
        v = Violations()
        check_scope(v, request.scope, self._limits)
        top_k = resolve_top_k(v, request.top_k, self._limits)
        budget = self._resolve_budget(
            v, request.token_budget, default=self._retrieval.render_token_budget
        )
        check_fraction(v, "min_score", request.min_score)
        self._check_context_window(v, request.context_window)
        for tier in request.tiers:
            self._check_tier_scope(v, tier, request.scope)
        v.raise_if_any()
        header: list[MemoryRecord] = []
        listing = RetrieveQuery(scope=request.scope)
        header_tiers = [t for t in self._tiers if spec(t).render_header]
        for tier in header_tiers:
            header += (await self._tier(tier).retrieve(listing, top_k)).items
        memories: list[MemoryRecord] = []
        searched: list[Tier] = []
        if request.query.strip():
            searched = [t for t in request.tiers if not spec(t).render_header] or [
                t
                for t, h in self._tiers.items()
                if not spec(t).render_header and h.can_retrieve(request.scope)
            ]
            # With no top_k the block is filled: as many memories above the score floor as
            # the budget holds, in rank order (the budget cuts the least relevant), not a
            # fixed count. A rendered item costs at least ITEM_TOKENS, so more than
            # budget / ITEM_TOKENS can never fit.
            wanted = top_k
            if not request.top_k:
                fits = budget // ITEM_TOKENS
                wanted = min(self._limits.max_top_k, max(self._limits.default_top_k, fits))
            query = RetrieveQuery(
                scope=request.scope,
                query=request.query,
                tiers=searched,
                top_k=wanted,
                min_score=request.min_score,
                context_window=request.context_window,
            )
            found, _, _ = await self._search(query, searched, wanted)
            # Hot tiers list everything of the task/session; only what the query touches
            # belongs in a prompt.
            memories = [m for m in found if m.score > 0]
        rendered = render_memory_block(header, memories, budget, self._counter)
        _log_retrieval(
            "RenderContext",
            request.scope,
            request.query,
            header_tiers + searched,
            rendered.item_count,
            rendered.truncated,
            started,
        )
        return rendered

    def _check_lookup(self, lookup: Lookup) -> TierHandler:
        v = Violations()
        check_scope(v, lookup.scope, self._limits)
        check_batch(v, lookup.ids, lookup.keys, self._limits)
        if lookup.keys and not spec(lookup.tier).keyed:
            *most, last = [s.tier.value for s in TIERS.values() if s.keyed]
            keyed = f"{', '.join(most)} and {last}" if most else last
            v.add("keys", f"only the {keyed} tiers are addressed by key")
        self._check_tier_scope(v, lookup.tier, lookup.scope)
        v.raise_if_any()
        return self._tier(lookup.tier)

    async def get(self, lookup: Lookup) -> GetResult:
        return await self._check_lookup(lookup).get(lookup)

    async def delete(self, lookup: Lookup) -> int:
        deleted = await self._check_lookup(lookup).delete(lookup)
        self._observer.deleted(lookup.tier, "delete", deleted)
        return deleted

    async def prune(self, cmd: PruneCommand, requested_by: str = "") -> PruneResult:
        """Prune the named tiers, or with none named every tier this server serves (a hot
        tier then prunes every task/session of the user the scope does not narrow to one);
        ALL with no tier named erases the user everywhere (`requested_by`, the caller's
        subject, goes to the audit log)."""
        v = Violations()
        check_scope(v, cmd.scope, self._limits)
        check_filters(v, "filters", cmd.filters, self._limits)
        if cmd.strategy is PruneStrategy.OLDEST_PERCENT and not 0 < cmd.percent <= 100:
            v.add("percent", "must be in (0, 100] for OLDEST_PERCENT")
        if cmd.strategy is PruneStrategy.ARCHIVE_OLDER_THAN and cmd.older_than_days <= 0:
            v.add("older_than_days", "must be positive for ARCHIVE_OLDER_THAN")
        if cmd.strategy is PruneStrategy.BY_FILTER and not cmd.filters:
            v.add("filters", "BY_FILTER needs at least one metadata filter")
        for tier in cmd.tiers:
            self._check_tier_scope(v, tier, cmd.scope)
        v.raise_if_any()
        if not cmd.tiers and cmd.strategy is PruneStrategy.ALL:
            if self._erasure is None:
                raise Unimplemented("erasing a user (this server has no erasure configured)")
            erased = await self._erasure.erase(cmd, requested_by)
            if self._browser is not None and not cmd.dry_run:
                await self._browser.erased(cmd.scope)
            return erased
        result = PruneResult(dry_run=cmd.dry_run)
        for tier in dict.fromkeys(cmd.tiers) if cmd.tiers else self._tiers:
            count = await self._tier(tier).prune(cmd)
            result.per_tier[tier] = count
            if cmd.strategy is PruneStrategy.ARCHIVE_OLDER_THAN:
                result.archived_count += count  # the cold archive reports these
            else:
                result.deleted_count += count
                if not cmd.dry_run:
                    self._observer.deleted(tier, f"prune_{cmd.strategy.value}", count)
        return result

    def _export_tiers(self, query: ExportQuery) -> list[Tier]:
        v = Violations()
        check_scope(v, query.scope, self._limits)
        v.raise_if_any()
        tiers = list(dict.fromkeys(query.tiers)) or [t for t in self._tiers if spec(t).exported]
        return [self._tier(t).tier for t in tiers]

    async def export_counts(self, query: ExportQuery) -> dict[Tier, int]:
        """Items per tier an export of the user holds (for its header), archived ones
        included when asked. With no tiers named, a tier whose store is down is left out
        of the export and listed in `query.skipped_tiers`."""
        tiers = self._export_tiers(query)
        answers = await _each({t: self._tier(t).export_count(query.scope) for t in tiers})
        query.skipped_tiers = []
        counts = _reachable(answers, None if query.tiers else query.skipped_tiers)
        if query.include_archived and self._archive is not None:
            for tier in counts:
                counts[tier] += await self._archive.count(query.scope, tier)
        return counts

    async def export_records(self, query: ExportQuery) -> AsyncIterator[MemoryRecord]:
        """Every item of the user in the asked tiers, read from the stores page by page;
        with `include_archived`, then each tier's archived items (marked `archived`).
        Tiers `export_counts` left out are left out here too."""
        tiers = [t for t in self._export_tiers(query) if t not in query.skipped_tiers]
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
        if spec(record.tier).body_fields:
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

    async def import_records(
        self,
        scope: Scope,
        records: Sequence[MemoryRecord],
        auto_prune: bool = False,
        *,
        origin: Origin | None = Origin.IMPORT,
    ) -> ImportResult:
        """Validate every item and check every tier's quotas first (an invalid import, or
        one that does not fit, writes nothing; with `auto_prune` the oldest items make
        room, as on Add), then restore each tier's items under `scope`'s user: ids already
        there are skipped. `origin` is what the records' origin becomes (provenance: they
        came in by Import); None keeps theirs (a backup's restore puts back what was)."""
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
            if origin is not None:
                record = dataclasses.replace(record, origin=origin)
            by_tier.setdefault(record.tier, []).append(record)
        for tier, items in by_tier.items():
            await self._tier(tier).check_room(scope, items, auto_prune)
        result = ImportResult()
        for tier, items in by_tier.items():
            done = await self._tier(tier).restore(scope, items, auto_prune)
            result.imported_count += done.imported_count
            result.skipped_count += done.skipped_count
        await self._noted([scope] if result.imported_count else [])
        return result

    async def _noted(self, scopes: Sequence[Scope]) -> None:
        """Tell the user directory of writes that landed (each user once)."""
        if self._browser is not None:
            for tenant, user in dict.fromkeys((s.tenant, s.user_id) for s in scopes):
                await self._browser.noted(Scope(tenant, user))

    async def list_users(self, query: UsersQuery) -> UsersPage:
        return await self._browsing().users(query)

    async def list_memories(self, query: MemoriesQuery) -> MemoriesPage:
        v = Violations()
        check_scope(v, query.scope, self._limits)
        check_filters(v, "filters", query.filters, self._limits)
        v.raise_if_any()
        return await self._browsing().memories(query)

    def _browsing(self) -> Browser:
        if self._browser is None:
            raise Unimplemented("browsing users and memories")
        return self._browser

    async def usage(self, scope: Scope, *, alerting: bool = True) -> UsageReport:
        """The user's usage per tier and its quota alerts; `alerting` counts the alerts in
        the metrics (a Usage call does; the console's listing of users reads the same report
        and does not, or every page view would raise them again)."""
        v = Violations()
        check_scope(v, scope, self._limits)
        v.raise_if_any()
        answers = await _each(
            {t: h.usage(scope) for t, h in self._tiers.items() if spec(t).counted_in_usage}
        )
        skipped: list[Tier] = []
        tiers = _reachable(answers, skipped)
        report = usage_report(list(tiers.values()), self._usage)
        report.skipped_tiers = skipped
        for alert in report.alerts if alerting else ():
            self._observer.quota_alert(alert.tier, alert.level)
        return report


def _log_retrieval(
    rpc: str,
    scope: Scope,
    query: str,
    tiers: Sequence[Tier],
    result_count: int,
    truncated: bool,
    started: float,
) -> None:
    """FR-008: who (hashed), what (the query's SHA-256, never its text), where, how many,
    how long. The request id is added by the log configuration."""
    retrieval_log.info(
        "retrieval",
        extra={
            "rpc": rpc,
            "user": user_hash(scope),
            "query_sha256": text_sha256(query),
            "tiers": [t.value for t in tiers],
            "result_count": result_count,
            "truncated": truncated,
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
        },
    )


# How much of the task's state grounds a query: its best matching entries, each clipped
# (working values can be large; the grounded text is embedded with the query).
GROUNDING_ENTRIES = 3
GROUNDING_CHARS = 200


def _grounding(answers: Sequence[TierHits | BaseException]) -> str:
    """The working entries the query matched (score above 0), best first, as "key: value"
    clauses: what the task is about right now. Joined as sentences: MiniLM reads a line
    break as a space, and a run-on query embeds further from either part."""
    hits = [r for a in answers if isinstance(a, TierHits) for r in a.items if r.score > 0]
    hits.sort(key=lambda r: -r.score)
    lines = [
        (f"{r.key}: {r.content}" if r.key else r.content)[:GROUNDING_CHARS]
        for r in hits[:GROUNDING_ENTRIES]
    ]
    return "; ".join(lines)
