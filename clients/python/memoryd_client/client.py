"""The synchronous client: one method per MemoryService RPC, keyword arguments in,
results with attributes out, typed exceptions on failure."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
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

__all__ = ["DEFAULT", "ExportStream", "MemoryClient", "Timeout"]

A = TypeVar("A")
R = TypeVar("R")


class ExportStream(ExportStreamBase, Iterator[MemoryItem]):
    """The items of an Export, checked as they arrive: at the end the trailer's count and
    checksum must match (else ExportCorrupt). `header`, `trailer` and `verified` are set
    as the stream goes; `messages()` gives the raw stream instead (e.g. to write a file)."""

    def messages(self) -> Iterator[pb.ExportResponse]:
        self._start()
        try:
            for message in self._call:
                self._checker.see(message)
                yield message
        except grpc.RpcError as err:
            raise from_rpc_error(err, self._request_id) from err
        self._checker.finish()

    def __iter__(self) -> Iterator[MemoryItem]:
        return (MemoryItem.of(m.item) for m in self.messages() if m.HasField("item"))

    def __next__(self) -> MemoryItem:
        if not hasattr(self, "_items"):
            self._items = iter(self)
        return next(self._items)


class MemoryClient(ClientBase):
    """A memoryd client over one gRPC channel; use it as a context manager or `close()` it.

        with MemoryClient("127.0.0.1:50051", api_key="...") as client:
            added = client.add(user_id="ana", content="Prefers window seats")
            hits = client.retrieve(user_id="ana", query="seat preference", top_k=5)
            print(hits.items[0].content, hits.items[0].score)

    Credentials: `api_key` (sent as `authorization: Bearer`), `tls=True` for TLS with the
    system roots, `root_certificates` for a private CA, `certificate_chain` + `private_key`
    for mTLS (PEM bytes or paths). Every call sends an `x-request-id` (its `request_id=`, or
    a fresh one), has a deadline (`timeout=`, default the client's) and is retried by gRPC
    on UNAVAILABLE with backoff (`retry=RetryPolicy(...)`; `NO_RETRY` turns it off).
    """

    _grpc: ClassVar[Any] = grpc
    channel: grpc.Channel
    stub: pb_grpc.MemoryServiceStub

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _unary(
        self,
        method: Callable[..., Any],
        request: Any,
        timeout: Timeout,
        request_id: str | None,
        stream: bool = False,
    ) -> Any:
        metadata = self._config.metadata(request_id)
        try:
            return method(request, timeout=self._deadline(timeout, stream), metadata=metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err, request_id_of(metadata)) from err

    def _call(self, rpc: Unary[A, R], args: A, timeout: Timeout, request_id: str | None) -> R:
        method = getattr(self.stub, rpc.method)
        return rpc.result(self._unary(method, rpc.build(args), timeout, request_id))

    def add(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.AddArgs],
    ) -> AddResult:
        """Store one memory (tier default long_term)."""
        return self._call(_base.ADD, args, timeout, request_id)

    def add_batch(
        self,
        items: Iterable[_requests.AddArgs],
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
    ) -> AddBatchResult:
        """Store several memories in one call (at most the server's limits.max_batch_items,
        256 by default): each item takes add()'s arguments and gets its own result or
        error, in order; an invalid item fails alone."""
        return self._call(_base.ADD_BATCH, items, timeout, request_id)

    def retrieve(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.RetrieveArgs],
    ) -> RetrieveResult:
        """The memories most relevant to `query`, best first."""
        return self._call(_base.RETRIEVE, args, timeout, request_id)

    def get(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.LookupArgs],
    ) -> GetResult:
        """Memories by id (or key, for working and persona)."""
        return self._call(_base.GET, args, timeout, request_id)

    def delete(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.LookupArgs],
    ) -> DeleteResult:
        """Delete memories by id (or key, for working and persona)."""
        return self._call(_base.DELETE, args, timeout, request_id)

    def prune(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.PruneArgs],
    ) -> PruneResult:
        """Remove or archive memories in bulk by a strategy."""
        return self._call(_base.PRUNE, args, timeout, request_id)

    def export(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.ExportArgs],
    ) -> ExportStream:
        """Every memory of a user, as an iterator of items checked against the trailer."""
        return ExportStream(*self._export_call(_requests.export(args), timeout, request_id))

    def import_(
        self,
        *,
        user_id: str,
        items: Iterable[ItemLike] | None = None,
        messages: Iterable[pb.ExportResponse] | None = None,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
    ) -> ImportResult:
        """Restore memories, idempotent by id: `items` (e.g. from `export`), framed and
        checksummed here, or the `messages` of an export file (`export_format.read_jsonl`)."""
        requests = import_requests(user_id, items, messages)
        reply = self._unary(self.stub.Import, requests, timeout, request_id, stream=True)
        return ImportResult.of(reply)

    def list_users(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.ListUsersArgs],
    ) -> ListUsersResult:
        """A page of the tenant's users with their usage (reader and admin credentials)."""
        return self._call(_base.LIST_USERS, args, timeout, request_id)

    def list_memories(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.ListMemoriesArgs],
    ) -> ListMemoriesResult:
        """A page of a user's memories across the stored tiers, filtered."""
        return self._call(_base.LIST_MEMORIES, args, timeout, request_id)

    def usage(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.ScopeArgs],
    ) -> UsageResult:
        """Counts, sizes, quota percentages, alerts and estimated cost."""
        return self._call(_base.USAGE, args, timeout, request_id)

    def render_context(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.RenderContextArgs],
    ) -> RenderedContext:
        """The `<memory>` block for a system prompt, within a token budget."""
        return self._call(_base.RENDER_CONTEXT, args, timeout, request_id)

    def end_session(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.EndSessionArgs],
    ) -> EndSessionResult:
        """Close a session (session_id), optionally extracting facts from its messages."""
        return self._call(_base.END_SESSION, args, timeout, request_id)

    def health(
        self, service: str = "", *, timeout: Timeout = DEFAULT, request_id: str | None = None
    ) -> str:
        """The server's health status name ("SERVING", "NOT_SERVING", ...)."""
        request = health_pb2.HealthCheckRequest(service=service)
        reply = self._unary(self._health.Check, request, timeout, request_id)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
