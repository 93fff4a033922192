"""What `MemoryClient` and `AsyncMemoryClient` share: the constructor (channel, stubs,
default deadlines), the per-call deadline, and for each unary RPC which request builder
and which result it uses. The two clients differ only in calling: plain or awaited."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Generic, Self, TypeVar

from grpc_health.v1 import health_pb2_grpc

from memoryd_client import _requests
from memoryd_client._channel import (
    DEFAULT_STREAM_TIMEOUT,
    DEFAULT_TIMEOUT,
    ChannelConfig,
    RetryPolicy,
    request_id_of,
)
from memoryd_client.results import (
    AddBatchResult,
    AddResult,
    DeleteResult,
    EndSessionResult,
    GetResult,
    ListMemoriesResult,
    ListUsersResult,
    PruneResult,
    RenderedContext,
    RetrieveResult,
    UsageResult,
)
from memoryd_client.v1 import memory_pb2_grpc as pb_grpc


class _Default(Enum):
    TOKEN = 0


# "The client's default": per-call `timeout=DEFAULT` uses the one given to the client,
# `timeout=None` means no deadline.
DEFAULT = _Default.TOKEN
Timeout = float | None | _Default

A = TypeVar("A")
R = TypeVar("R")


@dataclass(frozen=True)
class Unary(Generic[A, R]):
    """One unary MemoryService RPC: the stub's method, the request built from the client
    method's arguments, and the result made of the reply."""

    method: str
    build: Callable[[A], Any]
    result: Callable[[Any], R]


ADD = Unary("Add", _requests.add, AddResult.of)
ADD_BATCH = Unary("AddBatch", _requests.add_batch, AddBatchResult.of)
RETRIEVE = Unary("Retrieve", _requests.retrieve, RetrieveResult.of)
GET = Unary("Get", _requests.get, GetResult.of)
DELETE = Unary("Delete", _requests.delete, DeleteResult.of)
PRUNE = Unary("Prune", _requests.prune, PruneResult.of)
USAGE = Unary("Usage", _requests.usage, UsageResult.of)
RENDER_CONTEXT = Unary("RenderContext", _requests.render_context, RenderedContext.of)
END_SESSION = Unary("EndSession", _requests.end_session, EndSessionResult.of)
LIST_USERS = Unary("ListUsers", _requests.list_users, ListUsersResult.of)
LIST_MEMORIES = Unary("ListMemories", _requests.list_memories, ListMemoriesResult.of)


class ClientBase:
    """The constructor and deadlines of both clients; `_grpc` is `grpc` or `grpc.aio`."""

    _grpc: ClassVar[Any]
    channel: Any
    stub: Any

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
        self.channel = (
            self._grpc.secure_channel(target, self._config.credentials(), opts)
            if self._config.secure
            else self._grpc.insecure_channel(target, opts)
        )
        # The generated stub, for callers who want protobuf requests and responses.
        self.stub = pb_grpc.MemoryServiceStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)

    @classmethod
    def from_env(cls, **kwargs: Any) -> Self:
        """Target and key from MEMORYD_TARGET and MEMORYD_API_KEY (keywords win)."""
        kwargs.setdefault("target", os.environ.get("MEMORYD_TARGET", "127.0.0.1:50051"))
        kwargs.setdefault("api_key", os.environ.get("MEMORYD_API_KEY") or None)
        return cls(**kwargs)

    def _deadline(self, timeout: Timeout, stream: bool = False) -> float | None:
        if timeout is DEFAULT:
            return self._stream_timeout if stream else self._timeout
        return timeout

    def _export_call(
        self, request: Any, timeout: Timeout, request_id: str | None
    ) -> tuple[Any, str]:
        """The Export call (not awaited: its messages arrive as they are read) and its
        request id."""
        metadata = self._config.metadata(request_id)
        call = self.stub.Export(request, timeout=self._deadline(timeout, True), metadata=metadata)
        return call, request_id_of(metadata)
