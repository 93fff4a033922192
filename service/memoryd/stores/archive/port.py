"""The cold archive port: records a tier no longer serves, kept compressed and cheap.

A record is a JSON object with a numeric `created_at` (epoch seconds, UTC), which the
store may use to partition; everything else in it is opaque to the store. Calls block
(file I/O): the core runs them in a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol


class ArchiveStoreError(Exception):
    """The archive cannot be read or written."""


class ArchiveStore(Protocol):
    def append(
        self, tenant: str, user_id: str, tier: str, records: Sequence[Mapping[str, Any]]
    ) -> int:
        """Durably add `records` to the user's archive of `tier` (on disk when this
        returns); returns how many were written."""
        ...

    def iter_records(
        self, tenant: str, user_id: str, tier: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """The user's archived records (of one tier, or all), oldest partition first, in
        the order they were appended within a partition."""
        ...

    def delete_user(self, tenant: str, user_id: str, tier: str | None = None) -> int:
        """Erase the user's archived records (of one tier, or all); returns how many went."""
        ...

    def count(self, tenant: str, user_id: str, tier: str | None = None) -> int:
        """How many records the user's archive (of one tier, or all) holds."""
        ...
