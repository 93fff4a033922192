"""The synchronous client: one method per MemoryService RPC, keyword arguments in,
results with attributes out, typed exceptions on failure."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from enum import Enum
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

__all__ = ["DEFAULT", "ExportStream", "MemoryClient"]


class _Default(Enum):
    TOKEN = 0


# "The client's default": per-call `timeout=DEFAULT` uses the one given to the client,
# `timeout=None` means no deadline.
DEFAULT = _Default.TOKEN
Timeout = float | None | _Default


class ExportStream(Iterator[MemoryItem]):
    """The items of an Export, checked as they arrive: at the end the trailer's count and
    checksum must match (else ExportCorrupt). `header`, `trailer` and `verified` are set
    as the stream goes; `messages()` gives the raw stream instead (e.g. to write a file)."""

    def __init__(self, call: Any, request_id: str) -> None:
        self._call = call
        self._request_id = request_id
        self._checker = ExportChecker()
        self._started = False

    @property
    def header(self) -> pb.ExportHeader | None:
        return self._checker.header

    @property
    def trailer(self) -> pb.ExportTrailer | None:
        return self._checker.trailer

    @property
    def verified(self) -> bool:
        return self._checker.verified

    def messages(self) -> Iterator[pb.ExportResponse]:
        if self._started:
            raise RuntimeError("an export stream can be read once")
        self._started = True
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

    def cancel(self) -> None:
        self._call.cancel()


class MemoryClient:
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
        self.channel: grpc.Channel = (
            grpc.secure_channel(target, self._config.credentials(), opts)
            if self._config.secure
            else grpc.insecure_channel(target, opts)
        )
        # The generated stub, for callers who want protobuf requests and responses.
        self.stub = pb_grpc.MemoryServiceStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)

    @classmethod
    def from_env(cls, **kwargs: Any) -> MemoryClient:
        """Target and key from MEMORYD_TARGET and MEMORYD_API_KEY (keywords win)."""
        kwargs.setdefault("target", os.environ.get("MEMORYD_TARGET", "127.0.0.1:50051"))
        kwargs.setdefault("api_key", os.environ.get("MEMORYD_API_KEY") or None)
        return cls(**kwargs)

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

    def _deadline(self, timeout: Timeout, stream: bool = False) -> float | None:
        if timeout is DEFAULT:
            return self._stream_timeout if stream else self._timeout
        return timeout

    def _unary(
        self, method: Callable[..., Any], request: Any, timeout: Timeout, request_id: str | None
    ) -> Any:
        metadata = self._config.metadata(request_id)
        try:
            return method(request, timeout=self._deadline(timeout), metadata=metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err, request_id_of(metadata)) from err

    def add(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.AddArgs],
    ) -> AddResult:
        """Store one memory (tier default long_term)."""
        return AddResult.of(self._unary(self.stub.Add, _requests.add(args), timeout, request_id))

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
        request = _requests.add_batch(items)
        return AddBatchResult.of(self._unary(self.stub.AddBatch, request, timeout, request_id))

    def retrieve(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.RetrieveArgs],
    ) -> RetrieveResult:
        """The memories most relevant to `query`, best first."""
        request = _requests.retrieve(args)
        return RetrieveResult.of(self._unary(self.stub.Retrieve, request, timeout, request_id))

    def get(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.LookupArgs],
    ) -> GetResult:
        """Memories by id (or key, for working and persona)."""
        return GetResult.of(self._unary(self.stub.Get, _requests.get(args), timeout, request_id))

    def delete(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.LookupArgs],
    ) -> DeleteResult:
        """Delete memories by id (or key, for working and persona)."""
        request = _requests.delete(args)
        return DeleteResult.of(self._unary(self.stub.Delete, request, timeout, request_id))

    def prune(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.PruneArgs],
    ) -> PruneResult:
        """Remove or archive memories in bulk by a strategy."""
        request = _requests.prune(args)
        return PruneResult.of(self._unary(self.stub.Prune, request, timeout, request_id))

    def export(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.ExportArgs],
    ) -> ExportStream:
        """Every memory of a user, as an iterator of items checked against the trailer."""
        metadata = self._config.metadata(request_id)
        call = self.stub.Export(
            _requests.export(args), timeout=self._deadline(timeout, True), metadata=metadata
        )
        return ExportStream(call, request_id_of(metadata))

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
        metadata = self._config.metadata(request_id)
        requests = import_requests(user_id, items, messages)
        try:
            reply = self.stub.Import(
                requests, timeout=self._deadline(timeout, True), metadata=metadata
            )
        except grpc.RpcError as err:
            raise from_rpc_error(err, request_id_of(metadata)) from err
        return ImportResult.of(reply)

    def usage(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.ScopeArgs],
    ) -> UsageResult:
        """Counts, sizes, quota percentages, alerts and estimated cost."""
        request = _requests.usage(args)
        return UsageResult.of(self._unary(self.stub.Usage, request, timeout, request_id))

    def render_context(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.RenderContextArgs],
    ) -> RenderedContext:
        """The `<memory>` block for a system prompt, within a token budget."""
        request = _requests.render_context(args)
        return RenderedContext.of(
            self._unary(self.stub.RenderContext, request, timeout, request_id)
        )

    def end_session(
        self,
        *,
        timeout: Timeout = DEFAULT,
        request_id: str | None = None,
        **args: Unpack[_requests.EndSessionArgs],
    ) -> EndSessionResult:
        """Close a session (session_id), optionally extracting facts from its messages."""
        request = _requests.end_session(args)
        return EndSessionResult.of(self._unary(self.stub.EndSession, request, timeout, request_id))

    def health(
        self, service: str = "", *, timeout: Timeout = DEFAULT, request_id: str | None = None
    ) -> str:
        """The server's health status name ("SERVING", "NOT_SERVING", ...)."""
        request = health_pb2.HealthCheckRequest(service=service)
        reply = self._unary(self._health.Check, request, timeout, request_id)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
