"""The turns around a memory of a conversation, read from the store in one scroll: the
neighbours the conversation lift weighs, and the context window a hit comes with."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memoryd.core.memory.payload import TURN_FIELD, from_payload, turn_key
from memoryd.core.memory.term_counts import owner_of
from memoryd.core.models import MemoryRecord
from memoryd.stores.vectors.port import (
    Condition,
    Filter,
    HasId,
    MatchAny,
    MatchValue,
    Range,
    StoredPoint,
)

if TYPE_CHECKING:
    from memoryd.core.memory.vector_memory import VectorMemory


def turn_of(payload: Mapping[str, Any]) -> tuple[str, int] | None:
    """(session, position) of a stored turn, None for a memory outside a session."""
    session, position = payload.get("session_id"), payload.get("position")
    return (str(session), int(position)) if session and position else None


async def turns_around(
    memory: VectorMemory,
    flt: Filter,
    turns: Sequence[tuple[str, int]],
    window: int,
    *,
    skip: Collection[str] = (),
) -> list[StoredPoint]:
    """The turns within `window` positions of each (session, position), in one scroll,
    with their dense vectors (ranking reads no sparse one); those with an id in `skip`
    left out."""
    if not turns:
        return []
    owner = owner_of(flt)
    if owner is None:  # not one user's filter: no turn keys to look up
        return await _turns_by_session(memory, flt, turns, window, skip)
    wanted = {
        (session, near)
        for session, position in turns
        for near in range(max(1, position - window), position + window + 1)
    }
    keys = [turn_key(*owner, session, near) for session, near in sorted(wanted)]
    selected = flt.and_(MatchAny(TURN_FIELD, keys))
    if skip:
        selected = Filter(selected.must, selected.should, [*selected.must_not, HasId(list(skip))])
    points, _ = await memory.call(
        memory.store.scroll, selected, limit=len(keys), with_vectors="dense"
    )
    # The key is a digest: keep exactly the turns asked for.
    return [p for p in points if turn_of(p.payload) in wanted]


async def _turns_by_session(
    memory: VectorMemory,
    flt: Filter,
    turns: Sequence[tuple[str, int]],
    window: int,
    skip: Collection[str],
) -> list[StoredPoint]:
    around: dict[str, list[int]] = {}
    for session, position in turns:
        around.setdefault(session, []).append(position)
    groups: list[Condition] = [
        Filter(
            must=[
                MatchValue("session_id", session),
                Filter(
                    should=[Range("position", gte=p - window, lte=p + window) for p in positions]
                ),
            ]
        )
        for session, positions in around.items()
    ]
    limit = sum(len(ps) for ps in around.values()) * (2 * window + 1)
    wanted = flt.and_(MatchAny("session_id", list(around)), Filter(should=groups))
    if skip:
        wanted = Filter(wanted.must, wanted.should, [*wanted.must_not, HasId(list(skip))])
    points, _ = await memory.call(memory.store.scroll, wanted, limit=limit, with_vectors="dense")
    return points


async def attach_context(
    memory: VectorMemory, flt: Filter, picked: Sequence[MemoryRecord], window: int
) -> None:
    """Each hit of a session gets the turns within `window` positions of it, in order."""
    turns = [(r.session_id, r.position) for r in picked if r.session_id and r.position]
    if not turns:
        return
    points = await turns_around(memory, flt, turns, window)
    by_session: dict[str, list[MemoryRecord]] = {}
    for p in points:
        record = from_payload(p.id, p.payload)
        by_session.setdefault(record.session_id, []).append(record)
    for r in picked:
        if not (r.session_id and r.position):
            continue
        near = [
            c
            for c in by_session.get(r.session_id, [])
            if c.id != r.id and abs(c.position - r.position) <= window
        ]
        r.context = sorted(near, key=lambda c: c.position)
