"""Domain errors. The transport maps each to one gRPC status (transport/status_map.py).

The first paragraph of each class's docstring is its "when" in docs/reference/errors.md.
"""

from __future__ import annotations

from dataclasses import dataclass


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
