"""Files the local embedders derive or assemble once and keep: where, and how checked."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

__all__ = ["default_cache_dir", "matches_its_checksum", "sha256_of"]

_log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """Where derived models are kept: ``$XDG_CACHE_HOME/memoryd/models`` (or ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memoryd" / "models"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def matches_its_checksum(path: Path) -> bool:
    """Whether `path` is there and matches the sha256 kept beside it (`<stem>.sha256`): a
    damaged or altered derived file is made again, not used."""
    checksum = path.with_suffix(".sha256")
    if not (path.is_file() and checksum.is_file()):
        return False
    if sha256_of(path) == checksum.read_text().strip():
        return True
    _log.warning("%s does not match its checksum; not using it", path)
    return False
