"""Cold archive as gzip-compressed JSONL files under the data directory:

    <root>/<tenant>/<user>/<tier>/<YYYY-MM>.jsonl.gz

The month is the record's `created_at` month (UTC). Path parts are escaped (anything but
ASCII letters, digits, `_` and `-` becomes `%XX`), so no id can name `..`, a separator or
another user's directory. Each append writes one new gzip member per partition file and
fsyncs it: gzip readers read the concatenated members as one stream.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import shutil
import threading
import zlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memoryd.stores.archive.port import ArchiveStoreError

log = logging.getLogger(__name__)

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
# Longest escaped path part kept as is; longer ones are cut and suffixed with a digest
# (file names are limited to 255 bytes).
_MAX_PART = 180
_SUFFIX = ".jsonl.gz"


def escape_part(value: str) -> str:
    """A file-name-safe, collision-free rendering of one id."""
    if not value:
        raise ValueError("an archive path part must not be empty")
    escaped = "".join(
        ch if ch in _SAFE else "".join(f"%{b:02X}" for b in ch.encode("utf-8")) for ch in value
    )
    if len(escaped) > _MAX_PART:
        digest = hashlib.sha256(value.encode("utf-8")).hexdigest()[:32]
        escaped = f"{escaped[: _MAX_PART - 33]}~{digest}"
    return escaped


def partition_of(created_at: float) -> str:
    return datetime.fromtimestamp(created_at, tz=UTC).strftime("%Y-%m")


class JsonlArchiveStore:
    def __init__(self, root: Path) -> None:
        self._root = root
        self._lock = threading.Lock()

    def _user_dir(self, tenant: str, user_id: str) -> Path:
        return self._root / escape_part(tenant) / escape_part(user_id)

    def _tier_dirs(self, tenant: str, user_id: str, tier: str | None) -> list[Path]:
        user_dir = self._user_dir(tenant, user_id)
        if tier is not None:
            return [user_dir / escape_part(tier)]
        if not user_dir.is_dir():
            return []
        return sorted(p for p in user_dir.iterdir() if p.is_dir())

    def append(
        self, tenant: str, user_id: str, tier: str, records: Sequence[Mapping[str, Any]]
    ) -> int:
        by_month: dict[str, list[str]] = {}
        for record in records:
            line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
            by_month.setdefault(partition_of(float(record["created_at"])), []).append(line)
        tier_dir = self._user_dir(tenant, user_id) / escape_part(tier)
        try:
            with self._lock:
                created = not tier_dir.is_dir()
                tier_dir.mkdir(parents=True, exist_ok=True)
                for month, lines in sorted(by_month.items()):
                    member = gzip.compress(("\n".join(lines) + "\n").encode("utf-8"))
                    with (tier_dir / f"{month}{_SUFFIX}").open("ab") as f:
                        f.write(member)
                        f.flush()
                        os.fsync(f.fileno())
                if created:
                    for directory in (tier_dir, tier_dir.parent, tier_dir.parent.parent):
                        _fsync_dir(directory)
                _fsync_dir(tier_dir)
        except OSError as exc:
            raise ArchiveStoreError(f"cannot write the archive under {tier_dir}: {exc}") from exc
        return sum(len(lines) for lines in by_month.values())

    def iter_records(
        self, tenant: str, user_id: str, tier: str | None = None
    ) -> Iterator[dict[str, Any]]:
        for tier_dir in self._tier_dirs(tenant, user_id, tier):
            if not tier_dir.is_dir():
                continue
            for path in sorted(tier_dir.glob(f"*{_SUFFIX}")):
                yield from _read(path)

    def delete_user(self, tenant: str, user_id: str, tier: str | None = None) -> int:
        with self._lock:
            gone = self.count(tenant, user_id, tier)
            target = self._user_dir(tenant, user_id)
            if tier is not None:
                target = target / escape_part(tier)
            try:
                if target.is_dir():
                    shutil.rmtree(target)
                    _fsync_dir(target.parent)
            except OSError as exc:
                raise ArchiveStoreError(f"cannot erase {target}: {exc}") from exc
        return gone

    def count(self, tenant: str, user_id: str, tier: str | None = None) -> int:
        return sum(1 for _ in self.iter_records(tenant, user_id, tier))


def _read(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                # A line without its newline is the tail of an append cut short.
                if line.endswith("\n") and line.strip():
                    yield json.loads(line)
    except FileNotFoundError:
        return
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        # A member cut short by a crash mid-append: what precedes it is intact.
        log.warning("archive file %s ends with a damaged member: %s", path, exc)
    except OSError as exc:
        raise ArchiveStoreError(f"cannot read {path}: {exc}") from exc


def _fsync_dir(directory: Path) -> None:
    if not directory.is_dir():
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
