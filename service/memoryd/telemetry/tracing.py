"""OpenTelemetry tracing (the `otel` extra), off unless `tracing.enabled`.

The core's reports become spans (embedding, each store call, fusion) inside the server
span of each call (`transport/tracing.py`). Nothing here is imported
unless tracing is on, so the extra stays optional.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from memoryd.core.observe import NullObserver
from memoryd.settings import TracingSettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer


class TracingUnavailable(Exception):
    """Tracing is asked for but the `otel` extra is not installed."""


class TracingObserver(NullObserver):
    """The core's reports, as spans; the counts it inherits as no-ops are the metrics'
    business."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    @contextmanager
    def _span(self, name: str, attributes: dict[str, Any]) -> Iterator[None]:
        with self._tracer.start_as_current_span(name, attributes=attributes):
            yield

    def embedding(self, batch_size: int) -> AbstractContextManager[None]:
        return self._span("memoryd.embedding", {"memoryd.batch_size": batch_size})

    def store_call(self, store: str, operation: str) -> AbstractContextManager[None]:
        return self._span(
            f"memoryd.store {store}.{operation}",
            {"memoryd.store": store, "memoryd.operation": operation},
        )

    def fusion(self, stage: str) -> AbstractContextManager[None]:
        return self._span("memoryd.fusion", {"memoryd.fusion.stage": stage})


def tracer_provider(settings: TracingSettings) -> TracerProvider:
    """A provider exporting in batches to the configured exporter."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError as exc:
        raise TracingUnavailable(
            "tracing.enabled needs the otel extra: pip install 'memoryd[otel]'"
        ) from exc
    exporter: SpanExporter
    if settings.exporter == "console":
        exporter = ConsoleSpanExporter()
    else:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise TracingUnavailable(
                "tracing.exporter=otlp needs the otel extra: pip install 'memoryd[otel]'"
            ) from exc
        exporter = OTLPSpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def tracer_of(provider: TracerProvider) -> Tracer:
    return provider.get_tracer("memoryd")
