"""Files the local embedders derive or assemble once and keep: where, how checked, and
that the Hugging Face libraries reading them never reach for the network."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

__all__ = ["default_cache_dir", "hub_offline", "matches_its_checksum", "sha256_of"]

_log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """Where derived models are kept: ``$XDG_CACHE_HOME/memoryd/models`` (or ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memoryd" / "models"


def hub_offline() -> None:
    """Belt and braces: loading by a local path with local_files_only already avoids the
    hub; these make any stray hub call fail fast instead of hanging on the network. Call
    before huggingface_hub is first imported (it reads them at import)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


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
