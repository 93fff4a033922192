"""The backup store port: per day, one file of text lines per user (the store keeps
them compressed). Lines are opaque to the store. Calls block (file I/O): callers run
them in a worker thread."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol


class BackupStoreError(Exception):
    """The backups cannot be read or written."""


class BackupWriter(Protocol):
    def write(self, lines: Sequence[str]) -> None: ...

    def commit(self) -> None:
        """Make the file visible (replacing the user's file of that day), durably."""
        ...

    def abort(self) -> None: ...


class BackupStore(Protocol):
    def writer(self, day: str, tenant: str, user_id: str) -> BackupWriter:
        """A new backup file of the user for `day` (YYYY-MM-DD), visible on commit."""
        ...

    def days(self) -> list[str]:
        """Every day holding backups, oldest first."""
        ...

    def files(self, day: str) -> list[str]:
        """The backup files of `day` (opaque names for `read`), sorted."""
        ...

    def file_of(self, day: str, tenant: str, user_id: str) -> str:
        """The name `files` gives the user's file of `day` (whether it exists or not)."""
        ...

    def read(self, day: str, name: str) -> Iterator[str]:
        """The lines of one backup file, in order."""
        ...

    def delete_day(self, day: str) -> int:
        """Delete every file of `day`; returns how many went."""
        ...

    def delete_user(self, tenant: str, user_id: str) -> int:
        """Delete the user's files of every day; returns how many went."""
        ...
