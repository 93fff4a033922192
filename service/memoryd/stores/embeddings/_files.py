"""Files the local embedders derive or assemble once and keep: where, and how checked."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["default_cache_dir", "sha256_of"]


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
