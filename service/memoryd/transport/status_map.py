"""The one table from domain errors to gRPC statuses, with google.rpc rich details.

Each row names a domain error (core/errors.py), its gRPC status code, the stable
`google.rpc.ErrorInfo.reason` clients switch on, the rich detail built from the error (if
any) and the error's attributes sent as `ErrorInfo.metadata`. Every status carries the
error's message and ends with the `ErrorInfo`. docs/reference/errors.md is rendered from
this table (`reference_markdown`, written by scripts/gen_docs.py).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2

from memoryd.core.errors import (
    ECHO_CHARS,
    InvalidArgument,
    MemorydError,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    StoreUnavailable,
    Unauthenticated,
    Unimplemented,
    echo,
)

ERROR_DOMAIN = "memoryd"
INTERNAL_MESSAGE = "internal error; see server logs"

E = TypeVar("E", bound=MemorydError)


# Bounds on what an error carries, whatever it quotes: a status travels in trailing metadata,
# which grpc refuses past 8 KiB by default (the caller would get RESOURCE_EXHAUSTED "received
# metadata size exceeds ..." instead of the error). The status message and the BadRequest
# each stay well under half of that.
MAX_MESSAGE_CHARS = 1024
MAX_FIELD_CHARS = 120
MAX_DESCRIPTION_CHARS = 200
MAX_VIOLATIONS = 8


def message_of(exc: MemorydError) -> str:
    """The error's message as a caller receives it (a status, a batch item's error)."""
    return echo(str(exc), MAX_MESSAGE_CHARS)


def field_of(field: str) -> str:
    """A field path as a caller receives it (a metadata key in it is client text)."""
    return echo(field, MAX_FIELD_CHARS)


def _bad_request(exc: InvalidArgument) -> error_details_pb2.BadRequest:
    """one field violation per bad field (the first 8)"""
    return error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(
                field=field_of(v.field), description=echo(v.description, MAX_DESCRIPTION_CHARS)
            )
            for v in exc.violations[:MAX_VIOLATIONS]
        ]
    )


def _quota_failure(exc: QuotaExceeded) -> error_details_pb2.QuotaFailure:
    """one violation: the full scope (e.g. `long_term:<user>`) and the message"""
    return error_details_pb2.QuotaFailure(
        violations=[
            error_details_pb2.QuotaFailure.Violation(
                subject=field_of(exc.subject), description=message_of(exc)
            )
        ]
    )


def _retry_info(exc: StoreUnavailable | RateLimited) -> error_details_pb2.RetryInfo:
    """how long to wait before retrying"""
    delay = duration_pb2.Duration()
    delay.FromNanoseconds(int(exc.retry_after_s * 1e9))
    return error_details_pb2.RetryInfo(retry_delay=delay)


@dataclass(frozen=True)
class ErrorRow(Generic[E]):
    """How one domain error reaches the client."""

    error: type[E]
    code: grpc.StatusCode
    reason: str  # ErrorInfo.reason: stable, clients may switch on it
    details: tuple[Callable[[E], Message], ...] = ()  # sent in order, before the ErrorInfo
    info: tuple[str, ...] = ()  # attributes of the error sent as ErrorInfo.metadata
    # The error carries a finer reason of its own (`exc.reason`, e.g. USER_NOT_GRANTED) and
    # metadata (`exc.metadata`), which replace the row's.
    own_reason: bool = False

    def status(self, exc: E) -> status_pb2.Status:
        details = [_packed(build(exc)) for build in self.details]
        metadata = {name: str(getattr(exc, name)) for name in self.info}
        reason = self.reason
        if self.own_reason:
            reason = str(getattr(exc, "reason", "") or self.reason)
            metadata |= dict(getattr(exc, "metadata", {}) or {})
        info = error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN, metadata=metadata)
        details.append(_packed(info))
        return status_pb2.Status(code=self.code.value[0], message=message_of(exc), details=details)

    def detail_types(self) -> list[type[Message]]:
        """The message types `details` build, read from their return annotations."""
        return [typing.get_type_hints(build)["return"] for build in self.details]


ERROR_TABLE: tuple[ErrorRow[Any], ...] = (
    ErrorRow(
        InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", (_bad_request,)
    ),
    ErrorRow(
        QuotaExceeded,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "QUOTA_EXCEEDED",
        (_quota_failure,),
        info=("limit_name", "limit"),
    ),
    ErrorRow(
        RateLimited,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "RATE_LIMITED",
        (_quota_failure, _retry_info),
        info=("limit_name", "limit"),
    ),
    ErrorRow(
        StoreUnavailable,
        grpc.StatusCode.UNAVAILABLE,
        "STORE_UNAVAILABLE",
        (_retry_info,),
        info=("store",),
    ),
    ErrorRow(Unimplemented, grpc.StatusCode.UNIMPLEMENTED, "UNIMPLEMENTED"),
    ErrorRow(Unauthenticated, grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", own_reason=True),
    ErrorRow(
        PermissionDenied, grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED", own_reason=True
    ),
)

_ROW_OF: dict[type, ErrorRow[Any]] = {row.error: row for row in ERROR_TABLE}
# A MemorydError subclass without a row (a bug: tests require a row for each).
_UNMAPPED: ErrorRow[MemorydError] = ErrorRow(MemorydError, grpc.StatusCode.INTERNAL, "INTERNAL")


def _packed(message: Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def row_of(exc: MemorydError) -> ErrorRow[Any]:
    """The row of ``exc``'s class, or of its nearest mapped base class."""
    return next((_ROW_OF[c] for c in type(exc).__mro__ if c in _ROW_OF), _UNMAPPED)


