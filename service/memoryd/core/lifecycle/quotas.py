"""Quota profiles (RT-006): which plan's limits apply to a scope."""

from __future__ import annotations

from dataclasses import dataclass

from memoryd.core.errors import QuotaExceeded
from memoryd.core.models import Scope, TierUsage
from memoryd.settings import DEFAULT_PROFILE, LongTermSettings, QuotaProfile, QuotaSettings


@dataclass(frozen=True)
class ResolvedProfile:
    name: str
    limits: QuotaProfile


class QuotaProfiles:
    """Resolves a scope's profile: the user's assignment, else the tenant's, else the default.

    The profile named "default" has the `quotas.long_term` limits where set, else the
    `long_term` settings block's, unless `quotas.profiles` defines one of that name.
    """

    def __init__(self, quotas: QuotaSettings, long_term: LongTermSettings) -> None:
        self._quotas = quotas
        self._profiles = dict(quotas.profiles)
        self._profiles.setdefault(
            DEFAULT_PROFILE,
            QuotaProfile(
                long_term_max_memories=quotas.long_term.max_memories or long_term.max_memories,
                long_term_max_bytes=quotas.long_term.max_bytes or long_term.max_bytes,
            ),
        )

    def profile_for(self, scope: Scope) -> ResolvedProfile:
        q = self._quotas
        name = q.user_profiles.get(
            f"{scope.tenant}/{scope.user_id}",
            q.tenant_profiles.get(scope.tenant, q.default_profile),
        )
        return ResolvedProfile(name, self._profiles[name])

    def named(self, name: str) -> QuotaProfile | None:
        return self._profiles.get(name)


def quota_percent(count: int, max_count: int, size: int, max_bytes: int) -> float:
    """max(count %, bytes %) of the limits that exist (0 means no limit)."""
    parts = [100.0 * count / max_count if max_count else 0.0]
    parts.append(100.0 * size / max_bytes if max_bytes else 0.0)
    return max(parts)


def add_scope(usage: TierUsage, count: int, size: int) -> None:
    """Add one task's or session's totals; limits are per scope, so percent is that of the
    fullest scope."""
    usage.count += count
    usage.bytes += size
    usage.percent = max(usage.percent, quota_percent(count, usage.max_count, size, usage.max_bytes))


def quota_full(subject: str, limit_name: str, limit: int, message: str) -> QuotaExceeded:
    """The one way a full quota is reported: what is full, its limit, and what to do."""
    return QuotaExceeded(subject=subject, limit_name=limit_name, limit=limit, message=message)
