"""Helpers for calling the server through the committed stubs and reading rich errors."""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import Any, cast

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from memoryd.transport.export_stream import Checksum
from memoryd.v1 import memory_pb2 as pb

# For a channel that polls a `memoryd serve` process while it starts: the start-up health
# process gives the port up just before the real server binds it, and gRPC's reconnect
# backoff (1 s at first, growing) would otherwise add a second or more to every start.
FAST_RECONNECT = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 200),
]

# How many `memoryd serve` processes a scale-out test runs against one store: each pair of
# them competes, so two are covered as well.
REPLICAS = 3


def scope(user_id: str, **kw: str) -> pb.Scope:
    return pb.Scope(user_id=user_id, **kw)


async def rpc_error(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


def rich_status(err: grpc.aio.AioRpcError) -> status_pb2.Status:
    # grpc-stubs types these as objects with .key/.value; grpc.aio yields (key, value) pairs.
    metadata = cast("Iterable[tuple[str, bytes]] | None", err.trailing_metadata())
    for key, value in metadata or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status()
            status.ParseFromString(value)
            return status
    raise AssertionError("the error carries no google.rpc.Status details")


def bad_request_fields(err: grpc.aio.AioRpcError) -> list[str]:
    for detail in rich_status(err).details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            return [v.field for v in bad.field_violations]
    raise AssertionError("the error carries no BadRequest")


def quota_failure(err: grpc.aio.AioRpcError) -> error_details_pb2.QuotaFailure:
    for detail in rich_status(err).details:
        if detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
            failure = error_details_pb2.QuotaFailure()
            detail.Unpack(failure)
            return failure
    raise AssertionError("the error carries no QuotaFailure")


def import_requests(
    user_id: str, items: Iterable[pb.MemoryItem], *, auto_prune: bool = False
) -> list[pb.ImportRequest]:
    """An Import stream as memoryd's own Export frames one: the scope, the items, and a
    trailer with their count and checksum (the server's own `Checksum`)."""
    checksum = Checksum()
    stream = [pb.ImportRequest(scope=scope(user_id), auto_prune=auto_prune)]
    for item in items:
        checksum.add(item)
        stream.append(pb.ImportRequest(item=item))
    return [*stream, pb.ImportRequest(trailer=checksum.trailer())]
