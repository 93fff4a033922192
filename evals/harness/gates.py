"""Gates: the golden-set run fails (exit 1) when any of them is missed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MIN_RECALL = 0.9  # Recall@k, averaged over cases with relevant memories
MIN_PRECISION = 0.7  # Precision@k, averaged over cases with relevant memories that returned items
MIN_COMPLIANCE = 1.0  # share of token-budget cases within their budget
MAX_LEAKS = 0  # returned ids that the querying user does not own
# Reported, never gating (the seed's latency target is "warn").
WARN_P95_MS = 200.0


@dataclass(frozen=True)
class Thresholds:
    min_recall: float = MIN_RECALL
    min_precision: float = MIN_PRECISION
    min_compliance: float = MIN_COMPLIANCE
    max_leaks: int = MAX_LEAKS


def check_gates(summary: Mapping[str, Any], t: Thresholds) -> list[dict[str, Any]]:
    """One entry per gate: name, value, threshold, passed. A metric nobody could measure
    fails, except compliance, which holds vacuously without budget cases."""

    def at_least(name: str, value: float | None, threshold: float, vacuous: bool) -> dict[str, Any]:
        passed = vacuous if value is None else value >= threshold - 1e-12
        return {"gate": name, "value": value, "threshold": f">= {threshold}", "passed": passed}

    leaks = int(summary["leaks"])
    errors = int(summary["errors"])
    return [
        at_least("recall", summary["recall"], t.min_recall, False),
        at_least("precision", summary["precision"], t.min_precision, False),
        at_least("budget_compliance", summary["budget_compliance"], t.min_compliance, True),
        {
            "gate": "leaks",
            "value": leaks,
            "threshold": f"<= {t.max_leaks}",
            "passed": leaks <= t.max_leaks,
        },
        {"gate": "rpc_errors", "value": errors, "threshold": "<= 0", "passed": errors == 0},
    ]
