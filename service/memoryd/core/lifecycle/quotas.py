"""Quota profiles (RT-006): which plan's limits apply to a scope."""

from __future__ import annotations

from dataclasses import dataclass

from memoryd.core.errors import QuotaExceeded
from memoryd.core.models import Scope, TierUsage
from memoryd.settings import (
    DEFAULT_PROFILE,
    EpisodicSettings,
    LongTermSettings,
    QuotaProfile,
    QuotaSettings,
    Settings,
    StructuredSettings,
)


@dataclass(frozen=True)
class UserLimits:
    """Every per-user limit of one profile, the tier defaults filled in."""

    long_term_max_memories: int
    long_term_max_bytes: int
    episodic_max_episodes_per_agent: int
    structured_max_documents: int
    structured_max_bytes: int
    entity_max_entities: int
    entity_max_relations: int
    # Token buckets per tenant + user, per minute; None: no limit.
    queries_per_minute: int | None
    writes_per_minute: int | None


@dataclass(frozen=True)
class ResolvedProfile:
    name: str
    limits: UserLimits


class QuotaProfiles:
    """Resolves a scope's profile: the user's assignment, else the tenant's, else the default.

    Each profile's unset limits take their tier block's default; the profile named
    "default" is all tier defaults unless `quotas.profiles` defines one of that name.
    """

    def __init__(
        self,
        quotas: QuotaSettings,
        long_term: LongTermSettings,
        episodic: EpisodicSettings | None = None,
        structured: StructuredSettings | None = None,
    ) -> None:
        self._quotas = quotas
        episodic = episodic or EpisodicSettings()
        structured = structured or StructuredSettings()
        profiles = {DEFAULT_PROFILE: QuotaProfile(), **quotas.profiles}
        self._profiles = {
            name: UserLimits(
                long_term_max_memories=p.long_term_max_memories or long_term.max_memories,
                long_term_max_bytes=p.long_term_max_bytes or long_term.max_bytes,
                episodic_max_episodes_per_agent=p.episodic_max_episodes_per_agent
                or episodic.max_episodes_per_agent,
                structured_max_documents=p.structured_max_documents or structured.max_documents,
                structured_max_bytes=p.structured_max_bytes or structured.max_bytes,
                entity_max_entities=p.entity_max_entities,
                entity_max_relations=p.entity_max_relations,
                queries_per_minute=p.queries_per_minute,
                writes_per_minute=p.writes_per_minute,
            )
            for name, p in profiles.items()
        }

    @classmethod
    def of(cls, settings: Settings) -> QuotaProfiles:
        return cls(settings.quotas, settings.long_term, settings.episodic, settings.structured)

    def profile_for(self, scope: Scope) -> ResolvedProfile:
        q = self._quotas
        name = q.user_profiles.get(
            f"{scope.tenant}/{scope.user_id}",
            q.tenant_profiles.get(scope.tenant, q.default_profile),
        )
        return ResolvedProfile(name, self._profiles[name])

    def named(self, name: str) -> UserLimits | None:
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
