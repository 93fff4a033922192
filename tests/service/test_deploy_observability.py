"""The dashboard and alert rules operators load only use metrics the server exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from memoryd.v1 import memory_pb2 as pb
from tests.conftest import ServerFactory
from tests.support.rpc import scope
from tests.support.scrape import scrape

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "observability"
# Metric names in PromQL: ours all start so (RT-005's retention metrics with memory_).
_METRIC = re.compile(r"\b(memoryd_[a-z0-9_]+|memory_[a-z0-9_]+)\b")
# Label matchers and groupings name labels (memory_type), not metrics.
_LABELS = re.compile(r"\{[^}]*\}|\b(?:by|without|on|ignoring)\s*\([^)]*\)")


def metric_names(expr: str) -> set[str]:
    return set(_METRIC.findall(_LABELS.sub(" ", expr)))


def _dashboard_exprs() -> list[str]:
    doc = json.loads((DEPLOY / "grafana-dashboard.json").read_text())

    def walk(panels: list[dict[str, Any]]) -> list[str]:
        found = []
        for panel in panels:
            found += [t["expr"] for t in panel.get("targets", [])]
            found += walk(panel.get("panels", []))
        return found

    return walk(doc["panels"])


def _alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((DEPLOY / "alerts.yaml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_the_alert_rules_cover_errors_latency_quota_stores_and_backlog() -> None:
    rules = {r["alert"]: r["expr"] for r in _alert_rules()}
    assert set(rules) == {
        "MemorydHighErrorRate",
        "MemorydHighLatencyP99",
        "MemorydQuotaAt95Percent",
        "MemorydStoreDown",
        "MemorydWriteBehindBacklogGrowing",
    }
    assert "histogram_quantile(0.99" in rules["MemorydHighLatencyP99"]
    assert "memoryd_store_up == 0" in rules["MemorydStoreDown"]


async def test_every_metric_the_dashboard_and_alerts_use_is_exported(
    start_server: ServerFactory, user_id: str
) -> None:
    exprs = _dashboard_exprs() + [r["expr"] for r in _alert_rules()]
    used = set().union(*(metric_names(e) for e in exprs))
    assert len(exprs) > 20 and len(used) > 15
    s = await start_server()
    await s.stub.Add(pb.AddRequest(scope=scope(user_id), tier=pb.TIER_LONG_TERM, content="x"))
    exported = (await scrape(s.server.metrics_port)).names
    assert used - exported == set()
