"""Usage: how full each tier is for a user, the alerts that follow, and what it costs."""

from __future__ import annotations

from collections.abc import Sequence

from memoryd.core.models import TierUsage, UsageAlert, UsageReport
from memoryd.core.tiers.registry import StoreFamily, spec
from memoryd.settings import UsageSettings

_GB = 1024**3


def _alert(usage: TierUsage, settings: UsageSettings) -> UsageAlert | None:
    if usage.percent >= settings.critical_percent:
        level, advice = "critical", "nearly full: delete old memories or upgrade your plan"
    elif usage.percent >= settings.warning_percent:
        level, advice = "warning", "consider deleting old memories"
    else:
        return None
    message = f"{spec(usage.tier).title} is at {usage.percent:.0f}% of its quota; {advice}"
    return UsageAlert(tier=usage.tier, level=level, percent=usage.percent, message=message)


def usage_report(tiers: Sequence[TierUsage], settings: UsageSettings) -> UsageReport:
    alerts = [a for t in tiers if (a := _alert(t, settings)) is not None]
    vector_bytes = sum(t.bytes for t in tiers if spec(t.tier).store is StoreFamily.VECTORS)
    hot_bytes = sum(t.bytes for t in tiers if spec(t.tier).store is StoreFamily.HOT)
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
