"""What the offline commands on the embedded store (`reindex`, `compact`) share: the store
they work on, or why they refuse to run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memoryd.settings import Settings
from memoryd.stores.vectors.edge_store import peek_meta


class OfflineRefused(Exception):
    """An offline command cannot run on these settings or this data directory."""


def embedded_store(
    settings: Settings, command: str, on_qdrant: str
) -> tuple[Path, str, dict[str, Any]]:
    """The embedded vector store's directory, collection and metadata; `on_qdrant` tells
    the operator of a Qdrant server what to do instead."""
    if settings.vectors.backend != "edge":
        raise OfflineRefused(f"{command} runs on the embedded (edge) store; {on_qdrant}")
    root = settings.data_dir / "vectors"
    collection = settings.vectors.collection
    meta = peek_meta(root, collection)
    if meta is None or "dim" not in meta:
        raise OfflineRefused(f"no vector store to {command} under {root}")
    return root, collection, meta
