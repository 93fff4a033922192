"""A real gRPC server speaking memoryd's service whose answers a test scripts: the
client-side transport (retries, metadata, deadlines, TLS, error details) needs failures on
demand that a well-behaved memoryd cannot be made to give."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.rpc import status_pb2
from grpc_status import rpc_status

from memoryd_client.v1 import memory_pb2 as pb
from memoryd_client.v1 import memory_pb2_grpc as pb_grpc


@dataclass
class Script:
    """Usage answers: each call pops the next failure (a google.rpc.Status) until none is
    left, then succeeds. `hang` makes calls wait until their deadline."""

    failures: list[status_pb2.Status] = field(default_factory=list)
    hang: bool = False
    calls: list[dict[str, str]] = field(default_factory=list)  # invocation metadata per call
    time_remaining: list[float | None] = field(default_factory=list)


class _Servicer(pb_grpc.MemoryServiceServicer):
    def __init__(self, script: Script) -> None:
        self.script = script

    async def Usage(self, request: pb.UsageRequest, context: Any) -> pb.UsageResponse:
        self.script.calls.append({k: str(v) for k, v in context.invocation_metadata()})
        self.script.time_remaining.append(context.time_remaining())
        if self.script.hang:
            await asyncio.Event().wait()  # until the client's deadline cancels the call
        if self.script.failures:
            status = rpc_status.to_status(self.script.failures.pop(0))
            await context.abort(status.code, status.details, status.trailing_metadata)
        return pb.UsageResponse(quota_profile=f"served {request.scope.user_id}")


@asynccontextmanager
async def scripted_server(
    script: Script, bind: Callable[[grpc.aio.Server], int] | None = None
) -> AsyncIterator[int]:
    """Serve `script` on 127.0.0.1 and a free port (or as `bind` adds the port)."""
    server = grpc.aio.server()
    # Only Usage is scripted: the other RPCs keep the generated base's UNIMPLEMENTED answers.
    pb_grpc.add_MemoryServiceServicer_to_server(_Servicer(script), server)  # type: ignore[abstract]
    port = bind(server) if bind else server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port
    finally:
        await server.stop(grace=0)
