"""Vector store adapters opened the way the server opens them: by registry name, from
settings. Embedded adapters keep their data under ``data_dir``; qdrant-client runs in
local mode (it stands in for a Qdrant server here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memoryd.settings import Settings
from memoryd.stores import vectors
from memoryd.stores.vectors.port import VectorStore

ADAPTERS = sorted(vectors.ADAPTERS)


def open_store(kind: str, data_dir: Path, dim: int, *, persistent: bool = False) -> VectorStore:
    """Adapter ``kind``; qdrant-client keeps its data in memory unless ``persistent``."""
    config: dict[str, Any] = {}
    if kind == "qdrant":
        config["qdrant_location"] = str(data_dir / "qdrant") if persistent else ":memory:"
    return vectors.ADAPTERS[kind](Settings.explicit(data_dir=data_dir, vectors=config), dim)
