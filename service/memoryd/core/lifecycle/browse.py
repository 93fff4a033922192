"""Browsing for operators (the console): a tenant's users with their usage, and a user's
memories across tiers, each a page at a time, so that a page costs the same at 1,000 users
or 10,000 memories. Two parts cost more, and are bounded otherwise: the tenant's totals
(a sum over every user's counters, at most once per TOTALS_TTL_S per tenant and process),
and a named task's or session's hot items (whole, bounded by their tier's limits).

The user directory (`stores/usage`, beside the counters) is told of every write; a note is
written at most once per `note_every_s` per user and process, so a busy user costs one
store call a second, not one per Add. Page tokens are opaque to callers: base64 of a small
JSON cursor (the last user id; the tier and the store's own scroll token).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from memoryd.core.errors import InvalidArgument, StoreUnavailable
from memoryd.core.memory.payload import from_payload
from memoryd.core.memory.vector_memory import VectorMemory
from memoryd.core.models import (
    MemoriesPage,
    MemoriesQuery,
    RetrieveQuery,
    Scope,
    Tier,
    TierUsage,
    UsageReport,
    UsersPage,
    UsersQuery,
    UserSummary,
)
from memoryd.core.tiers.base import TierHits
from memoryd.core.tiers.registry import TIERS, StoreFamily, spec
from memoryd.stores.usage.port import CountersUnavailable, UserDirectory
from memoryd.stores.vectors.port import MatchValue

DEFAULT_PAGE = 50
MAX_PAGE = 200
# A tenant's totals are a sum over every user's usage counters: summed at most this often
# per tenant (and bound credential) and process, so paging through the overview costs one
# sum, not one per page.
TOTALS_TTL_S = 10.0
# Users whose usage is read at once while summing, and per directory read.
_TOTALS_BATCH = 100
_DIRECTORY_READ = 1000
# Remembered (tenant, user) notes per process before the memo starts over.
_MEMO_LIMIT = 100_000


def listed_tiers() -> list[Tier]:
    """The tiers ListMemories reads: those kept in the vector store (the hot tiers hold a
    task's or a session's state and are read through Get/Retrieve with that scope)."""
    return [s.tier for s in TIERS.values() if s.store is StoreFamily.VECTORS and s.exported]


def hot_tiers() -> list[Tier]:
    """The tiers whose items belong to one task or session (the scope field names it):
    listed whole for the scope a listing names, on its first page."""
    return [s.tier for s in TIERS.values() if s.store is StoreFamily.HOT and s.scope_field]


# Working memory lives while its task does, a window while its session does: a hot tier
# holds at most its settings' entries per task or session, so listing one whole is cheap.
_HOT_ALL = 100_000


@runtime_checkable
class LiveTier(Protocol):
    """What browsing needs of a hot tier: its live tasks or sessions, and their items."""

    async def live_scopes(self, scope: Scope) -> list[Scope]: ...

    async def retrieve(self, query: RetrieveQuery, top_k: int) -> TierHits: ...


def _page_size(value: int) -> int:
    if value == 0:
        return DEFAULT_PAGE
    if not 1 <= value <= MAX_PAGE:
        raise InvalidArgument.of("page_size", f"must be between 1 and {MAX_PAGE} (0 means 50)")
    return value


def _encode(cursor: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(cursor).encode()).decode()


def _decode(token: str) -> dict[str, Any]:
    if not token:
        return {}
    try:
        cursor = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        cursor = None
    if not isinstance(cursor, dict):
        raise InvalidArgument.of("page_token", "is not a token this server gave")
    return cursor


class Browser:
    def __init__(
        self,
        directory: UserDirectory,
        memory: VectorMemory,
        usage: Callable[[Scope], Awaitable[UsageReport]],
        clock: Callable[[], float],
        served: Sequence[Tier],
        note_every_s: float = 1.0,
        backfill: bool = False,
        live: Mapping[Tier, LiveTier] | None = None,
    ) -> None:
        self._directory = directory
        self._memory = memory
        self._usage = usage
        self._clock = clock
        self._served = set(served)
        # The hot tiers (working, short-term), listed for the task or session named.
        self._live = dict(live or {})
        self._note_every_s = note_every_s
        self._noted: dict[tuple[str, str], float] = {}
        # A directory that forgets on restart (the in-process one) is refilled once from
        # the vector store's owners before its first listing.
        self._backfill = backfill
        self._backfilling = asyncio.Lock()
        self._totals: dict[tuple[str, frozenset[str]], tuple[float, list[TierUsage]]] = {}

    async def noted(self, scope: Scope) -> None:
        """A write of `scope`'s user landed. The directory is a view for operators: a store
        failure here never fails the write (the next write notes the user again)."""
        now = self._clock()
        key = (scope.tenant, scope.user_id)
        if now - self._noted.get(key, float("-inf")) < self._note_every_s:
            return
        if len(self._noted) >= _MEMO_LIMIT:
            self._noted.clear()
        self._noted[key] = now
        try:
            await self._directory.note(scope.tenant, scope.user_id, now)
        except CountersUnavailable:
            self._noted.pop(key, None)

    async def erased(self, scope: Scope) -> None:
        self._noted.pop((scope.tenant, scope.user_id), None)
        for key in [k for k in self._totals if k[0] == scope.tenant]:
            del self._totals[key]
        try:
            await self._directory.remove(scope.tenant, scope.user_id)
        except CountersUnavailable as exc:
            raise StoreUnavailable("usage", str(exc)) from exc

    async def _refill(self) -> None:
        async with self._backfilling:
            if not self._backfill:
                return
            for tier in (t for t in listed_tiers() if t in self._served):
                for tenant, user in await self._memory.owners(tier):
                    await self._directory.note(tenant, user, 0.0)  # last activity unknown
            self._backfill = False

    async def users(self, query: UsersQuery) -> UsersPage:
        size = _page_size(query.page_size)
        if self._backfill:
            await self._refill()
        after = str(_decode(query.page_token).get("after", ""))
        try:
            if query.only:
                # A credential bound to users sees those alone (no directory read).
                ids = sorted(u for u in query.only if u.startswith(query.prefix) and u > after)
                seen = {u: 0.0 for u in ids}
                # One past the page, to know whether another follows.
                found = ids[: size + 1]
            else:
                page = await self._directory.page(
                    query.tenant, prefix=query.prefix, after=after, limit=size + 1
                )
                seen = {u.user_id: u.last_active for u in page}
                found = [u.user_id for u in page]
        except CountersUnavailable as exc:
            raise StoreUnavailable("usage", str(exc)) from exc
        more = len(found) > size
        found = found[:size]
        reports = await asyncio.gather(*(self._usage(Scope(query.tenant, u)) for u in found))
        users = [UserSummary(u, r, seen[u]) for u, r in zip(found, reports, strict=True)]
        token = _encode({"after": found[-1]}) if more and found else ""
        return UsersPage(users, token, await self._tenant_totals(query.tenant, query.only))

    async def _tenant_totals(self, tenant: str, only: frozenset[str]) -> list[TierUsage]:
        """Count and bytes per tier summed over the tenant's users (a bound credential's
        own users only), from their usage counters; at most TOTALS_TTL_S old."""
        now = self._clock()
        cached = self._totals.get((tenant, only))
        if cached is not None and now - cached[0] < TOTALS_TTL_S:
            return cached[1]
        sums: dict[Tier, TierUsage] = {}
        users = sorted(only) if only else await self._every_user(tenant)
        for start in range(0, len(users), _TOTALS_BATCH):
            batch = users[start : start + _TOTALS_BATCH]
            for report in await asyncio.gather(*(self._usage(Scope(tenant, u)) for u in batch)):
                for t in report.tiers:
                    total = sums.setdefault(t.tier, TierUsage(t.tier))
                    total.count += t.count
                    total.bytes += t.bytes
        result = [sums[t] for t in TIERS if t in sums]
        if len(self._totals) >= _MEMO_LIMIT:
            self._totals.clear()
        self._totals[(tenant, only)] = (now, result)
        return result

    async def _every_user(self, tenant: str) -> list[str]:
        users: list[str] = []
        try:
            while True:
                after = users[-1] if users else ""
                page = await self._directory.page(tenant, after=after, limit=_DIRECTORY_READ)
                users += [u.user_id for u in page]
                if len(page) < _DIRECTORY_READ:
                    return users
        except CountersUnavailable as exc:
            raise StoreUnavailable("usage", str(exc)) from exc

    async def memories(self, query: MemoriesQuery) -> MemoriesPage:
        size = _page_size(query.page_size)
        named = list(dict.fromkeys(query.tiers))
        hot = [t for t in named if t in hot_tiers()]
        for i, tier in enumerate(named):
            field = spec(tier).scope_field
            if tier in hot and not getattr(query.scope, field):
                raise InvalidArgument.of(
                    f"tiers[{i}]", f"{tier.value} is listed for one {field}: name scope.{field}"
                )
            if tier not in hot and tier not in listed_tiers():
                raise InvalidArgument.of(f"tiers[{i}]", "ListMemories reads the stored tiers only")
        if not named:
            # Every stored tier, and the hot tiers whose task or session the scope names.
            hot = [t for t in hot_tiers() if getattr(query.scope, spec(t).scope_field)]
        tiers = [t for t in named if t not in hot] if named else listed_tiers()
        tiers = [t for t in tiers if t in self._served]
        cursor = _decode(query.page_token)
        first = not cursor
        at = str(cursor.get("tier", tiers[0].value if tiers else ""))
        offset = cursor.get("offset")
        names = [t.value for t in tiers]
        if at and at not in names:
            raise InvalidArgument.of("page_token", "does not belong to these filters")
        page = MemoriesPage([])
        if first:
            page = await self._first_page_extras(query, hot)
        items = page.items
        index = names.index(at) if at else len(tiers)
        stored = 0
        while index < len(tiers) and stored < size:
            tier = tiers[index]
            session = query.scope.session_id
            extra = [MatchValue("session_id", session)] if session else []
            flt = self._memory.scope_filter(
                query.scope, tier, metadata=query.filters, kinds=query.kinds, extra=extra
            )
            points, offset = await self._memory.call(
                self._memory.store.scroll, flt, limit=size - stored, offset=offset
            )
            items += [from_payload(p.id, p.payload) for p in points]
            stored += len(points)
            if offset is None:
                index += 1
        if index < len(tiers):
            page.next_page_token = _encode({"tier": tiers[index].value, "offset": offset})
        return page

    async def _first_page_extras(self, query: MemoriesQuery, hot: list[Tier]) -> MemoriesPage:
        """The named task's and session's hot items (whole), and the user's live tasks
        and sessions to pick from."""
        page = MemoriesPage([])
        user = Scope(query.scope.tenant, query.scope.user_id)
        for tier, handler in self._live.items():
            if tier not in self._served:
                continue
            if tier in hot:
                listing = RetrieveQuery(query.scope, filters=query.filters, kinds=query.kinds)
                page.items += (await handler.retrieve(listing, _HOT_ALL)).items
            scopes = await handler.live_scopes(user)
            if spec(tier).scope_field == "task_id":
                page.tasks += scopes
            else:
                page.sessions += scopes
        return page
