"""The payload layout of a vector store, and bringing an older store up to it on open.

Layout 2 adds `turn` (`payload.turn_key`: tenant, user, session and position in one
indexed key) to every turn of a session. A store written before it is upgraded when it is
opened: its points without a turn key are read page by page and each turn gets its own,
and the metadata records the layout so that the next open does nothing. Until then the
turns around a hit would not be found (they are looked up by key), so the server opens
the store only once this is done.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from memoryd.core.memory.payload import TURN_FIELD, turn_key
from memoryd.stores.vectors.port import Filter, IsEmpty, VectorStore, every_page

log = logging.getLogger(__name__)

PAYLOAD_LAYOUT = 2
LAYOUT_KEY = "payload_layout"
# Points read per page while upgrading, and how often progress is logged.
UPGRADE_PAGE = 1024
PROGRESS_EVERY_S = 5.0


def upgrade_layout(store: VectorStore, clock: Callable[[], float] = time.monotonic) -> int:
    """Bring `store`'s payloads to `PAYLOAD_LAYOUT`; returns how many points changed.
    Blocking (run it in a worker thread); idempotent, and safe to interrupt: an
    interrupted upgrade starts over from the points still without a turn key."""
    meta = store.read_meta() or {}
    if int(meta.get(LAYOUT_KEY, 1)) >= PAYLOAD_LAYOUT:
        return 0
    started = last = clock()
    changed = 0
    for points in every_page(store, Filter(must=[IsEmpty(TURN_FIELD)]), limit=UPGRADE_PAGE):
        for point in points:
            tenant, user = point.payload.get("tenant"), point.payload.get("user_id")
            session, position = point.payload.get("session_id"), point.payload.get("position")
            if isinstance(tenant, str) and isinstance(user, str) and session and position:
                key = turn_key(tenant, user, str(session), int(position))
                store.set_payload([point.id], {TURN_FIELD: key})
                changed += 1
        if clock() - last >= PROGRESS_EVERY_S:
            last = clock()
            log.info(
                "upgrading the vector store's payloads: %d memories so far (%.0f s)",
                changed,
                last - started,
            )
    store.write_meta({**meta, LAYOUT_KEY: PAYLOAD_LAYOUT})
    if changed:
        log.info(
            "vector store payloads upgraded to layout %d: %d memories in %.1f s",
            PAYLOAD_LAYOUT,
            changed,
            clock() - started,
        )
    return changed
