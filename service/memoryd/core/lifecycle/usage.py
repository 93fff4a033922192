"""Usage: how full each tier is for a user, the alerts that follow, and what it costs."""

from __future__ import annotations

from collections.abc import Sequence

from memoryd.core.models import Tier, TierUsage, UsageAlert, UsageReport
from memoryd.settings import UsageSettings

_GB = 1024**3

# Tiers kept in the vector store; the others live in the hot store.
_VECTOR_TIERS = frozenset(
    {Tier.LONG_TERM, Tier.PERSONA, Tier.EPISODIC, Tier.ENTITY, Tier.STRUCTURED}
)

_NAMES = {Tier.WORKING: "working memory", Tier.SHORT_TERM: "short-term memory"}


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


def _alert(usage: TierUsage, settings: UsageSettings) -> UsageAlert | None:
    if usage.percent >= settings.critical_percent:
        level, advice = "critical", "nearly full: delete old memories or upgrade your plan"
    elif usage.percent >= settings.warning_percent:
        level, advice = "warning", "consider deleting old memories"
    else:
        return None
    name = _NAMES.get(usage.tier, f"{usage.tier.value.replace('_', '-')} memory")
    message = f"{name} is at {usage.percent:.0f}% of its quota; {advice}"
    return UsageAlert(tier=usage.tier, level=level, percent=usage.percent, message=message)


def usage_report(tiers: Sequence[TierUsage], settings: UsageSettings) -> UsageReport:
    alerts = [a for t in tiers if (a := _alert(t, settings)) is not None]
    vector_bytes = sum(t.bytes for t in tiers if t.tier in _VECTOR_TIERS)
    hot_bytes = sum(t.bytes for t in tiers if t.tier not in _VECTOR_TIERS)
    cost = (
        vector_bytes / _GB * settings.vector_usd_per_gb_month
        + hot_bytes / _GB * settings.hot_usd_per_gb_month
    )
    return UsageReport(
        tiers=list(tiers),
        alerts=alerts,
        estimated_monthly_cost_usd=cost,
        quota_profile=next(
            (t.quota_profile for t in tiers if t.quota_profile), settings.quota_profile
        ),
    )
