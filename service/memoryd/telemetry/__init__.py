"""What a server reports with: its metrics registry and, when tracing is on, its tracer
provider. The composition root makes one per server and hands the core its `observer`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from memoryd.core.observe import Observer, Observers
from memoryd.settings import Settings
from memoryd.telemetry.metrics import Metrics, PrometheusObserver
from memoryd.telemetry.tracing import TracingObserver, tracer_of, tracer_provider

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider


@dataclass
class Telemetry:
    metrics: Metrics = field(default_factory=lambda: Metrics(CollectorRegistry()))
    # Set when tracing is on.
    tracer_provider: TracerProvider | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Telemetry:
        provider = tracer_provider(settings.tracing) if settings.tracing.enabled else None
        return cls(tracer_provider=provider)

    @property
    def observer(self) -> Observer:
        metrics = PrometheusObserver(self.metrics)
        if self.tracer_provider is None:
            return metrics
        return Observers(metrics, TracingObserver(tracer_of(self.tracer_provider)))

    async def close(self) -> None:
        """Export the spans still buffered."""
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
