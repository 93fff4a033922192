"""The server span of each MemoryService call (opentelemetry-instrumentation-grpc, the
`otel` extra), continuing the caller's W3C trace context (`traceparent` metadata); the
core's reports become its child spans (`telemetry/tracing.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

SERVICE = "memoryd.v1.MemoryService"


def server_interceptor(provider: TracerProvider) -> grpc.aio.ServerInterceptor:  # type: ignore[type-arg]
    """The server span of each MemoryService call, continuing the caller's trace."""
    from opentelemetry.instrumentation.grpc import aio_server_interceptor
    from opentelemetry.instrumentation.grpc.filters import service_name

    interceptor: grpc.aio.ServerInterceptor = aio_server_interceptor(  # type: ignore[type-arg,no-untyped-call]
        tracer_provider=provider, filter_=service_name(SERVICE)
    )
    return interceptor