def status_code_of(exc: MemorydError) -> grpc.StatusCode:
    """The status code ``exc`` is answered with (for audit lines and metrics)."""
    return row_of(exc).code


def to_rpc_status(exc: MemorydError) -> status_pb2.Status:
    """A google.rpc.Status with the details a client needs to act on the error."""
    return row_of(exc).status(exc)


def internal_status() -> status_pb2.Status:
    """Any failure that is not a domain error: no details, nothing of the cause leaks."""
    return status_pb2.Status(code=code_pb2.INTERNAL, message=INTERNAL_MESSAGE)


# --------------------------------------------------------------------------- reference


def _summary(documented: object) -> str:
    """The first paragraph of a docstring, on one line."""
    doc = inspect.cleandoc(getattr(documented, "__doc__", None) or "")
    return " ".join(doc.split("\n\n", 1)[0].split())


def _details_cell(row: ErrorRow[Any]) -> str:
    cells = [
        f"`{built.DESCRIPTOR.full_name}`: {_summary(build)}"
        for build, built in zip(row.details, row.detail_types(), strict=True)
    ]
    cells.append(f"`{error_details_pb2.ErrorInfo.DESCRIPTOR.full_name}`")
    return ", then ".join(cells)


def reference_markdown() -> str:
    """docs/reference/errors.md, rendered from `ERROR_TABLE`."""
    lines = [
        "# Errors",
        "",
        "<!-- Generated from memoryd/transport/status_map.py by scripts/gen_docs.py;",
        "     do not edit by hand. -->",
        "",
        "A call refused on purpose ends with one of the statuses below. Its",
        "`grpc-status-details-bin` trailer holds a `google.rpc.Status` with the same code and",
        "message and the details listed, in that order. The last detail is always a",
        f"`google.rpc.ErrorInfo` with domain `{ERROR_DOMAIN}`, a stable `reason` and the",
        "`metadata` keys listed.",
        "",
        f"An error quotes at most {ECHO_CHARS} characters of any text the request carried (a",
        "metadata or filter key, ...), cut with an ellipsis (`\u2026`); its message holds at",
        f"most {MAX_MESSAGE_CHARS:,} characters and its `BadRequest` the first {MAX_VIOLATIONS}",
        "field violations, so that it always fits the trailing metadata it travels in. An",
        "AddBatch item's `ItemError` is bounded the same way.",
        "",
        "| domain error | gRPC status | `ErrorInfo.reason` | details | `ErrorInfo.metadata` "
        "| when |",
        "|---|---|---|---|---|---|",
    ]
    for row in ERROR_TABLE:
        metadata = ", ".join(f"`{name}`" for name in row.info) or "none"
        reason = f"`{row.reason}`"
        if row.own_reason:
            reason += " or the error's finer reason"
            metadata = "the error's own" if metadata == "none" else metadata
        lines.append(
            f"| `{row.error.__name__}` | `{row.code.name}` | {reason} "
            f"| {_details_cell(row)} | {metadata} | {_summary(row.error)} |"
        )
    lines += [
        "",
        f"Any other failure ends with `{grpc.StatusCode.INTERNAL.name}` and the message",
        f'"{INTERNAL_MESSAGE}", without details; the cause is only in the server log.',
        "",
    ]
    return "\n".join(lines)
