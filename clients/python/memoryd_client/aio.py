"""The asyncio client: the same methods as `MemoryClient`, as coroutines over grpc.aio."""

from __future__ import annotations

import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Unpack

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memoryd_client import _requests
from memoryd_client._channel import (
    DEFAULT_STREAM_TIMEOUT,
    DEFAULT_TIMEOUT,
    ChannelConfig,
    RetryPolicy,
    request_id_of,
)
from memoryd_client._streams import ExportChecker, ItemLike, import_requests
from memoryd_client.client import DEFAULT, Timeout
from memoryd_client.errors import from_rpc_error
from memoryd_client.results import (
    AddBatchResult,
    AddResult,
    DeleteResult,
    EndSessionResult,
    GetResult,
    ImportResult,
    MemoryItem,
    PruneResult,
    RenderedContext,
    RetrieveResult,
    UsageResult,
)
from memoryd_client.v1 import memory_pb2 as pb
from memoryd_client.v1 import memory_pb2_grpc as pb_grpc

__all__ = ["AsyncExportStream", "AsyncMemoryClient"]


class AsyncExportStream(AsyncIterator[MemoryItem]):
    """`ExportStream` for asyncio: `async for item in client.export(...)`."""

    def __init__(self, call: Any, request_id: str) -> None:
        self._call = call
        self._request_id = request_id
        self._checker = ExportChecker()
        self._started = False
        self._items: AsyncIterator[MemoryItem] | None = None

    @property
    def header(self) -> pb.ExportHeader | None:
        return self._checker.header

    @property
    def trailer(self) -> pb.ExportTrailer | None:
        return self._checker.trailer

    @property
    def verified(self) -> bool:
        return self._checker.verified

    async def messages(self) -> AsyncIterator[pb.ExportResponse]:
        if self._started:
            raise RuntimeError("an export stream can be read once")
        self._started = True
        try:
            async for message in self._call:
                self._checker.see(message)
                yield message
        except grpc.RpcError as err:
            raise from_rpc_error(err, self._request_id) from err
        self._checker.finish()

    async def _item_iter(self) -> AsyncIterator[MemoryItem]:
        async for message in self.messages():
            if message.HasField("item"):
                yield MemoryItem.of(message.item)

    def __aiter__(self) -> AsyncIterator[MemoryItem]:
        return self

    async def __anext__(self) -> MemoryItem:
        if self._items is None:
            self._items = self._item_iter()
        return await self._items.__anext__()

    def cancel(self) -> None:
        self._call.cancel()


async def _aiter(values: Iterable[Any] | AsyncIterable[Any]) -> AsyncIterator[Any]:
    if isinstance(values, AsyncIterable):
        async for value in values:
            yield value
    else:
        for value in values:
            yield value


