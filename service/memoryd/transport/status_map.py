"""The one table from domain errors to gRPC status codes, with google.rpc rich details."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from memoryd.core.errors import (
    FailedPrecondition,
    InvalidArgument,
    MemorydError,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    StoreUnavailable,
    Unauthenticated,
    Unimplemented,
)

ERROR_DOMAIN = "memoryd"

STATUS_OF: dict[type[MemorydError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    QuotaExceeded: grpc.StatusCode.RESOURCE_EXHAUSTED,
    NotFound: grpc.StatusCode.NOT_FOUND,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    StoreUnavailable: grpc.StatusCode.UNAVAILABLE,
    Unimplemented: grpc.StatusCode.UNIMPLEMENTED,
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    RateLimited: grpc.StatusCode.RESOURCE_EXHAUSTED,
}

_REASON_OF: dict[type[MemorydError], str] = {
    InvalidArgument: "INVALID_ARGUMENT",
    QuotaExceeded: "QUOTA_EXCEEDED",
    NotFound: "NOT_FOUND",
    FailedPrecondition: "FAILED_PRECONDITION",
    StoreUnavailable: "STORE_UNAVAILABLE",
    Unimplemented: "UNIMPLEMENTED",
    RateLimited: "RATE_LIMITED",
    # These two carry their own, finer reason (e.g. USER_NOT_GRANTED).
    Unauthenticated: "UNAUTHENTICATED",
    PermissionDenied: "PERMISSION_DENIED",
}


def _packed(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


def _delay(seconds: float) -> duration_pb2.Duration:
    delay = duration_pb2.Duration()
    delay.FromNanoseconds(int(seconds * 1e9))
    return delay


def status_code_of(exc: MemorydError) -> grpc.StatusCode:
    for cls in type(exc).__mro__:
        if cls in STATUS_OF:
            return STATUS_OF[cls]  # type: ignore[index]
    return grpc.StatusCode.INTERNAL


def to_rpc_status(exc: MemorydError) -> status_pb2.Status:
    """A google.rpc.Status with the details a client needs to act on the error."""
    code = status_code_of(exc)
    details: list[any_pb2.Any] = []
    metadata: dict[str, str] = {}
    if isinstance(exc, InvalidArgument):
        details.append(
            _packed(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=v.field, description=v.description
                        )
                        for v in exc.violations
                    ]
                )
            )
        )
    elif isinstance(exc, QuotaExceeded):
        details.append(
            _packed(
                error_details_pb2.QuotaFailure(
                    violations=[
                        error_details_pb2.QuotaFailure.Violation(
                            subject=exc.subject, description=str(exc)
                        )
                    ]
                )
            )
        )
        metadata = {"limit_name": exc.limit_name, "limit": str(exc.limit)}
        if isinstance(exc, RateLimited):
            details.append(
                _packed(error_details_pb2.RetryInfo(retry_delay=_delay(exc.retry_after_s)))
            )
    elif isinstance(exc, StoreUnavailable):
        details.append(_packed(error_details_pb2.RetryInfo(retry_delay=_delay(exc.retry_after_s))))
        metadata = {"store": exc.store}
    elif isinstance(exc, PermissionDenied):
        metadata = dict(exc.metadata)
    reason = next((_REASON_OF[c] for c in type(exc).__mro__ if c in _REASON_OF), "INTERNAL")
    if isinstance(exc, Unauthenticated | PermissionDenied):
        reason = exc.reason
    details.append(
        _packed(error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN, metadata=metadata))
    )
    return status_pb2.Status(code=code.value[0], message=str(exc), details=details)


def internal_status() -> status_pb2.Status:
    return status_pb2.Status(code=code_pb2.INTERNAL, message="internal error; see server logs")
