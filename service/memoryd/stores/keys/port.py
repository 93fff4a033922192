"""The API keys port: the form of a key, what is kept of it (a hash and its grants, never
the secret), and the store the server reads them from (`KeyStore`).

A key is `mdk_<id>_<secret>`: the id is public (lists, audit lines), the secret is 256
random bits. Because the secret is random and long, a plain SHA-256 of the whole key is
enough to store (no dictionary can find it), and lookups by id need no scan.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

TOKEN_PREFIX = "mdk_"
ID_BYTES = 6  # 12 hex characters
SECRET_BYTES = 32  # 256 bits


class KeysFileError(Exception):
    """The keys file cannot be read or holds a line that is not a key or a revocation."""


@dataclass(frozen=True)
class KeyRecord:
    id: str
    hash: str
    tenant: str
    role: str
    users: tuple[str, ...] = ()
    profile: str | None = None
    name: str = ""
    created_at: str = ""
    revoked_at: str | None = field(default=None, compare=False)

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def to_line(self) -> dict[str, Any]:
        line = {"type": "key", **asdict(self)}
        line["users"] = list(self.users)
        del line["revoked_at"]
        return line


def token_hash(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def key_id_of(token: str) -> str | None:
    """The id part of a well-formed key, else None."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    key_id, sep, secret = token[len(TOKEN_PREFIX) :].partition("_")
    if not sep or len(key_id) != 2 * ID_BYTES or not secret:
        return None
    try:
        int(key_id, 16)
    except ValueError:
        return None
    return key_id


class KeyStore(Protocol):
    def current(self) -> Mapping[str, KeyRecord]:
        """Every key by id, as stored now (a revocation applies to the next call).
        Raises KeysFileError when the store cannot be read or holds a malformed entry."""
        ...
