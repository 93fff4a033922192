"""The audit log port: one durable line per event the operator must be able to prove
(e.g. a GDPR erasure). Entries hold identifiers and counts only, never memory content.
Calls block (file I/O): the core runs them in a worker thread."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class AuditLogError(Exception):
    """The audit log cannot be written."""


class AuditLog(Protocol):
    def append(self, entry: Mapping[str, Any]) -> None:
        """Durably add `entry` (on disk when this returns)."""
        ...
