"""The chain of concerns around every MemoryService call.

Each concern is one `AroundCall` subclass whose `around` is an async context manager
entered for the whole call (a unary call, or every message of a stream). They wrap the
method handler itself, once, as the server registers it (`CallChain.registrar`): that is
where a call's exceptions are seen, and it costs nothing per call, unlike a grpc.aio
interceptor. `server.py` lists them outermost first:

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
from collections.abc import AsyncIterator, Callable, Sequence
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
Behavior = Callable[..., Any]
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


class AroundCall:
    """Runs `around(details, context)` around every MemoryService call; other services
    (health, reflection) pass through, apart from the malformed-request check below.

    Every service's request deserializer is made tolerant: bytes that are not a valid
    message become INVALID_ARGUMENT "malformed request" (with one rate-limited log line),
    not an exception in gRPC's own code (UNKNOWN, a traceback per request). The innermost
    layer makes the check, inside its `around`, so the identity is known by then.

    A method's handler is wrapped once, when it is registered (`CallChain`), so the
    per-call work is only the concern's own."""

    # False for a concern whose `around` does nothing (its work is in `wrap_behavior`):
    # its calls then skip entering it.
    surrounds = True

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


class CallChain:
    """Several concerns, outermost first, around every handler of a server: each method's
    handler is wrapped by all of them once, when it is registered (`registrar`), so no
    grpc interceptor runs per call. A grpc.aio interceptor costs an extra coroutine and
    a handler lookup on every call, a measurable share of the shortest ones (ADR 0008)."""

    def __init__(self, concerns: list[AroundCall]) -> None:
        self._concerns = concerns

    def wrap(
        self, handler: grpc.RpcMethodHandler[Any, Any], method: str
    ) -> grpc.RpcMethodHandler[Any, Any]:
        for concern in reversed(self._concerns):  # the innermost wraps first
            handler = concern.wrap_handler(handler, method)
        return handler

    def registrar(self, server: grpc.aio.Server) -> Registrar:
        """What the generated ``add_*Servicer_to_server`` functions (and health,
        reflection) register through, so that every handler they add is wrapped."""
        return Registrar(server, self)


class Registrar:
    """The two registration calls of a grpc.aio server, wrapping every handler by a
    `CallChain` on its way in."""

    def __init__(self, server: grpc.aio.Server, chain: CallChain) -> None:
        self._server = server
        self._chain = chain

    def add_generic_rpc_handlers(
        self, handlers: Sequence[grpc.GenericRpcHandler[Any, Any]]
    ) -> None:
        self._server.add_generic_rpc_handlers(
            tuple(_ChainedGeneric(handler, self._chain) for handler in handlers)
        )

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        # Registered handlers are found before generic ones (grpc.aio 1.62+; untyped).
        self._server.add_registered_method_handlers(  # type: ignore[attr-defined]
            service,
            {name: self._chain.wrap(h, f"/{service}/{name}") for name, h in handlers.items()},
        )


class _ChainedGeneric(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    """A generic handler's answers, wrapped once per method (grpc asks on every call that
    no registered handler serves)."""

    def __init__(self, inner: grpc.GenericRpcHandler[Any, Any], chain: CallChain) -> None:
        self._inner = inner
        self._chain = chain
        self._cache: _Cache = {}

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        found = self._cache.get(method)
        if found is not None and found[0] is handler:
            return found[1]
        wrapped = self._chain.wrap(handler, method)
        self._cache[method] = (handler, wrapped)
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
