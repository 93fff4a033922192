"""The interceptor chain around every MemoryService call.

Each concern is one `AroundCall` subclass whose `around` is an async context manager
entered for the whole call (a unary call, or every message of a stream). They wrap the
method handler itself, not the continuation, because in grpc.aio that is the only place
that runs inside the call and sees its exceptions. `server.py` lists them outermost first:

    observability (request id, metrics, log line) -> errors (domain error -> status)
        -> identity (principal, grants; transport/identity.py)
        -> rate limits (transport/limits.py) -> servicer
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import grpc
from grpc_status import rpc_status

from memoryd.core.errors import MemorydError
from memoryd.core.models import Principal
from memoryd.transport.status_map import internal_status, to_rpc_status

log = logging.getLogger(__name__)

SERVICE_PREFIX = "/memoryd.v1.MemoryService/"

Context = grpc.aio.ServicerContext[Any, Any]
Metadata = tuple[tuple[str, str | bytes], ...]
Behavior = Callable[..., Any]
Continuation = Callable[[grpc.HandlerCallDetails], Awaitable["grpc.RpcMethodHandler[Any, Any]"]]


class AroundCall(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Runs `around(details, context)` around every MemoryService call; other services
    (health, reflection) pass through untouched."""

    def around(
        self, details: grpc.HandlerCallDetails, context: Context
    ) -> AbstractAsyncContextManager[None]:
        raise NotImplementedError

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None or not handler_call_details.method.startswith(SERVICE_PREFIX):
            return handler
        details = handler_call_details
        kinds = (
            (handler.unary_unary, grpc.unary_unary_rpc_method_handler, False),
            (handler.stream_unary, grpc.stream_unary_rpc_method_handler, False),
            (handler.unary_stream, grpc.unary_stream_rpc_method_handler, True),
            (handler.stream_stream, grpc.stream_stream_rpc_method_handler, True),
        )
        for behavior, make, streams in kinds:
            if behavior is not None:
                wrap = self._wrap_stream if streams else self._wrap_unary
                return make(  # type: ignore[no-any-return]
                    wrap(behavior, details),
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        return handler

    def _wrap_unary(self, behavior: Behavior, details: grpc.HandlerCallDetails) -> Behavior:
        async def call(request: Any, context: Context) -> Any:
            async with self.around(details, context):
                return await behavior(request, context)

        return call

    def _wrap_stream(self, behavior: Behavior, details: grpc.HandlerCallDetails) -> Behavior:
        async def call(request: Any, context: Context) -> AsyncIterator[Any]:
            async with self.around(details, context):
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