class AsyncMemoryClient:
    """`MemoryClient` for asyncio; create it inside the event loop that uses it.

    async with AsyncMemoryClient("127.0.0.1:50051", api_key="...") as client:
        await client.add(user_id="ana", content="Prefers window seats")
        hits = await client.retrieve(user_id="ana", query="seats", top_k=5)
    """

    def __init__(
        self,
        target: str = "127.0.0.1:50051",
        api_key: str | None = None,
        *,
        tls: bool | None = None,
        root_certificates: bytes | str | Path | None = None,
        certificate_chain: bytes | str | Path | None = None,
        private_key: bytes | str | Path | None = None,
        tls_server_name: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        stream_timeout: float | None = DEFAULT_STREAM_TIMEOUT,
        retry: RetryPolicy | None = None,
        options: Iterable[tuple[str, Any]] = (),
    ) -> None:
        self._config = ChannelConfig(
            target,
            api_key,
            tls,
            root_certificates,
            certificate_chain,
            private_key,
            tls_server_name,
            retry,
            tuple(options),
        )
        self._timeout = timeout
        self._stream_timeout = stream_timeout
        opts = self._config.channel_options()
        self.channel: grpc.aio.Channel = (
            grpc.aio.secure_channel(target, self._config.credentials(), opts)
            if self._config.secure
            else grpc.aio.insecure_channel(target, opts)
        )
        self.stub = pb_grpc.MemoryServiceStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)

    @classmethod
    def from_env(cls, **kwargs: Any) -> AsyncMemoryClient:
        """Target and key from MEMORYD_TARGET and MEMORYD_API_KEY (keywords win)."""
        kwargs.setdefault("target", os.environ.get("MEMORYD_TARGET", "127.0.0.1:50051"))
        kwargs.setdefault("api_key", os.environ.get("MEMORYD_API_KEY") or None)
        return cls(**kwargs)

    async def close(self) -> None:
        await self.channel.close(grace=None)

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _deadline(self, timeout: Timeout, stream: bool = False) -> float | None:
        if timeout is DEFAULT:
            return self._stream_timeout if stream else self._timeout
        return timeout

    async def _unary(
        self, method: Callable[..., Any], request: Any, timeout: Timeout, request_id: str | None
    ) -> Any:
        metadata = self._config.metadata(request_id)
        try:
            return await method(request, timeout=self._deadline(timeout), metadata=metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err, request_id_of(metadata)) from err

    async def add(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.AddArgs],
    ) -> AddResult:
        """Store one memory (tier default long_term)."""
        request = _requests.add(args)
        return AddResult.of(await self._unary(self.stub.Add, request, timeout, request_id))

    async def add_batch(
        self,
        items: Iterable[_requests.AddArgs],
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
    ) -> AddBatchResult:
        """Store several memories in one call (at most the server's limits.max_batch_items,
        256 by default): each item takes add()'s arguments and gets its own result or
        error, in order; an invalid item fails alone."""
        request = _requests.add_batch(items)
        return AddBatchResult.of(
            await self._unary(self.stub.AddBatch, request, timeout, request_id)
        )

    async def retrieve(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.RetrieveArgs],
    ) -> RetrieveResult:
        """The memories most relevant to `query`, best first."""
        request = _requests.retrieve(args)
        reply = await self._unary(self.stub.Retrieve, request, timeout, request_id)
        return RetrieveResult.of(reply)

    async def get(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.LookupArgs],
    ) -> GetResult:
        """Memories by id (or key, for working and persona)."""
        request = _requests.get(args)
        return GetResult.of(await self._unary(self.stub.Get, request, timeout, request_id))

    async def delete(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.LookupArgs],
    ) -> DeleteResult:
        """Delete memories by id (or key, for working and persona)."""
        request = _requests.delete(args)
        return DeleteResult.of(await self._unary(self.stub.Delete, request, timeout, request_id))

    async def prune(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.PruneArgs],
    ) -> PruneResult:
        """Remove or archive memories in bulk by a strategy."""
        request = _requests.prune(args)
        return PruneResult.of(await self._unary(self.stub.Prune, request, timeout, request_id))

    def export(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.ExportArgs],
    ) -> AsyncExportStream:
        """Every memory of a user: `async for item in client.export(user_id=...)`."""
        metadata = self._config.metadata(request_id)
        call = self.stub.Export(
            _requests.export(args), timeout=self._deadline(timeout, True), metadata=metadata
        )
        return AsyncExportStream(call, request_id_of(metadata))

    async def import_(
        self,
        *,
        user_id: str,
        items: Iterable[ItemLike] | AsyncIterable[ItemLike] | None = None,
        messages: Iterable[pb.ExportResponse] | AsyncIterable[pb.ExportResponse] | None = None,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
    ) -> ImportResult:
        """Restore memories, idempotent by id (see `MemoryClient.import_`)."""
        metadata = self._config.metadata(request_id)
        if (items is None) == (messages is None):
            raise ValueError("pass exactly one of items= or messages=")
        collected_items = [i async for i in _aiter(items)] if items is not None else None
        collected = [m async for m in _aiter(messages)] if messages is not None else None
        requests = import_requests(user_id, collected_items, collected)
        try:
            reply = await self.stub.Import(
                requests, timeout=self._deadline(timeout, True), metadata=metadata
            )
        except grpc.RpcError as err:
            raise from_rpc_error(err, request_id_of(metadata)) from err
        return ImportResult.of(reply)

    async def usage(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.ScopeArgs],
    ) -> UsageResult:
        """Counts, sizes, quota percentages, alerts and estimated cost."""
        request = _requests.usage(args)
        return UsageResult.of(await self._unary(self.stub.Usage, request, timeout, request_id))

    async def render_context(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.RenderContextArgs],
    ) -> RenderedContext:
        """The `<memory>` block for a system prompt, within a token budget."""
        request = _requests.render_context(args)
        reply = await self._unary(self.stub.RenderContext, request, timeout, request_id)
        return RenderedContext.of(reply)

    async def end_session(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.EndSessionArgs],
    ) -> EndSessionResult:
        """Close a session (session_id), optionally extracting facts from its messages."""
        request = _requests.end_session(args)
        reply = await self._unary(self.stub.EndSession, request, timeout, request_id)
        return EndSessionResult.of(reply)

    async def health(
        self, service: str = "", *, timeout: Timeout = DEFAULT, request_id: str | None = None
    ) -> str:
        """The server's health status name ("SERVING", "NOT_SERVING", ...)."""
        request = health_pb2.HealthCheckRequest(service=service)
        reply = await self._unary(self._health.Check, request, timeout, request_id)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
