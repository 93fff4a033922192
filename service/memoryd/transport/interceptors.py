"""One interceptor for every MemoryService call: attach the principal, map domain errors.

Both concerns wrap the method handler itself (not the continuation), because in grpc.aio
that is the only place that runs inside the call and sees its exceptions.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import grpc
from grpc_status import rpc_status

from memoryd.core.errors import MemorydError
from memoryd.core.models import Principal
from memoryd.transport.status_map import internal_status, to_rpc_status

log = logging.getLogger(__name__)

SERVICE_PREFIX = "/memoryd.v1.MemoryService/"


class Authenticator(Protocol):
    def authenticate(self, metadata: tuple[tuple[str, str | bytes], ...]) -> Principal: ...


class DefaultTenant:
    """No authentication yet: every caller belongs to one tenant."""

    def __init__(self, tenant: str = "default") -> None:
        self._principal = Principal(tenant=tenant)

    def authenticate(self, metadata: tuple[tuple[str, str | bytes], ...]) -> Principal:
        return self._principal


class CallContext:
    """Where a handler finds the principal of the call it serves."""

    def __init__(self) -> None:
        self._principal: contextvars.ContextVar[Principal] = contextvars.ContextVar("principal")

    def principal(self) -> Principal:
        return self._principal.get()

    def bind(self, principal: Principal) -> None:
        self._principal.set(principal)


async def _abort(context: grpc.aio.ServicerContext[Any, Any], exc: Exception) -> None:
    if isinstance(exc, MemorydError):
        status = to_rpc_status(exc)
    else:
        log.exception("unexpected error in a call", exc_info=exc)
        status = internal_status()
    grpc_status = rpc_status.to_status(status)
    await context.abort(grpc_status.code, grpc_status.details, grpc_status.trailing_metadata)


Behavior = Callable[..., Any]


class ServiceInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    def __init__(self, authenticator: Authenticator, calls: CallContext) -> None:
        self._auth = authenticator
        self._calls = calls

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None or not handler_call_details.method.startswith(SERVICE_PREFIX):
            return handler
        metadata = tuple(handler_call_details.invocation_metadata or ())
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(handler.unary_unary, metadata),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._wrap_unary(handler.stream_unary, metadata),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(handler.unary_stream, metadata),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        assert handler.stream_stream is not None
        return grpc.stream_stream_rpc_method_handler(
            self._wrap_stream(handler.stream_stream, metadata),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _wrap_unary(self, behavior: Behavior, metadata: Any) -> Behavior:
        async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            # Each RPC runs in its own task with its own context copy: no reset needed.
            self._calls.bind(self._auth.authenticate(metadata))
            try:
                return await behavior(request, context)
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await _abort(context, exc)

        return call

    def _wrap_stream(self, behavior: Behavior, metadata: Any) -> Behavior:
        async def call(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            self._calls.bind(self._auth.authenticate(metadata))
            try:
                async for response in behavior(request, context):
                    yield response
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await _abort(context, exc)

        return call
