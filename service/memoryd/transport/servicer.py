"""memoryd.v1.MemoryService: converts messages and hands them to the engine.

Domain errors propagate to the ErrorMapping interceptor, which maps them to statuses.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from memoryd.core.engine import MemoryEngine
from memoryd.core.errors import InvalidArgument, Unimplemented
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
        principal = self._calls.principal()
        command = convert.prune_command(request, principal)
        return convert.prune_response(await self._engine.prune(command, principal.subject))

    async def Export(  # type: ignore[override]
        self, request: pb.ExportRequest, context: Context
    ) -> AsyncIterator[pb.ExportResponse]:
        """Header (counts), every item, trailer (count and sha256 of the items' serialization)."""
        query = convert.export_query(request, self._calls.principal())
        counts = await self._engine.export_counts(query)
        yield pb.ExportResponse(
            header=convert.export_header(
                query.scope.user_id, time.time(), counts, query.skipped_tiers
            )
        )
        digest = hashlib.sha256()
        count = 0
        async for record in self._engine.export_records(query):
            item = convert.memory_item(record)
            digest.update(item.SerializeToString(deterministic=True))
            count += 1
            yield pb.ExportResponse(item=item)
        trailer = pb.ExportTrailer(item_count=count, checksum_sha256=digest.hexdigest())
        yield pb.ExportResponse(trailer=trailer)

    async def Import(  # type: ignore[override]
        self, request_iterator: AsyncIterator[pb.ImportRequest], context: Context
    ) -> pb.ImportResponse:
        """Receives the whole stream and checks it before anything is written."""
        principal = self._calls.principal()
        limit = self._engine.max_import_items
        scope = None
        auto_prune = False
        trailer: pb.ExportTrailer | None = None
        items: list[pb.MemoryItem] = []
        digest = hashlib.sha256()
        async for message in request_iterator:
            if scope is None:
                scope = convert.scope_from_proto(message.scope, principal)
                self._engine.check_import_scope(scope)
                auto_prune = message.auto_prune
            if trailer is not None:
                raise InvalidArgument.of("trailer", "must be the last message of the stream")
            kind = message.WhichOneof("payload")
            if kind == "item":
                if len(items) >= limit:
                    raise InvalidArgument.of("item", f"at most {limit:,} items per import")
                digest.update(message.item.SerializeToString(deterministic=True))
                items.append(message.item)
            elif kind == "trailer":
                trailer = message.trailer
            # The header is informative only: items belong to the importing user.
        if scope is None:
            raise InvalidArgument.of("scope.user_id", "is required on the first message")
        if trailer is None:
            raise InvalidArgument.of("trailer", "is required: it ends a complete export")
        if trailer.item_count != len(items):
            raise InvalidArgument.of(
                "trailer.item_count", f"says {trailer.item_count} items; {len(items)} arrived"
            )
        verified = bool(trailer.checksum_sha256)
        if verified and trailer.checksum_sha256 != digest.hexdigest():
            raise InvalidArgument.of(
                "trailer.checksum_sha256", "does not match the items received; nothing was written"
            )
        records = [convert.record_from_item(item) for item in items]
        result = await self._engine.import_records(scope, records, auto_prune)
        return pb.ImportResponse(
            imported_count=result.imported_count,
            skipped_count=result.skipped_count,
            checksum_verified=verified,
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
        raise Unimplemented("EndSession")
