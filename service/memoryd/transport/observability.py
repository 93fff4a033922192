"""The outermost concern of every MemoryService call: its request id, metrics and log line.

The request id is the caller's `x-request-id` metadata when it sends a usable one, else a
new one; it is echoed in the response's trailing metadata (sent with the status, so it
costs no write of its own; on failures too) and is on every log line written
while the call is served (and on those of work queued on its behalf, see
core/lifecycle/write_behind.py). When the call ends: `memoryd_rpc_requests_total`,
`memoryd_rpc_duration_seconds`, and one `rpc` log line with the method, status code,
latency, request id, tenant and key id. It also records the caller's deadline, which
bounds the call's store calls (stores/call_budget.py).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import grpc
from prometheus_client import Counter, Gauge, Histogram

from memoryd.core.observe import bind_request_id, correlated
from memoryd.stores import call_budget
from memoryd.telemetry.metrics import Metrics
from memoryd.transport.interceptors import (
    SERVICE_PREFIX,
    AroundCall,
    Behavior,
    CallContext,
    Context,
)

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


def caller_request_id(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    """The caller's x-request-id, or "" when it sent none (or one unfit for logs)."""
    for key, value in metadata or ():
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

    def _children(self, method: str) -> tuple[Gauge, Histogram]:
        in_flight = self._in_flight.get(method)
        if in_flight is None:
            in_flight = self._in_flight[method] = self._metrics.rpc_in_flight.labels(method)
        duration = self._durations.get(method)
        if duration is None:
            duration = self._durations[method] = self._metrics.rpc_duration.labels(method)
        return in_flight, duration

    def around_unary(self, method: str, behavior: Behavior) -> Behavior:
        """`around` for a call with one response, as one coroutine (no context manager)."""
        name = method.removeprefix(SERVICE_PREFIX)
        in_flight, duration = self._children(name)
        finish = self._finish

        async def call(request: Any, context: Context) -> Any:
            started = time.perf_counter()
            in_flight.inc()
            code = grpc.StatusCode.OK
            # The call runs in a task of its own: the id needs no reset.
            rid = bind_request_id(caller_request_id(context.invocation_metadata()))
            # Trailing metadata goes out with the status, in the same batch; sending it as
            # initial metadata would cost a write of its own before the response.
            context.set_trailing_metadata(((REQUEST_ID_HEADER, rid),))
            # Store calls end before the caller's deadline (stores/call_budget.py).
            call_budget.start(context.time_remaining())
            try:
                response = await behavior(request, context)
                code = context.code() or grpc.StatusCode.OK
                return response
            except BaseException as exc:
                code = _failed_with(exc, context)
                raise
            finally:
                in_flight.dec()
                finish(name, code, duration, time.perf_counter() - started)

        return call

    @asynccontextmanager
    async def around(
        self, details: grpc.HandlerCallDetails, context: Context
    ) -> AsyncIterator[None]:
        method = details.method.removeprefix(SERVICE_PREFIX)
        in_flight, duration = self._children(method)
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        in_flight.inc()
        with correlated(caller_request_id(details.invocation_metadata)) as rid:
            context.set_trailing_metadata(((REQUEST_ID_HEADER, rid),))
            budget = call_budget.start(context.time_remaining())
            try:
                yield
                code = context.code() or grpc.StatusCode.OK
            except BaseException as exc:
                code = _failed_with(exc, context)
                raise
            finally:
                call_budget.end(budget)
                in_flight.dec()
                self._finish(method, code, duration, time.perf_counter() - started)

    def _finish(
        self, method: str, code: grpc.StatusCode, duration: Histogram, elapsed_s: float
    ) -> None:
        self._count(method, code.name).inc()
        duration.observe(elapsed_s)
        self._log(method, code, elapsed_s)

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


def _failed_with(exc: BaseException, context: Context) -> grpc.StatusCode:
    """The status a call ends with when its handler raised `exc`: an abort's own code, a
    cancellation's, else UNKNOWN."""
    if isinstance(exc, grpc.aio.AbortError):
        return context.code() or grpc.StatusCode.UNKNOWN
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN
