"""Per-scenario reports with ghz's JSON field names and units.

As in ghz (https://ghz.sh/docs/output): durations are integer nanoseconds (``total``,
``average``, ``fastest``, ``slowest``, each ``latency``); ``histogram`` marks are seconds;
``statusCodeDistribution`` keys are gRPC code names as Go spells them ("OK",
"DeadlineExceeded"); ``errorDistribution`` keys are the errors' messages.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

PERCENTAGES = (10, 25, 50, 75, 90, 95, 99)
HISTOGRAM_BUCKETS = 10


def go_code_name(python_name: str) -> str:
    """``DEADLINE_EXCEEDED`` -> ``DeadlineExceeded``; ``OK`` stays ``OK``."""
    if python_name == "OK":
        return "OK"
    return "".join(part.capitalize() for part in python_name.split("_"))


def percentile(ordered: Sequence[int], percentage: float) -> int:
    """Nearest-rank percentile of sorted samples (0 for none)."""
    if not ordered:
        return 0
    rank = max(1, math.ceil(percentage / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def histogram(ordered: Sequence[int], buckets: int = HISTOGRAM_BUCKETS) -> list[dict[str, Any]]:
    """ghz's histogram: equal-width buckets from fastest to slowest; ``mark`` is the upper
    bound in seconds, ``frequency`` the share of samples."""
    if not ordered:
        return []
    low, high = ordered[0], ordered[-1]
    width = (high - low) / buckets
    counts = [0] * buckets
    for sample in ordered:
        index = buckets - 1 if width == 0 else min(buckets - 1, int((sample - low) / width))
        counts[index] += 1
    return [
        {
            "mark": (low + width * (i + 1)) / 1e9,
            "count": count,
            "frequency": count / len(ordered),
        }
        for i, count in enumerate(counts)
    ]


def report(
    name: str,
    latencies_ns: Sequence[int],
    total_ns: int,
    status_codes: Counter[str],
    errors: Counter[str],
    options: dict[str, Any],
) -> dict[str, Any]:
    """One scenario's report. ``latencies_ns`` are the successful and failed calls alike
    (ghz counts both); ``total_ns`` is the wall time of the measured window."""
    ordered = sorted(latencies_ns)
    count = len(ordered)
    return {
        "name": name,
        "options": options,
        "count": count,
        "total": total_ns,
        "average": sum(ordered) // count if count else 0,
        "fastest": ordered[0] if ordered else 0,
        "slowest": ordered[-1] if ordered else 0,
        "rps": count / (total_ns / 1e9) if total_ns else 0.0,
        "errorDistribution": dict(errors),
        "statusCodeDistribution": dict(status_codes),
        "latencyDistribution": [
            {"percentage": p, "latency": percentile(ordered, p)} for p in PERCENTAGES
        ],
        "histogram": histogram(ordered),
    }
