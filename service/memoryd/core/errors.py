"""Domain errors. The transport maps each to one gRPC status (transport/status_map.py).

The first paragraph of each class's docstring is its "when" in docs/reference/errors.md.
"""

from __future__ import annotations

from dataclasses import dataclass

# How much of a request's own text an error may quote: a whole metadata key of legal length
# (64 bytes by default), never so much that the error outgrows the trailing metadata it
# travels in (grpc refuses trailers past 8 KiB by default: the caller would see
# RESOURCE_EXHAUSTED instead of the error).
ECHO_CHARS = 64


def echo(text: str, limit: int = ECHO_CHARS) -> str:
    """`text` as an error may quote it: at most `limit` characters, cut with an ellipsis.
    Every quote of client input in an error (message, field, detail) goes through here."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "\u2026"


class MemorydError(Exception):
    """Base of every error the core raises on purpose."""


@dataclass(frozen=True)
class FieldViolation:
    field: str
    description: str


class InvalidArgument(MemorydError):
    """The request is malformed; nothing was written."""

    def __init__(self, violations: list[FieldViolation]) -> None:
        self.violations = violations
        super().__init__("; ".join(f"{v.field}: {v.description}" for v in violations))

    @classmethod
    def of(cls, field: str, description: str) -> InvalidArgument:
        return cls([FieldViolation(field, description)])


class QuotaExceeded(MemorydError):
    """A per-scope limit is reached; nothing was written."""

    def __init__(self, subject: str, limit_name: str, limit: int, message: str) -> None:
        self.subject = subject
        self.limit_name = limit_name
        self.limit = limit
        super().__init__(message)


class StoreUnavailable(MemorydError):
    """A store cannot be reached; the request may be retried later."""

    def __init__(self, store: str, message: str, retry_after_s: float = 1.0) -> None:
        self.store = store
        self.retry_after_s = retry_after_s
        super().__init__(f"{store} is unavailable: {message}")


class Unimplemented(MemorydError):
    """The RPC, tier or option is not available in this server (a later version, or not
    configured)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is not implemented yet in this version of memoryd")


class Unauthenticated(MemorydError):
    """No credential, or one that is not valid (unknown, revoked, expired, forged).

    `key_id` and `detail` are for the audit log only; the caller sees `message`."""

    def __init__(self, reason: str, message: str, *, key_id: str = "", detail: str = "") -> None:
        self.reason = reason
        self.key_id = key_id
        self.detail = detail or message
        super().__init__(message)


class PermissionDenied(MemorydError):
    """A valid credential asked for something outside its grants. The message names the
    grant missing, never whether the user or data asked for exists."""

    def __init__(self, reason: str, message: str, metadata: dict[str, str] | None = None) -> None:
        self.reason = reason
        self.metadata = metadata or {}
        super().__init__(message)


class RateLimited(QuotaExceeded):
    """A per-user write rate is spent; nothing was written. Retry after `retry_after_s`."""

    def __init__(
        self, subject: str, limit_name: str, limit: int, retry_after_s: float, message: str
    ) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(subject=subject, limit_name=limit_name, limit=limit, message=message)
