"""Per-user rate limits (tenant + user) from the caller's quota profile.

Queries (Retrieve, RenderContext) past their rate degrade softly: the transport answers
from a recent identical query or empty, flagged `rate_limited`. Listings (ListMemories
from the user's query bucket, ListUsers from the tenant's) past it are refused, as are
writes past theirs (RateLimited: RESOURCE_EXHAUSTED with the delay to retry) before
anything is written. The profile is the credential's, else the user's (quotas settings);
callers with no credential (auth off) have no limit. The buckets are behind a port: Redis when
configured, shared by every replica, else in this process.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from enum import StrEnum

from memoryd.core.errors import QuotaExceeded, RateLimited
from memoryd.core.lifecycle.quotas import QuotaProfiles
from memoryd.core.models import Principal, Scope
from memoryd.stores.ratelimit.port import BucketKey, BucketsUnavailable, Rate, TokenBuckets

log = logging.getLogger(__name__)

# A store outage is logged at most this often (every call would flood the log).
_WARN_EVERY_S = 60.0


class Limited(StrEnum):
    QUERY = "query"
    WRITE = "write"


class RateLimits:
    def __init__(
        self,
        buckets: TokenBuckets,
        profiles: QuotaProfiles,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._buckets = buckets
        self._profiles = profiles
        self._clock = clock
        self._warned_at = float("-inf")

    def per_minute(self, principal: Principal, scope: Scope, kind: Limited) -> int | None:
        """The caller's rate for `kind`, or None when unlimited."""
        if not principal.authenticated:
            return None
        profile = self._profiles.named(principal.profile) if principal.profile else None
        if profile is None:
            if principal.profile:
                log.warning("unknown quota profile %r on a credential", principal.profile)
            profile = self._profiles.profile_for(scope).limits
        if kind is Limited.QUERY:
            return profile.queries_per_minute
        return profile.writes_per_minute

    async def _take(
        self, principal: Principal, scope: Scope, kind: Limited, cost: int = 1
    ) -> float | None:
        """None when the call may go on, else the seconds until it may."""
        per_minute = self.per_minute(principal, scope, kind)
        if per_minute is None:
            return None
        key = BucketKey(scope.tenant, scope.user_id, kind.value)
        try:
            taken = await self._buckets.take(
                key, Rate.per_minute(per_minute), self._clock(), float(cost)
            )
        except BucketsUnavailable as exc:
            # Limits protect capacity, not data: without their store, calls go on.
            now = time.monotonic()
            if now - self._warned_at >= _WARN_EVERY_S:
                self._warned_at = now
                log.warning("rate limits not enforced: their store is unavailable (%s)", exc)
            return None
        return None if taken.allowed else taken.retry_after_s

    async def _give_back(
        self, principal: Principal, scope: Scope, kind: Limited, cost: int
    ) -> None:
        per_minute = self.per_minute(principal, scope, kind)
        if per_minute is None:
            return
        key = BucketKey(scope.tenant, scope.user_id, kind.value)
        # Without their store the tokens come back with the refill; _take warns of it.
        with contextlib.suppress(BucketsUnavailable):
            await self._buckets.give_back(key, Rate.per_minute(per_minute), self._clock(), cost)

    def limited(self, principal: Principal) -> bool:
        """Whether any limit may apply to this caller (else no bookkeeping is needed)."""
        return principal.authenticated

    async def allow_query(self, principal: Principal, scope: Scope) -> bool:
        return await self._take(principal, scope, Limited.QUERY) is None

    async def charge_listing(self, principal: Principal, scope: Scope) -> None:
        """Take one query token for a listing (ListUsers, ListMemories), or raise RateLimited:
        a listing has no soft answer to fall back on. `scope.user_id` is empty for a
        tenant-wide listing (ListUsers), whose bucket is the tenant's own."""
        retry_after = await self._take(principal, scope, Limited.QUERY)
        if retry_after is None:
            return
        limit = self.per_minute(principal, scope, Limited.QUERY) or 0
        whose = f"user {scope.user_id}" if scope.user_id else "tenant"
        raise RateLimited(
            subject=f"rate:{scope.user_id or '*'}",
            limit_name="queries_per_minute",
            limit=limit,
            retry_after_s=retry_after,
            message=f"query rate limit reached for this {whose}'s listings (max: {limit:,} "
            f"queries per minute); retry in {retry_after:.1f} s, or upgrade the plan",
        )

    async def charge_writes(self, principal: Principal, writes: Mapping[Scope, int]) -> None:
        """`charge_write` for each user of one call (an AddBatch), all or none: when one
        user's writes are refused, the others' tokens are given back, since nothing of the
        call is written."""
        charged: list[tuple[Scope, int]] = []
        try:
            for scope, count in writes.items():
                await self.charge_write(principal, scope, count)
                charged.append((scope, count))
        except BaseException:
            for scope, count in charged:
                await self._give_back(principal, scope, Limited.WRITE, count)
            raise

    async def charge_write(self, principal: Principal, scope: Scope, writes: int = 1) -> None:
        """Take `writes` write tokens at once (an AddBatch's items for this user), or raise
        RateLimited (nothing may be written then). More writes than the bucket ever holds
        are refused as a quota with no retry delay: waiting would never let them through."""
        limit = self.per_minute(principal, scope, Limited.WRITE)
        if limit is not None and writes > limit:
            raise QuotaExceeded(
                subject=f"rate:{scope.user_id}",
                limit_name="writes_per_minute",
                limit=limit,
                message=f"{writes:,} writes for one user in one call exceed the write rate "
                f"limit (max: {limit:,} writes per minute); split the batch, or upgrade the plan",
            )
        retry_after = await self._take(principal, scope, Limited.WRITE, writes)
        if retry_after is None:
            return
        limit = limit or 0
        raise RateLimited(
            subject=f"rate:{scope.user_id}",
            limit_name="writes_per_minute",
            limit=limit,
            retry_after_s=retry_after,
            message=f"write rate limit reached for this user (max: {limit:,} writes per "
            f"minute); retry in {retry_after:.1f} s, or upgrade the plan",
        )
