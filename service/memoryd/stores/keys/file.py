"""The API keys file: JSON Lines, append-only, holding hashes and grants, never a secret.

    {"type":"key","id":"3f9a1c2b7d4e","hash":"sha256:...","tenant":"acme","role":"agent",
     "users":["alice"],"profile":"free","name":"travel bot","created_at":"2025-..."}
    {"type":"revocation","id":"3f9a1c2b7d4e","revoked_at":"2025-..."}

The form of a key and what is kept of it: `port.py`.

Writers (`memoryd keys`) append one whole line under an exclusive lock; the server re-reads
the file whenever its size, inode or mtime changes, so a new or revoked key applies to the
next call. A last line without its newline is a write in progress and waits.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from memoryd.stores.keys.port import (
    ID_BYTES,
    SECRET_BYTES,
    TOKEN_PREFIX,
    KeyRecord,
    KeysFileError,
    token_hash,
)


def _parse(data: bytes, path: Path) -> dict[str, KeyRecord]:
    keys: dict[str, KeyRecord] = {}
    lines = data.split(b"\n")
    # The last element is what follows the last newline: empty, or a line being written.
    for number, raw in enumerate(lines[:-1], 1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
            kind = entry["type"]
            if kind == "key":
                record = KeyRecord(
                    id=str(entry["id"]),
                    hash=str(entry["hash"]),
                    tenant=str(entry["tenant"]),
                    role=str(entry["role"]),
                    users=tuple(str(u) for u in entry.get("users") or ()),
                    profile=entry.get("profile") or None,
                    name=str(entry.get("name") or ""),
                    created_at=str(entry.get("created_at") or ""),
                )
                if record.id in keys:
                    raise ValueError(f"key id {record.id} appears twice")
                keys[record.id] = record
            elif kind == "revocation":
                key_id = str(entry["id"])
                if key_id in keys:
                    keys[key_id] = _revoked(keys[key_id], str(entry.get("revoked_at") or "?"))
            else:
                raise ValueError(f"unknown type {kind!r}")
        except (ValueError, KeyError, TypeError) as exc:
            raise KeysFileError(f"{path}:{number}: not a key or revocation line ({exc})") from exc
    return keys


def _revoked(record: KeyRecord, when: str) -> KeyRecord:
    # replace, not asdict: a re-read applies every revocation, and asdict deep-copies.
    return replace(record, revoked_at=when)


class KeysFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._signature: tuple[int, int, int, int] | None = None
        self._keys: dict[str, KeyRecord] = {}
        self._error: KeysFileError | None = None

    # Reading (the server).

    def _read(self) -> dict[str, KeyRecord]:
        try:
            return _parse(self.path.read_bytes(), self.path)
        except OSError as exc:
            raise KeysFileError(f"cannot read {self.path}: {exc}") from exc

    def current(self) -> Mapping[str, KeyRecord]:
        """Every key by id (revoked ones marked), re-read when the file has changed.

        Raises KeysFileError while the file is unreadable or malformed: the caller then
        accepts no key at all rather than a stale set that may miss a revocation."""
        try:
            st = os.stat(self.path)
        except OSError as exc:
            self._signature = None
            raise KeysFileError(f"cannot read {self.path}: {exc}") from exc
        signature = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if signature != self._signature:
            self._signature = signature
            try:
                self._keys, self._error = self._read(), None
            except KeysFileError as exc:
                self._keys, self._error = {}, exc
        if self._error is not None:
            raise self._error
        return self._keys

    def records(self) -> list[KeyRecord]:
        return list(self._read().values()) if self.path.exists() else []

    # Writing (`memoryd keys`).

    def _append(
        self,
        entries: Iterable[Mapping[str, Any]],
        check: Callable[[Mapping[str, KeyRecord]], None] | None = None,
    ) -> None:
        """Append whole lines under an exclusive lock, after `check` passed on the file's
        content read under that lock."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if check is not None:
                check(self._read())
            data = b"".join(
                json.dumps(dict(e), ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
                for e in entries
            )
            os.write(fd, data)  # one write: a reader sees the whole line or none of it
            os.fsync(fd)
        finally:
            os.close(fd)

    def create(
        self,
        *,
        tenant: str,
        role: str,
        users: Iterable[str] = (),
        profile: str | None = None,
        name: str = "",
        created_at: str,
    ) -> tuple[KeyRecord, str]:
        """Append a new key; returns its record and the key itself (shown once, never kept)."""
        for _ in range(8):
            key_id = secrets.token_hex(ID_BYTES)
            token = f"{TOKEN_PREFIX}{key_id}_{secrets.token_urlsafe(SECRET_BYTES)}"
            record = KeyRecord(
                id=key_id,
                hash=token_hash(token),
                tenant=tenant,
                role=role,
                users=tuple(dict.fromkeys(users)),
                profile=profile,
                name=name,
                created_at=created_at,
            )
            try:
                self._append([record.to_line()], check=functools.partial(_unused, key_id=key_id))
            except _IdTaken:
                continue  # 48 random bits met an existing id: draw again
            return record, token
        raise KeysFileError("could not draw an unused key id")

    def revoke(self, key_id: str, revoked_at: str) -> KeyRecord:
        """Append a revocation; raises KeyError for an unknown id. Revoking twice is a no-op."""
        found: list[KeyRecord] = []

        def known(keys: Mapping[str, KeyRecord]) -> None:
            if key_id not in keys:
                raise KeyError(key_id)
            found.append(keys[key_id])

        if not self.path.exists():
            raise KeyError(key_id)
        current = self._read().get(key_id)
        if current is not None and current.revoked:
            return current
        self._append([{"type": "revocation", "id": key_id, "revoked_at": revoked_at}], known)
        return _revoked(found[0], revoked_at)


class _IdTaken(Exception):
    pass


def _unused(keys: Mapping[str, KeyRecord], key_id: str) -> None:
    if key_id in keys:
        raise _IdTaken(key_id)
