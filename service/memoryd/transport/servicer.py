"""memoryd.v1.MemoryService: converts messages and hands them to the engine.

Domain errors propagate to the ServiceInterceptor, which maps them to statuses.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from memoryd.core.engine import MemoryEngine
from memoryd.core.errors import Unimplemented
from memoryd.transport import convert
from memoryd.transport.interceptors import CallContext
from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc

Context = grpc.aio.ServicerContext[Any, Any]


class MemoryServicer(memory_pb2_grpc.MemoryServiceServicer):
    def __init__(self, engine: MemoryEngine, calls: CallContext) -> None:
        self._engine = engine
        self._calls = calls

    async def Add(self, request: pb.AddRequest, context: Context) -> pb.AddResponse:
        started = time.perf_counter()
        result = await self._engine.add(convert.add_command(request, self._calls.principal()))
        return convert.add_response(result, (time.perf_counter() - started) * 1000)

    async def Retrieve(self, request: pb.RetrieveRequest, context: Context) -> pb.RetrieveResponse:
        query = convert.retrieve_query(request, self._calls.principal())
        return convert.retrieve_response(await self._engine.retrieve(query))

    async def Get(self, request: pb.GetRequest, context: Context) -> pb.GetResponse:
        lookup = convert.lookup(request, self._calls.principal())
        return convert.get_response(await self._engine.get(lookup))

    async def Delete(self, request: pb.DeleteRequest, context: Context) -> pb.DeleteResponse:
        lookup = convert.lookup(request, self._calls.principal())
        return pb.DeleteResponse(deleted_count=await self._engine.delete(lookup))

    async def Prune(self, request: pb.PruneRequest, context: Context) -> pb.PruneResponse:
        command = convert.prune_command(request, self._calls.principal())
        return convert.prune_response(await self._engine.prune(command))

    async def Export(  # type: ignore[override]
        self, request: pb.ExportRequest, context: Context
    ) -> AsyncIterator[pb.ExportResponse]:
        raise Unimplemented("Export")
        yield pb.ExportResponse()  # pragma: no cover - makes this an async generator

    async def Import(  # type: ignore[override]
        self, request_iterator: AsyncIterator[pb.ImportRequest], context: Context
    ) -> pb.ImportResponse:
        raise Unimplemented("Import")

    async def Usage(self, request: pb.UsageRequest, context: Context) -> pb.UsageResponse:
        raise Unimplemented("Usage")

    async def RenderContext(
        self, request: pb.RenderContextRequest, context: Context
    ) -> pb.RenderContextResponse:
        request_ = convert.render_query(request, self._calls.principal())
        return convert.render_response(await self._engine.render_context(request_))

    async def EndSession(
        self, request: pb.EndSessionRequest, context: Context
    ) -> pb.EndSessionResponse:
        raise Unimplemented("EndSession")
