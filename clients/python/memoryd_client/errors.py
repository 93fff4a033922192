"""Typed exceptions for failed calls, carrying the server's rich error details.

memoryd answers errors with a google.rpc.Status in the `grpc-status-details-bin` trailer:
BadRequest (the fields at fault), QuotaFailure (the limit reached), RetryInfo (when to try
again) and ErrorInfo (a reason and metadata such as `limit`). `from_rpc_error` turns a
failed call into the exception class of its status code with those details as attributes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message as _message
from google.rpc import error_details_pb2, status_pb2

__all__ = [
    "AlreadyExists",
    "Cancelled",
    "DeadlineExceeded",
    "ExportCorrupt",
    "FailedPrecondition",
    "FieldViolation",
    "Internal",
    "InvalidArgument",
    "MemorydError",
    "NotFound",
    "PermissionDenied",
    "QuotaExceeded",
    "RateLimited",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "from_rpc_error",
]

_DETAILS_KEY = "grpc-status-details-bin"
_DETAIL_TYPES: tuple[type[_message.Message], ...] = (
    error_details_pb2.BadRequest,
    error_details_pb2.QuotaFailure,
    error_details_pb2.RetryInfo,
    error_details_pb2.ErrorInfo,
    error_details_pb2.ResourceInfo,
    error_details_pb2.PreconditionFailure,
    error_details_pb2.DebugInfo,
    error_details_pb2.Help,
    error_details_pb2.LocalizedMessage,
)


@dataclass(frozen=True)
class FieldViolation:
    field: str
    description: str


class MemorydError(Exception):
    """A call that failed. `code` is the gRPC status, `message` the server's text,
    `reason` and `error_metadata` its ErrorInfo, `details` every unpacked detail message
    and `request_id` the x-request-id the call was sent with."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        details: list[_message.Message] | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.details: list[_message.Message] = details or []
        self.request_id = request_id
        info = self.detail(error_details_pb2.ErrorInfo)
        self.reason: str = info.reason if info else ""
        self.error_metadata: dict[str, str] = dict(info.metadata) if info else {}

    def detail(self, kind: type[Any]) -> Any:
        """The first detail of that message type, or None."""
        return next((d for d in self.details if isinstance(d, kind)), None)


class InvalidArgument(MemorydError):
    """The request was refused as malformed; nothing was written. `field` names the first
    field at fault (e.g. "scope.user_id"), `violations` all of them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        bad = self.detail(error_details_pb2.BadRequest)
        self.violations: list[FieldViolation] = [
            FieldViolation(v.field, v.description) for v in (bad.field_violations if bad else [])
        ]
        self.field: str | None = self.violations[0].field if self.violations else None


class QuotaExceeded(MemorydError):
    """A quota is reached; nothing was written. `max` is the limit, `limit_name` which one
    (e.g. "max_memories") and `subject` the scope it applies to."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limit = self.error_metadata.get("limit")
        self.max: int | None = int(limit) if limit and limit.lstrip("-").isdigit() else None
        self.limit_name: str | None = self.error_metadata.get("limit_name")
        failure = self.detail(error_details_pb2.QuotaFailure)
        self.subject: str | None = (
            failure.violations[0].subject if failure and failure.violations else None
        )


def _retry_after(error: MemorydError) -> float | None:
    info = error.detail(error_details_pb2.RetryInfo)
    if info is None or not info.HasField("retry_delay"):
        return None
    return float(info.retry_delay.ToNanoseconds() / 1e9)


class RateLimited(MemorydError):
    """Too many calls; `retry_after` is the server's advice in seconds (None if it gave
    none). RESOURCE_EXHAUSTED with a RetryInfo, or with the reason RATE_LIMITED."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retry_after: float | None = _retry_after(self)


class Unavailable(MemorydError):
    """The server or one of its stores cannot be reached. The client already retried with
    backoff (the channel's retry policy); `retry_after` is the server's advice, if any."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retry_after: float | None = _retry_after(self)
        self.store: str | None = self.error_metadata.get("store")


class NotFound(MemorydError):
    pass


class AlreadyExists(MemorydError):
    pass


class FailedPrecondition(MemorydError):
    pass


class Unauthenticated(MemorydError):
    """No API key, or one the server does not know."""


class PermissionDenied(MemorydError):
    """The API key may not do this."""


class DeadlineExceeded(MemorydError):
    pass


class Cancelled(MemorydError):
    pass


class Unimplemented(MemorydError):
    pass


class Internal(MemorydError):
    pass


class ExportCorrupt(Exception):
    """An export stream that does not check out: no trailer, a wrong item count or a
    checksum that does not match the items received."""


_CLASS_OF: dict[grpc.StatusCode, type[MemorydError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.RESOURCE_EXHAUSTED: QuotaExceeded,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
}


def _unpack(metadata: Iterable[Any] | None) -> list[_message.Message]:
    raw = next((v for k, v in metadata or () if k == _DETAILS_KEY), None)
    if not isinstance(raw, bytes):
        return []
    try:
        status = status_pb2.Status.FromString(raw)
    except _message.DecodeError:
        return []
    details: list[_message.Message] = []
    for packed in status.details:
        for kind in _DETAIL_TYPES:
            if packed.Is(kind.DESCRIPTOR):
                detail = kind()
                packed.Unpack(detail)
                details.append(detail)
                break
    return details


def from_status(
    code: grpc.StatusCode,
    message: str,
    trailing_metadata: Iterable[Any] | None,
    request_id: str | None = None,
) -> MemorydError:
    details = _unpack(trailing_metadata)
    cls = _CLASS_OF.get(code, Internal)
    if cls is QuotaExceeded:
        retry = any(isinstance(d, error_details_pb2.RetryInfo) for d in details)
        rate = any(
            isinstance(d, error_details_pb2.ErrorInfo) and d.reason == "RATE_LIMITED"
            for d in details
        )
        if retry or rate:
            cls = RateLimited
    return cls(code, message, details, request_id)


def from_rpc_error(error: grpc.RpcError, request_id: str | None = None) -> MemorydError:
    """The typed exception for a failed call (sync `grpc.Call` or `grpc.aio.AioRpcError`)."""
    if isinstance(error, grpc.aio.AioRpcError):
        return from_status(
            error.code(), error.details() or "", error.trailing_metadata(), request_id
        )
    if isinstance(error, grpc.Call):
        return from_status(
            error.code(), error.details() or "", error.trailing_metadata(), request_id
        )
    return Internal(grpc.StatusCode.UNKNOWN, str(error), None, request_id)
