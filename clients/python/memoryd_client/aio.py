"""The asyncio client: the same methods as `MemoryClient`, as coroutines over grpc.aio."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from types import TracebackType
from typing import Any, ClassVar, TypeVar, Unpack

import grpc
from grpc_health.v1 import health_pb2

from memoryd_client import _base, _requests
from memoryd_client._base import DEFAULT, ClientBase, Timeout, Unary
from memoryd_client._channel import request_id_of
from memoryd_client._streams import ExportStreamBase, ItemLike, import_requests
from memoryd_client.errors import from_rpc_error
from memoryd_client.results import (
    AddBatchResult,
    AddResult,
    DeleteResult,
    EndSessionResult,
    GetResult,
    ImportResult,
    ListMemoriesResult,
    ListUsersResult,
    MemoryItem,
    PruneResult,
    RenderedContext,
    RetrieveResult,
    UsageResult,
)
from memoryd_client.v1 import memory_pb2 as pb
from memoryd_client.v1 import memory_pb2_grpc as pb_grpc

__all__ = ["AsyncExportStream", "AsyncMemoryClient"]

A = TypeVar("A")
R = TypeVar("R")


class AsyncExportStream(ExportStreamBase, AsyncIterator[MemoryItem]):
    """`ExportStream` for asyncio: `async for item in client.export(...)`."""

    def __init__(self, call: Any, request_id: str) -> None:
        super().__init__(call, request_id)
        self._items: AsyncIterator[MemoryItem] | None = None

    async def messages(self) -> AsyncIterator[pb.ExportResponse]:
        self._start()
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


async def _aiter(values: Iterable[Any] | AsyncIterable[Any]) -> AsyncIterator[Any]:
    if isinstance(values, AsyncIterable):
        async for value in values:
            yield value
    else:
        for value in values:
            yield value


class AsyncMemoryClient(ClientBase):
    """`MemoryClient` for asyncio; create it inside the event loop that uses it.

    async with AsyncMemoryClient("127.0.0.1:50051", api_key="...") as client:
        await client.add(user_id="ana", content="Prefers window seats")
        hits = await client.retrieve(user_id="ana", query="seats", top_k=5)
    """

    _grpc: ClassVar[Any] = grpc.aio
    channel: grpc.aio.Channel
    stub: pb_grpc.MemoryServiceAsyncStub

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

    async def _unary(
        self,
        method: Callable[..., Any],
        request: Any,
        timeout: Timeout,
        request_id: str | None,
        stream: bool = False,
    ) -> Any:
        metadata = self._config.metadata(request_id)
        try:
            return await method(request, timeout=self._deadline(timeout, stream), metadata=metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err, request_id_of(metadata)) from err

    async def _call(self, rpc: Unary[A, R], args: A, timeout: Timeout, request_id: str | None) -> R:
        method = getattr(self.stub, rpc.method)
        return rpc.result(await self._unary(method, rpc.build(args), timeout, request_id))

    async def add(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.AddArgs],
    ) -> AddResult:
        """Store one memory (tier default long_term)."""
        return await self._call(_base.ADD, args, timeout, request_id)

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
        return await self._call(_base.ADD_BATCH, items, timeout, request_id)

    async def retrieve(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.RetrieveArgs],
    ) -> RetrieveResult:
        """The memories most relevant to `query`, best first."""
        return await self._call(_base.RETRIEVE, args, timeout, request_id)

    async def get(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.LookupArgs],
    ) -> GetResult:
        """Memories by id (or key, for working and persona)."""
        return await self._call(_base.GET, args, timeout, request_id)

    async def delete(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.LookupArgs],
    ) -> DeleteResult:
        """Delete memories by id (or key, for working and persona)."""
        return await self._call(_base.DELETE, args, timeout, request_id)

    async def prune(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.PruneArgs],
    ) -> PruneResult:
        """Remove or archive memories in bulk by a strategy."""
        return await self._call(_base.PRUNE, args, timeout, request_id)

    def export(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.ExportArgs],
    ) -> AsyncExportStream:
        """Every memory of a user: `async for item in client.export(user_id=...)`."""
        return AsyncExportStream(*self._export_call(_requests.export(args), timeout, request_id))

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
        if (items is None) == (messages is None):
            raise ValueError("pass exactly one of items= or messages=")
        collected_items = [i async for i in _aiter(items)] if items is not None else None
        collected = [m async for m in _aiter(messages)] if messages is not None else None
        requests = import_requests(user_id, collected_items, collected)
        reply = await self._unary(self.stub.Import, requests, timeout, request_id, stream=True)
        return ImportResult.of(reply)

    async def list_users(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.ListUsersArgs],
    ) -> ListUsersResult:
        """A page of the tenant's users with their usage (reader and admin credentials)."""
        return await self._call(_base.LIST_USERS, args, timeout, request_id)

    async def list_memories(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.ListMemoriesArgs],
    ) -> ListMemoriesResult:
        """A page of a user's memories across the stored tiers, filtered."""
        return await self._call(_base.LIST_MEMORIES, args, timeout, request_id)

    async def usage(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.ScopeArgs],
    ) -> UsageResult:
        """Counts, sizes, quota percentages, alerts and estimated cost."""
        return await self._call(_base.USAGE, args, timeout, request_id)

    async def render_context(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.RenderContextArgs],
    ) -> RenderedContext:
        """The `<memory>` block for a system prompt, within a token budget."""
        return await self._call(_base.RENDER_CONTEXT, args, timeout, request_id)

    async def end_session(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.EndSessionArgs],
    ) -> EndSessionResult:
        """Close a session (session_id), optionally extracting facts from its messages."""
        return await self._call(_base.END_SESSION, args, timeout, request_id)

    async def health(
        self, service: str = "", *, timeout: Timeout = DEFAULT, request_id: str | None = None
    ) -> str:
        """The server's health status name ("SERVING", "NOT_SERVING", ...)."""
        request = health_pb2.HealthCheckRequest(service=service)
        reply = await self._unary(self._health.Check, request, timeout, request_id)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
