"""The outermost concern of every MemoryService call: its request id, metrics and log line.

The request id is the caller's `x-request-id` metadata when it sends a usable one, else a
new one; it is echoed in the response's initial metadata and is on every log line written
while the call is served (and on those of work queued on its behalf, see
core/lifecycle/write_behind.py). When the call ends: `memoryd_rpc_requests_total`,
`memoryd_rpc_duration_seconds`, and one `rpc` log line with the method, status code,
latency, request id, tenant and key id.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
from prometheus_client import Counter, Gauge, Histogram

from memoryd.core.observe import correlated
from memoryd.transport.interceptors import SERVICE_PREFIX, AroundCall, CallContext, Context
from memoryd.transport.metrics import Metrics

log = logging.getLogger("memoryd.rpc")

REQUEST_ID_HEADER = "x-request-id"
# A caller's id is used only if it is short and plain (it goes into every log line).
_USABLE_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")

# Server-side trouble is logged louder than a caller's mistake.
_ERROR_CODES = frozenset(
    {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS}
)
_WARNING_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)


def caller_request_id(details: grpc.HandlerCallDetails) -> str:
    """The caller's x-request-id, or "" when it sent none (or one unfit for logs)."""
    for key, value in details.invocation_metadata or ():
        if key == REQUEST_ID_HEADER and isinstance(value, str) and _USABLE_ID.fullmatch(value):
            return value
    return ""


def _level(code: grpc.StatusCode) -> int:
    if code in _ERROR_CODES:
        return logging.ERROR
    if code in _WARNING_CODES:
        return logging.WARNING
    return logging.INFO


class Observability(AroundCall):
    def __init__(self, metrics: Metrics, calls: CallContext) -> None:
        self._metrics = metrics
        self._calls = calls
        # Each metric's child per label values, looked up once (`labels` validates and
        # takes a lock on every use).
        self._in_flight: dict[str, Gauge] = {}
        self._requests: dict[tuple[str, str], Counter] = {}
        self._durations: dict[str, Histogram] = {}

    @asynccontextmanager
    async def around(
        self, details: grpc.HandlerCallDetails, context: Context
    ) -> AsyncIterator[None]:
        method = details.method.removeprefix(SERVICE_PREFIX)
        in_flight = self._in_flight.get(method)
        if in_flight is None:
            in_flight = self._in_flight[method] = self._metrics.rpc_in_flight.labels(method)
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        in_flight.inc()
        with correlated(caller_request_id(details)) as rid:
            try:
                await context.send_initial_metadata(((REQUEST_ID_HEADER, rid),))
                yield
                code = context.code() or grpc.StatusCode.OK
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except (asyncio.CancelledError, GeneratorExit):
                code = grpc.StatusCode.CANCELLED
                raise
            except BaseException:
                code = grpc.StatusCode.UNKNOWN
                raise
            finally:
                in_flight.dec()
                elapsed = time.perf_counter() - started
                self._count(method, code.name).inc()
                duration = self._durations.get(method)
                if duration is None:
                    duration = self._durations[method] = self._metrics.rpc_duration.labels(method)
                duration.observe(elapsed)
                self._log(method, code, elapsed)

    def _count(self, method: str, code: str) -> Counter:
        counter = self._requests.get((method, code))
        if counter is None:
            counter = self._requests[method, code] = self._metrics.rpc_requests.labels(method, code)
        return counter

    def _log(self, method: str, code: grpc.StatusCode, elapsed_s: float) -> None:
        try:
            principal = self._calls.principal()
        except LookupError:  # refused before a principal was known
            tenant, key_id = "", ""
        else:
            tenant = principal.tenant
            # The identity's key id, once principals carry one (API keys); "" until then.
            key_id = str(getattr(principal, "key_id", "") or "")
        log.log(
            _level(code),
            "rpc",
            extra={
                "method": method,
                "code": code.name,
                "latency_ms": round(elapsed_s * 1000, 3),
                "tenant": tenant,
                "key_id": key_id,
            },
        )
