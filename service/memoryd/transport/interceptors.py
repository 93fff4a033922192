"""The interceptor chain around every MemoryService call.

Each concern is one `AroundCall` subclass whose `around` is an async context manager
entered for the whole call (a unary call, or every message of a stream). They wrap the
method handler itself, not the continuation, because in grpc.aio that is the only place
that runs inside the call and sees its exceptions. `server.py` lists them outermost first:

    observability (request id, metrics, log line) -> errors (domain error -> status)
        -> identity (principal, grants; transport/identity.py)
        -> rate limits (transport/limits.py) -> servicer

The base class also makes every service's request decoding tolerant (Health's included):
undecodable bytes are answered INVALID_ARGUMENT "malformed request", never UNKNOWN.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

import grpc
from google.rpc import status_pb2
from grpc_status import rpc_status

from memoryd.core.errors import InvalidArgument, MemorydError
from memoryd.core.models import Principal
from memoryd.core.ratelimit_log import EveryFewSeconds
from memoryd.transport.status_map import internal_status, to_rpc_status

log = logging.getLogger(__name__)

SERVICE_PREFIX = "/memoryd.v1.MemoryService/"

Context = grpc.aio.ServicerContext[Any, Any]
Metadata = tuple[tuple[str, str | bytes], ...]
Behavior = Callable[..., Any]
Continuation = Callable[[grpc.HandlerCallDetails], Awaitable["grpc.RpcMethodHandler[Any, Any]"]]
Around = Callable[[Context], AbstractAsyncContextManager[None]]


class _Malformed:
    """Stands for a request message that could not be decoded (see `_tolerant`)."""

    def __repr__(self) -> str:
        return "<malformed request>"


MALFORMED: Any = _Malformed()
# Set on a deserializer that already turns undecodable bytes into MALFORMED: the layer that
# wrapped it (the innermost) also refuses MALFORMED, so outer layers leave both alone.
_TOLERANT = "_memoryd_tolerant"


# Undecodable requests cost a client nothing to send: one line every few seconds at most,
# never a traceback per request.
_malformed_log = EveryFewSeconds(log)


def _tolerant(deserializer: Callable[[bytes], Any] | None, method: str) -> Any:
    """`deserializer`, answering MALFORMED instead of raising on bytes that are not a valid
    message (corrupt wire format, invalid UTF-8 in a string, wrong wire types)."""
    if deserializer is None or getattr(deserializer, _TOLERANT, False):
        return deserializer

    def decode(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # the bytes are the client's: any failure is theirs
            _malformed_log.warning(
                "malformed request to %s: %s: %s", method, type(exc).__name__, exc
            )
            return MALFORMED

    setattr(decode, _TOLERANT, True)
    return decode


def malformed_status() -> status_pb2.Status:
    return to_rpc_status(
        InvalidArgument.of("request", "malformed request: the message could not be decoded")
    )


async def _refuse_malformed(context: Context) -> None:
    await _abort(context, malformed_status())


async def _checked(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
    async for request in requests:
        if request is MALFORMED:
            await _refuse_malformed(context)
        yield request


def _unless_malformed(concern: Behavior, plain: Behavior, generates: bool) -> Behavior:
    """`concern` for decoded requests; an undecodable one goes straight on to the layer
    that refuses it (a concern needing the request has nothing to look at)."""
    if generates:

        async def stream(request: Any, context: Context) -> AsyncIterator[Any]:
            chosen = plain if request is MALFORMED else concern
            async for response in chosen(request, context):
                yield response

        return stream

    async def unary(request: Any, context: Context) -> Any:
        return await (plain if request is MALFORMED else concern)(request, context)

    return unary


class AroundCall(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Runs `around(details, context)` around every MemoryService call; other services
    (health, reflection) pass through, apart from the malformed-request check below.

    Every service's request deserializer is made tolerant: bytes that are not a valid
    message become INVALID_ARGUMENT "malformed request" (with one rate-limited log line),
    not an exception in gRPC's own code (UNKNOWN, a traceback per request). The innermost
    layer makes the check, inside its `around`, so the identity is known by then."""

    def around(
        self, details: grpc.HandlerCallDetails, context: Context
    ) -> AbstractAsyncContextManager[None]:
        raise NotImplementedError

    def wrap_behavior(
        self, behavior: Behavior, details: grpc.HandlerCallDetails, generates: bool
    ) -> Behavior:
        """For a concern that needs the request itself (grants, rate limits): wrap the
        method's behaviour, which then runs inside `around` and after the malformed-request
        check. `generates`: the behaviour is an async generator (a response stream)."""
        return behavior

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        details = handler_call_details
        ours = details.method.startswith(SERVICE_PREFIX)
        check = not getattr(handler.request_deserializer, _TOLERANT, False)
        if not ours and not check:
            return handler
        kinds = (
            (handler.unary_unary, grpc.unary_unary_rpc_method_handler, False, False),
            (handler.stream_unary, grpc.stream_unary_rpc_method_handler, True, False),
            (handler.unary_stream, grpc.unary_stream_rpc_method_handler, False, True),
            (handler.stream_stream, grpc.stream_stream_rpc_method_handler, True, True),
        )
        for behavior, make, requests_stream, responses_stream in kinds:
            if behavior is not None:
                around = self._around_of(details, ours)
                # A streaming handler may also be a coroutine writing with context.write
                # (grpc_health's Watch): that one is wrapped like a unary one.
                generates = responses_stream and inspect.isasyncgenfunction(behavior)
                if ours:
                    behavior = _unless_malformed(
                        self.wrap_behavior(behavior, details, generates), behavior, generates
                    )
                wrap = self._wrap_stream if generates else self._wrap_unary
                return make(  # type: ignore[no-any-return]
                    wrap(behavior, around, check, requests_stream),
                    request_deserializer=_tolerant(handler.request_deserializer, details.method),
                    response_serializer=handler.response_serializer,
                )
        return handler

    def _around_of(self, details: grpc.HandlerCallDetails, ours: bool) -> Around:
        if ours:
            return lambda context: self.around(details, context)
        return lambda context: nullcontext()

    @staticmethod
    def _wrap_unary(behavior: Behavior, around: Around, check: bool, streams: bool) -> Behavior:
        async def call(request: Any, context: Context) -> Any:
            async with around(context):
                if check and streams:
                    request = _checked(request, context)
                elif check and request is MALFORMED:
                    await _refuse_malformed(context)
                return await behavior(request, context)

        return call

    @staticmethod
    def _wrap_stream(behavior: Behavior, around: Around, check: bool, streams: bool) -> Behavior:
        async def call(request: Any, context: Context) -> AsyncIterator[Any]:
            async with around(context):
                if check and streams:
                    request = _checked(request, context)
                elif check and request is MALFORMED:
                    await _refuse_malformed(context)
                async for response in behavior(request, context):
                    yield response

        return call


class ErrorMapping(AroundCall):
    """Domain errors become their status (transport/status_map.py); anything else is a bug:
    logged with its traceback and answered INTERNAL without details."""

    @asynccontextmanager
    async def around(
        self, details: grpc.HandlerCallDetails, context: Context
    ) -> AsyncIterator[None]:
        try:
            yield
        except grpc.aio.AbortError:
            raise
        except MemorydError as exc:
            await _abort(context, to_rpc_status(exc))
        except Exception:
            log.exception("unexpected error in %s", details.method)
            await _abort(context, internal_status())


async def _abort(context: Context, status: Any) -> None:
    grpc_status = rpc_status.to_status(status)
    await context.abort(grpc_status.code, grpc_status.details, grpc_status.trailing_metadata)


class CallContext:
    """Where a handler finds the principal of the call it serves."""

    def __init__(self) -> None:
        self._principal: contextvars.ContextVar[Principal] = contextvars.ContextVar("principal")

    def principal(self) -> Principal:
        return self._principal.get()

    def bind(self, principal: Principal) -> None:
        self._principal.set(principal)
