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


# A method's handler as found, and as wrapped: by method name.
_Cache = dict[str, tuple["grpc.RpcMethodHandler[Any, Any]", "grpc.RpcMethodHandler[Any, Any]"]]


class _CallDetails(grpc.HandlerCallDetails):
    """One call's method and metadata, for a handler wrapped once per method: the
    metadata is read from the call's context when the call runs."""

    __slots__ = ("invocation_metadata", "method")

    def __init__(self, method: str, metadata: Any) -> None:
        self.method = method
        self.invocation_metadata = metadata


class AroundCall(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Runs `around(details, context)` around every MemoryService call; other services
    (health, reflection) pass through, apart from the malformed-request check below.

    Every service's request deserializer is made tolerant: bytes that are not a valid
    message become INVALID_ARGUMENT "malformed request" (with one rate-limited log line),
    not an exception in gRPC's own code (UNKNOWN, a traceback per request). The innermost
    layer makes the check, inside its `around`, so the identity is known by then.

    A method's handler is wrapped once and reused for every later call of it (the
    per-call work is then only the concern's own); `CallChain` composes several concerns
    into one interceptor the same way."""

    # False for a concern whose `around` does nothing (its work is in `wrap_behavior`):
    # its calls then skip entering it.
    surrounds = True
    _handlers: _Cache | None = None

    def around(
        self, details: grpc.HandlerCallDetails, context: Context
    ) -> AbstractAsyncContextManager[None]:
        raise NotImplementedError

    def around_unary(self, method: str, behavior: Behavior) -> Behavior | None:
        """Optional: `behavior` (of a call with one response) with this concern around it,
        as one coroutine function doing what `around` does. Cheaper per call than entering
        an async context manager, which matters on the shortest calls (a working-tier Add).
        None: `around` is used. Called once per method."""
        return None

    def wrap_behavior(
        self, behavior: Behavior, details: grpc.HandlerCallDetails, generates: bool
    ) -> Behavior:
        """For a concern that needs the request itself (grants, rate limits): wrap the
        method's behaviour, which then runs inside `around` and after the malformed-request
        check. `generates`: the behaviour is an async generator (a response stream).
        Called once per method: `details` holds the method only, no call's metadata."""
        return behavior

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any]:
        if self._handlers is None:
            self._handlers = {}
        return await CallChain.intercept([self], self._handlers, continuation, handler_call_details)

    def wrap_handler(
        self, handler: grpc.RpcMethodHandler[Any, Any], method: str
    ) -> grpc.RpcMethodHandler[Any, Any]:
        """`handler` (of `method`) with this concern around each of its calls."""
        details = _CallDetails(method, ())
        ours = method.startswith(SERVICE_PREFIX)
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
                around = self._around_of(method) if ours and self.surrounds else None
                # A streaming handler may also be a coroutine writing with context.write
                # (grpc_health's Watch): that one is wrapped like a unary one.
                generates = responses_stream and inspect.isasyncgenfunction(behavior)
                if ours:
                    concern = self.wrap_behavior(behavior, details, generates)
                    if concern is not behavior:
                        behavior = _unless_malformed(concern, behavior, generates)
                fast = None
                if around is not None and not generates:
                    if check:  # inside the concern, as `around` has it
                        behavior = self._wrap_unary(behavior, None, check, requests_stream)
                        check = False
                    fast = self.around_unary(method, behavior)
                if fast is not None:
                    behavior = fast
                elif around is not None or check:
                    wrap = self._wrap_stream if generates else self._wrap_unary
                    behavior = wrap(behavior, around, check, requests_stream)
                return make(  # type: ignore[no-any-return]
                    behavior,
                    request_deserializer=_tolerant(handler.request_deserializer, method),
                    response_serializer=handler.response_serializer,
                )
        return handler

    def _around_of(self, method: str) -> Around:
        around = self.around
        return lambda context: around(_CallDetails(method, context.invocation_metadata()), context)

    @staticmethod
    def _wrap_unary(
        behavior: Behavior, around: Around | None, check: bool, streams: bool
    ) -> Behavior:
        async def checked(request: Any, context: Context) -> Any:
            if check and streams:
                request = _checked(request, context)
            elif check and request is MALFORMED:
                await _refuse_malformed(context)
            return await behavior(request, context)

        if around is None:
            return checked

        async def call(request: Any, context: Context) -> Any:
            async with around(context):
                return await checked(request, context)

        return call

    @staticmethod
    def _wrap_stream(
        behavior: Behavior, around: Around | None, check: bool, streams: bool
    ) -> Behavior:
        async def call(request: Any, context: Context) -> AsyncIterator[Any]:
            async with around(context) if around is not None else nullcontext():
                if check and streams:
                    request = _checked(request, context)
                elif check and request is MALFORMED:
                    await _refuse_malformed(context)
                async for response in behavior(request, context):
                    yield response

        return call


class CallChain(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Several concerns as one interceptor, outermost first: each method's handler is
    wrapped by all of them once, on its first call, and reused after that. A chain of
    separate interceptors would have grpc run each one's `intercept_service` on every call
    and rebuild every wrapper."""

    def __init__(self, concerns: list[AroundCall]) -> None:
        self._concerns = concerns
        self._handlers: _Cache = {}

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any]:
        return await self.intercept(
            self._concerns, self._handlers, continuation, handler_call_details
        )

    @staticmethod
    async def intercept(
        concerns: list[AroundCall],
        cache: _Cache,
        continuation: Continuation,
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(details)
        if handler is None:
            return handler
        method = details.method
        found = cache.get(method)
        if found is not None and found[0] is handler:
            return found[1]
        wrapped = handler
        for concern in reversed(concerns):  # the innermost wraps first
            wrapped = concern.wrap_handler(wrapped, method)
        cache[method] = (handler, wrapped)
        return wrapped


class ErrorMapping(AroundCall):
    """Domain errors become their status (transport/status_map.py); anything else is a bug:
    logged with its traceback and answered INTERNAL without details."""

    def around_unary(self, method: str, behavior: Behavior) -> Behavior:
        async def call(request: Any, context: Context) -> Any:
            try:
                return await behavior(request, context)
            except grpc.aio.AbortError:
                raise
            except MemorydError as exc:
                await _abort(context, to_rpc_status(exc))
            except Exception:
                log.exception("unexpected error in %s", method)
                await _abort(context, internal_status())

        return call

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
    """Ends the call with `status`; the trailing metadata set so far (the request id) is
    kept, since `abort`'s replaces it."""
    grpc_status = rpc_status.to_status(status)
    trailing = (*(context.trailing_metadata() or ()), *grpc_status.trailing_metadata)
    await context.abort(grpc_status.code, grpc_status.details, trailing)


class CallContext:
    """Where a handler finds the principal of the call it serves."""

    def __init__(self) -> None:
        self._principal: contextvars.ContextVar[Principal] = contextvars.ContextVar("principal")

    def principal(self) -> Principal:
        return self._principal.get()

    def bind(self, principal: Principal) -> None:
        self._principal.set(principal)
