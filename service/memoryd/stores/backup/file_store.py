"""Backups as gzip-compressed text files under the data directory:

    <root>/<YYYY-MM-DD>/<tenant>/<user>.jsonl.gz

Path parts are escaped as in the cold archive, so no id can name `..` or a separator.
A file is written beside its final name and renamed into place once fsynced.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from memoryd.stores.archive.jsonl_store import escape_part
from memoryd.stores.backup.port import BackupStoreError

_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_SUFFIX = ".jsonl.gz"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _FileWriter:
    def __init__(self, final: Path) -> None:
        self._final = final
        self._tmp = final.with_name(final.name + ".tmp")
        final.parent.mkdir(parents=True, exist_ok=True)
        self._raw: IO[bytes] = self._tmp.open("wb")
        self._gz = gzip.GzipFile(fileobj=self._raw, mode="wb")

    def write(self, lines: Sequence[str]) -> None:
        try:
            self._gz.write("".join(f"{line}\n" for line in lines).encode("utf-8"))
        except OSError as exc:
            raise BackupStoreError(f"cannot write {self._tmp}: {exc}") from exc

    def commit(self) -> None:
        try:
            self._gz.close()
            self._raw.flush()
            os.fsync(self._raw.fileno())
            self._raw.close()
            os.replace(self._tmp, self._final)
            _fsync_dir(self._final.parent)
        except OSError as exc:
            raise BackupStoreError(f"cannot write {self._final}: {exc}") from exc

    def abort(self) -> None:
        self._gz.close()
        self._raw.close()
        self._tmp.unlink(missing_ok=True)


class FileBackupStore:
    def __init__(self, root: Path) -> None:
        self._root = root

    def _day_dir(self, day: str) -> Path:
        if not _DAY.match(day):
            raise BackupStoreError(f"{day!r} is not a backup day (YYYY-MM-DD)")
        return self._root / day

    def writer(self, day: str, tenant: str, user_id: str) -> _FileWriter:
        final = self._day_dir(day) / self.file_of(day, tenant, user_id)
        try:
            return _FileWriter(final)
        except OSError as exc:
            raise BackupStoreError(f"cannot create {final}: {exc}") from exc

    def days(self) -> list[str]:
        if not self._root.is_dir():
            return []
        return sorted(p.name for p in self._root.iterdir() if p.is_dir() and _DAY.match(p.name))

    def files(self, day: str) -> list[str]:
        day_dir = self._day_dir(day)
        if not day_dir.is_dir():
            return []
        return sorted(
            str(p.relative_to(day_dir)) for p in day_dir.glob(f"*/*{_SUFFIX}") if p.is_file()
        )

    def file_of(self, day: str, tenant: str, user_id: str) -> str:
        return f"{escape_part(tenant)}/{escape_part(user_id)}{_SUFFIX}"

    def read(self, day: str, name: str) -> Iterator[str]:
        path = self._day_dir(day) / name
        try:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        yield line.rstrip("\n")
        except (OSError, EOFError) as exc:
            raise BackupStoreError(f"cannot read {path}: {exc}") from exc

    def delete_day(self, day: str) -> int:
        day_dir = self._day_dir(day)
        n = len(self.files(day))
        try:
            shutil.rmtree(day_dir, ignore_errors=False)
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise BackupStoreError(f"cannot delete {day_dir}: {exc}") from exc
        return n

    def delete_user(self, tenant: str, user_id: str) -> int:
        n = 0
        for day in self.days():
            path = self._day_dir(day) / self.file_of(day, tenant, user_id)
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise BackupStoreError(f"cannot delete {path}: {exc}") from exc
            n += 1
        return n
