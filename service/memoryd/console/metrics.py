"""Key figures from the service's Prometheus endpoint (`--metrics-url`): calls and errors
per method, p50/p99 from the latency histogram, memories and bytes per tier. Cumulative
since the service started; the rate is the change since the console's previous read."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


@dataclass
class Figures:
    calls: dict[str, float] = field(default_factory=dict)
    errors: dict[str, float] = field(default_factory=dict)
    p50_ms: dict[str, float] = field(default_factory=dict)
    p99_ms: dict[str, float] = field(default_factory=dict)
    memories: dict[str, float] = field(default_factory=dict)
    bytes: dict[str, float] = field(default_factory=dict)
    rate_per_s: float | None = None
    error: str = ""


def _quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """The upper bound of the bucket holding the q-th call (ms); buckets cumulative."""
    buckets.sort()
    total = buckets[-1][1] if buckets else 0
    if total <= 0:
        return 0.0
    for bound, count in buckets:
        if count >= q * total:
            return bound * 1000
    return buckets[-1][0] * 1000


def parse(text: str) -> Figures:
    figures = Figures()
    histograms: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "memoryd_rpc_requests_total":
                method = s.labels.get("method", "")
                figures.calls[method] = figures.calls.get(method, 0) + s.value
                if s.labels.get("code") != "OK":
                    figures.errors[method] = figures.errors.get(method, 0) + s.value
            elif s.name == "memoryd_rpc_duration_seconds_bucket":
                le = s.labels.get("le", "+Inf")
                if le != "+Inf":
                    histograms[s.labels.get("method", "")].append((float(le), s.value))
            elif s.name == "memory_age_days_count":
                figures.memories[s.labels.get("memory_type", "")] = s.value
            elif s.name == "memory_storage_bytes":
                figures.bytes[s.labels.get("memory_type", "")] = s.value
    for method, buckets in histograms.items():
        figures.p50_ms[method] = _quantile(buckets, 0.5)
        figures.p99_ms[method] = _quantile(buckets, 0.99)
    return figures


class MetricsReader:
    def __init__(self, url: str | None) -> None:
        self.url = url
        self._last: tuple[float, float] | None = None

    def _fetch(self) -> str:
        assert self.url is not None
        with urllib.request.urlopen(self.url, timeout=5) as reply:
            return str(reply.read().decode("utf-8"))

    async def read(self) -> Figures | None:
        if not self.url:
            return None
        try:
            figures = parse(await asyncio.to_thread(self._fetch))
        except (OSError, ValueError) as exc:
            return Figures(error=f"{type(exc).__name__}: {exc}")
        now, total = time.monotonic(), sum(figures.calls.values())
        if self._last is not None and now > self._last[0]:
            figures.rate_per_s = (total - self._last[1]) / (now - self._last[0])
        self._last = (now, total)
        return figures
