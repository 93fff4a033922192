"""The status table: each domain error reaches the client as one gRPC status with the
same message, a stable ErrorInfo reason and the rich details a client acts on."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from memoryd.core import errors
from memoryd.core.errors import (
    FieldViolation,
    InvalidArgument,
    MemorydError,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    StoreUnavailable,
    Unauthenticated,
    Unimplemented,
)
from memoryd.transport.status_map import ERROR_TABLE, internal_status, to_rpc_status

SERVICE = Path(errors.__file__).resolve().parents[1]
DETAIL_TYPES: tuple[type[Message], ...] = (
    error_details_pb2.BadRequest,
    error_details_pb2.QuotaFailure,
    error_details_pb2.RetryInfo,
    error_details_pb2.ErrorInfo,
)


def unpacked(status: status_pb2.Status) -> list[Message]:
    out: list[Message] = []
    for detail in status.details:
        kind = next(t for t in DETAIL_TYPES if detail.Is(t.DESCRIPTOR))
        message = kind()
        detail.Unpack(message)
        out.append(message)
    return out


def error_info(reason: str, **metadata: str) -> error_details_pb2.ErrorInfo:
    return error_details_pb2.ErrorInfo(reason=reason, domain="memoryd", metadata=metadata)


@dataclass(frozen=True)
class Case:
    error: MemorydError
    code: grpc.StatusCode
    message: str
    details: list[Message]


CASES = [
    Case(
        InvalidArgument([FieldViolation("content", "must not be empty"), FieldViolation("k", "x")]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "content: must not be empty; k: x",
        [
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(
                        field="content", description="must not be empty"
                    ),
                    error_details_pb2.BadRequest.FieldViolation(field="k", description="x"),
                ]
            ),
            error_info("INVALID_ARGUMENT"),
        ],
    ),
    Case(
        QuotaExceeded("long_term:alice", "long_term.max_memories", 100, "full (max: 100)"),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "full (max: 100)",
        [
            error_details_pb2.QuotaFailure(
                violations=[
                    error_details_pb2.QuotaFailure.Violation(
                        subject="long_term:alice", description="full (max: 100)"
                    )
                ]
            ),
            error_info("QUOTA_EXCEEDED", limit_name="long_term.max_memories", limit="100"),
        ],
    ),
    Case(
        StoreUnavailable("hot store", "connection refused", retry_after_s=2.5),
        grpc.StatusCode.UNAVAILABLE,
        "hot store is unavailable: connection refused",
        [
            error_details_pb2.RetryInfo(
                retry_delay=duration_pb2.Duration(seconds=2, nanos=500_000_000)
            ),
            error_info("STORE_UNAVAILABLE", store="hot store"),
        ],
    ),
    Case(
        RateLimited("writes:alice", "writes_per_minute", 60, 1.5, "write rate spent (max: 60)"),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "write rate spent (max: 60)",
        [
            error_details_pb2.QuotaFailure(
                violations=[
                    error_details_pb2.QuotaFailure.Violation(
                        subject="writes:alice", description="write rate spent (max: 60)"
                    )
                ]
            ),
            error_details_pb2.RetryInfo(
                retry_delay=duration_pb2.Duration(seconds=1, nanos=500_000_000)
            ),
            error_info("RATE_LIMITED", limit_name="writes_per_minute", limit="60"),
        ],
    ),
    Case(
        Unauthenticated("KEY_REVOKED", "the credential is not valid", key_id="k1"),
        grpc.StatusCode.UNAUTHENTICATED,
        "the credential is not valid",
        [error_info("KEY_REVOKED")],  # the key id is for the audit log, never the caller
    ),
    Case(
        PermissionDenied(
            "USER_NOT_GRANTED", "this key may not act for that user", {"role": "agent"}
        ),
        grpc.StatusCode.PERMISSION_DENIED,
        "this key may not act for that user",
        [error_info("USER_NOT_GRANTED", role="agent")],
    ),
    Case(
        Unimplemented("EndSession"),
        grpc.StatusCode.UNIMPLEMENTED,
        "EndSession is not implemented yet in this version of memoryd",
        [error_info("UNIMPLEMENTED")],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: type(c.error).__name__)
def test_each_domain_error_gives_its_code_message_and_details(case: Case) -> None:
    try:
        raise case.error
    except MemorydError as raised:
        status = to_rpc_status(raised)

    on_the_wire = rpc_status.to_status(status)  # what the interceptor aborts the call with
    assert on_the_wire.code == case.code
    assert on_the_wire.details == case.message
    assert status.message == case.message
    assert unpacked(status) == case.details


def test_the_cases_above_cover_every_row_of_the_table() -> None:
    assert {type(c.error) for c in CASES} == {row.error for row in ERROR_TABLE}


def test_every_domain_error_has_exactly_one_row() -> None:
    defined = {
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, MemorydError) and cls is not MemorydError
    }
    mapped = [row.error for row in ERROR_TABLE]
    assert sorted(c.__name__ for c in mapped) == sorted(c.__name__ for c in defined)


def test_every_domain_error_is_raised_somewhere_in_the_service() -> None:
    """A row nobody can reach is dead weight: delete the error and its row instead."""
    sources = [
        p.read_text(encoding="utf-8")
        for p in SERVICE.rglob("*.py")
        if p.name not in {"errors.py", "status_map.py"} and "v1" not in p.parts
    ]
    for row in ERROR_TABLE:
        name = row.error.__name__
        built = re.compile(rf"\b{name}(\.of)?\(")
        assert any(built.search(text) for text in sources), f"nothing raises {name}"


def test_reasons_are_distinct() -> None:
    reasons = [row.reason for row in ERROR_TABLE]
    assert len(set(reasons)) == len(reasons)


def test_a_subclass_of_a_mapped_error_maps_like_its_base() -> None:
    class QueueDown(StoreUnavailable):
        pass

    status = to_rpc_status(QueueDown("write-behind queue", "no route", retry_after_s=0.25))

    assert status.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert unpacked(status)[-1] == error_info("STORE_UNAVAILABLE", store="write-behind queue")


def test_a_domain_error_without_a_row_is_internal() -> None:
    class Unmapped(MemorydError):
        pass

    status = to_rpc_status(Unmapped("odd"))

    assert status.code == grpc.StatusCode.INTERNAL.value[0]
    assert unpacked(status) == [error_info("INTERNAL")]


def test_any_other_failure_is_internal_without_details() -> None:
    status = internal_status()

    assert rpc_status.to_status(status).code == grpc.StatusCode.INTERNAL
    assert status.message == "internal error; see server logs"
    assert list(status.details) == []
