"""Test helpers for authenticated calls: keys, a stub that sends a credential, ErrorInfo."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import grpc
from google.rpc import error_details_pb2

from memoryd.stores.keys.file import KeysFile
from memoryd.v1 import memory_pb2_grpc
from tests.support.rpc import rich_status

NOW = "2025-01-01T00:00:00+00:00"


def new_key(
    keys_file: Path,
    tenant: str,
    role: str,
    users: tuple[str, ...] = (),
    profile: str | None = None,
) -> str:
    """A new key in the file (as `memoryd keys create` makes it); returns the key itself."""
    _, token = KeysFile(keys_file).create(
        tenant=tenant, role=role, users=users, profile=profile, created_at=NOW
    )
    return token


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


class Caller:
    """The MemoryService stub, every call sending `authorization: Bearer <token>`."""

    def __init__(self, channel: grpc.aio.Channel, token: str) -> None:
        self._stub = memory_pb2_grpc.MemoryServiceStub(channel)
        self._metadata = bearer(token)

    def __getattr__(self, rpc: str) -> Any:
        return partial(getattr(self._stub, rpc), metadata=self._metadata)


def error_info(err: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    for detail in rich_status(err).details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    raise AssertionError("the error carries no ErrorInfo")


def retry_delay_s(err: grpc.aio.AioRpcError) -> float:
    for detail in rich_status(err).details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            nanos: int = info.retry_delay.ToNanoseconds()
            return nanos / 1e9
    raise AssertionError("the error carries no RetryInfo")
