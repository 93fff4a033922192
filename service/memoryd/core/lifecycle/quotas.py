"""Quota profiles (RT-006): which plan's limits apply to a scope."""

from __future__ import annotations

from dataclasses import dataclass

from memoryd.core.models import Scope
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
