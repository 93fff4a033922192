"""`memoryd compact`: rebuild the embedded store's memories into memory-mapped segments
(ADR 0602), with the server stopped.

The engine writes every point into an appendable segment whose payload indexes, payloads
and id tracker live in RAM and are rebuilt from their files at each open. Compaction moves
the points into segments whose indexes and payloads are memory-mapped: less RAM per memory
and less work at open. New writes go to a fresh appendable segment until the next run.
"""

from __future__ import annotations

import dataclasses
import time

from memoryd.app import DataDirLock
from memoryd.cli.offline import embedded_store
from memoryd.settings import Settings
from memoryd.stores.vectors.edge_store import EdgeVectorStore


@dataclasses.dataclass(frozen=True)
class CompactReport:
    memories: int
    rebuilt: bool
    seconds: float


async def compact(settings: Settings) -> CompactReport:
    root, collection, meta = embedded_store(
        settings, "compact", "a Qdrant server optimizes its own segments (MEMORYD_QDRANT__*)"
    )
    lock = DataDirLock(settings.data_dir)  # refuses while a server holds the directory
    try:
        started = time.monotonic()
        store = EdgeVectorStore(root, int(meta["dim"]), collection)
        try:
            memories = store.count()
            rebuilt = store.compact()
        finally:
            store.close()
        return CompactReport(memories, rebuilt, time.monotonic() - started)
    finally:
        await lock.release()
