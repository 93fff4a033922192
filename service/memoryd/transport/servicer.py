"""memoryd.v1.MemoryService: converts messages and hands them to the engine.

Domain errors propagate to the ErrorMapping interceptor, which maps them to statuses.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from memoryd.core.engine import MemoryEngine
from memoryd.core.errors import InvalidArgument, MemorydError
from memoryd.core.models import AddCommand
from memoryd.transport import convert, export_stream
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

    async def AddBatch(self, request: pb.AddBatchRequest, context: Context) -> pb.AddBatchResponse:
        started = time.perf_counter()
        principal = self._calls.principal()
        items: list[AddCommand | MemorydError] = []
        for item in request.items:
            try:
                items.append(convert.add_command(item, principal))
            except MemorydError as exc:  # this item alone is unreadable
                items.append(exc)
        outcomes = await self._engine.add_batch(items)
        return convert.add_batch_response(outcomes, (time.perf_counter() - started) * 1000)

    async def Retrieve(self, request: pb.RetrieveRequest, context: Context) -> pb.RetrieveResponse:
        query = convert.retrieve_query(request, self._calls.principal())
        result = await self._engine.retrieve(query)
        response = convert.retrieve_response(result)
        if request.explain:
            convert.explain_scores(response, result.items)
        return response

    async def Get(self, request: pb.GetRequest, context: Context) -> pb.GetResponse:
        lookup = convert.lookup(request, self._calls.principal())
        return convert.get_response(await self._engine.get(lookup))

    async def Delete(self, request: pb.DeleteRequest, context: Context) -> pb.DeleteResponse:
        lookup = convert.lookup(request, self._calls.principal())
        return pb.DeleteResponse(deleted_count=await self._engine.delete(lookup))

    async def Prune(self, request: pb.PruneRequest, context: Context) -> pb.PruneResponse:
        principal = self._calls.principal()
        command = convert.prune_command(request, principal)
        return convert.prune_response(await self._engine.prune(command, principal.subject))

    async def Export(  # type: ignore[override]
        self, request: pb.ExportRequest, context: Context
    ) -> AsyncIterator[pb.ExportResponse]:
        """Header (counts), every item, trailer (count and checksum); see export_stream."""
        query = convert.export_query(request, self._calls.principal())
        counts = await self._engine.export_counts(query)
        header = export_stream.header(query.scope.user_id, time.time(), counts, query.skipped_tiers)
        items = (convert.exported_item(r) async for r in self._engine.export_records(query))
        async for message in export_stream.frame(header, items):
            yield message

    async def Import(  # type: ignore[override]
        self, request_iterator: AsyncIterator[pb.ImportRequest], context: Context
    ) -> pb.ImportResponse:
        """Receives the whole stream and checks it before anything is written."""
        principal = self._calls.principal()
        receiver = export_stream.Receiver(max_items=self._engine.max_import_items)
        scope = None
        auto_prune = False
        async for message in request_iterator:
            if scope is None:
                scope = convert.scope_from_proto(message.scope, principal)
                self._engine.check_import_scope(scope)
                auto_prune = message.auto_prune
            # The header is informative only: items belong to the importing user.
            receiver.add(message)
        if scope is None:
            raise InvalidArgument.of("scope.user_id", "is required on the first message")
        received = receiver.finish()
        records = [convert.record_from_item(item) for item in received.items]
        result = await self._engine.import_records(scope, records, auto_prune)
        return pb.ImportResponse(
            imported_count=result.imported_count,
            skipped_count=result.skipped_count,
            checksum_verified=received.verified,
        )

    async def Usage(self, request: pb.UsageRequest, context: Context) -> pb.UsageResponse:
        scope = convert.scope_from_proto(request.scope, self._calls.principal())
        return convert.usage_response(await self._engine.usage(scope))

    async def RenderContext(
        self, request: pb.RenderContextRequest, context: Context
    ) -> pb.RenderContextResponse:
        request_ = convert.render_query(request, self._calls.principal())
        return convert.render_response(await self._engine.render_context(request_))

    async def EndSession(
        self, request: pb.EndSessionRequest, context: Context
    ) -> pb.EndSessionResponse:
        command = convert.end_session_command(request, self._calls.principal())
        return convert.end_session_response(await self._engine.end_session(command))

    async def ListUsers(
        self, request: pb.ListUsersRequest, context: Context
    ) -> pb.ListUsersResponse:
        query = convert.users_query(request, self._calls.principal())
        return convert.users_response(await self._engine.list_users(query))

    async def ListMemories(
        self, request: pb.ListMemoriesRequest, context: Context
    ) -> pb.ListMemoriesResponse:
        query = convert.memories_query(request, self._calls.principal())
        return convert.memories_response(await self._engine.list_memories(query))
