"""Restoring imported memories into a vector tier: which are new for the user, under which
ids, and writing them as they were (times, payload, a turn embedded after its lead)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memoryd.core.errors import FieldViolation
from memoryd.core.memory.payload import (
    LEAD_FIELD,
    TURN_FIELD,
    attach_lead,
    content_hash,
    embed_text_of,
    from_payload,
    to_payload,
    turn_key,
)
from memoryd.core.memory.points import NewPoint
from memoryd.core.models import ImportResult, MemoryRecord, Scope, Tier
from memoryd.stores.vectors.port import MatchAny, StoredPoint, canonical_id

if TYPE_CHECKING:
    from memoryd.core.memory.vector_memory import VectorMemory

# Memories looked up, embedded and upserted per batch on import.
IMPORT_BATCH = 64
# Derives the id an imported memory takes when its own id belongs to another user.
_IMPORT_NAMESPACE = uuid.UUID("0b7e2c55-1a8f-4d3c-b6a2-9e4f7d21c3a8")


@dataclass
class RestorePlan:
    """Imported memories that are new for the user (under the ids they will take), and how
    many were skipped because the user already has them."""

    new: list[MemoryRecord] = field(default_factory=list)
    skipped: int = 0


async def plan_restore(
    memory: VectorMemory, scope: Scope, records: Sequence[MemoryRecord]
) -> RestorePlan:
    """Which imported memories are new for `scope`'s user, and under which ids: an id the
    user already has is skipped; an id that belongs to another user or tenant is never
    overwritten: the memory takes an id derived from it (the same on every import, so
    importing twice still skips). Writes nothing."""
    plan = RestorePlan()
    seen: set[str] = set()
    for start in range(0, len(records), IMPORT_BATCH):
        batch = records[start : start + IMPORT_BATCH]
        ids = [canonical_id(r.id) for r in batch]
        known = {p.id: p.payload for p in await memory.call(memory.store.retrieve, ids)}
        targets = [
            (i if i not in known or _owned(known[i], scope) else _derived(scope, i), r)
            for i, r in zip(ids, batch, strict=True)
        ]
        derived = [i for i, _ in targets if i not in known]
        if derived:
            found = await memory.call(memory.store.retrieve, derived)
            known |= {p.id: p.payload for p in found}
        for point_id, record in targets:
            if point_id in known or point_id in seen:
                plan.skipped += 1
                continue
            seen.add(point_id)
            plan.new.append(dataclasses.replace(record, id=point_id, score=0.0, archived=False))
    return plan


async def write_restore(
    memory: VectorMemory,
    scope: Scope,
    plan: RestorePlan,
    compress_over_bytes: int,
    lead_chars: int = 0,
) -> ImportResult:
    """Re-embed and upsert the plan's new memories under `scope`'s user, keeping their
    times and payload (a soft-deleted one stays deleted). A turn is embedded after the turn
    before it, as when it was added: that one comes in the same import, or the user has
    it already; a turn the user has without a lead is embedded again after an imported
    turn before it."""
    turns = {(r.session_id, r.position): r for r in plan.new if r.session_id}
    for start in range(0, len(plan.new), IMPORT_BATCH):
        batch = plan.new[start : start + IMPORT_BATCH]
        # The user's turns before the batch's, apart from the import's own: a stored turn
        # between two imported ones is still led again by the first.
        stored = await _stored_turns_before(memory, scope, batch, turns) if lead_chars else {}
        points: list[NewPoint] = []
        for record in batch:
            digest = content_hash(scope, record.tier, record.key, record.content)
            payload = to_payload(record, scope, digest, compress_over_bytes)
            payload["deleted"] = record.deleted
            place = (record.session_id, record.position - 1)
            before = turns.get(place) or stored.get(place)
            lead = attach_lead(payload, record, before, lead_chars)
            points.append(NewPoint(record, payload, embed_text_of(payload), lead=lead))
        if lead_chars > 0:
            points += await _stored_turns_after(memory, scope, batch, turns, lead_chars)
        await memory.insert(points)
    return ImportResult(imported_count=len(plan.new), skipped_count=plan.skipped)


async def _stored_turns_before(
    memory: VectorMemory,
    scope: Scope,
    records: Sequence[MemoryRecord],
    known: Mapping[tuple[str, int], MemoryRecord],
) -> dict[tuple[str, int], MemoryRecord]:
    """The user's stored turns just before `records`' turns whose previous turn is not
    `known` (the import's own)."""
    wanted: dict[Tier, set[tuple[str, int]]] = {}
    for r in records:
        place = (r.session_id, r.position - 1)
        if r.session_id and r.position > 1 and place not in known:
            wanted.setdefault(r.tier, set()).add(place)
    found = [from_payload(p.id, p.payload) for p in await _stored_turns(memory, scope, wanted)]
    return {(r.session_id, r.position): r for r in found}


async def _stored_turns_after(
    memory: VectorMemory,
    scope: Scope,
    records: Sequence[MemoryRecord],
    imported: Mapping[tuple[str, int], MemoryRecord],
    lead_chars: int,
) -> list[NewPoint]:
    """The user's stored turns just after `records`' turns (not themselves imported) that
    were embedded without a lead, to be embedded again after the imported turn: a
    conversation imported in pieces, in any order, ends as it was added."""
    wanted: dict[Tier, set[tuple[str, int]]] = {}
    for r in records:
        place = (r.session_id, r.position + 1)
        if r.session_id and r.position and place not in imported:
            wanted.setdefault(r.tier, set()).add(place)
    previous = {(r.session_id, r.position): r for r in records}
    again: list[NewPoint] = []
    for point in await _stored_turns(memory, scope, wanted):
        if LEAD_FIELD in point.payload or point.payload.get("deleted"):
            continue  # led already (by a turn kept meanwhile), or never searched
        record = from_payload(point.id, point.payload)
        payload = dict(point.payload)
        before = previous.get((record.session_id, record.position - 1))
        lead = attach_lead(payload, record, before, lead_chars)
        if lead:
            again.append(NewPoint(record, payload, embed_text_of(payload), lead=lead))
    return again


async def _stored_turns(
    memory: VectorMemory, scope: Scope, places: Mapping[Tier, Collection[tuple[str, int]]]
) -> list[StoredPoint]:
    """The user's stored memories at these (session, position) places of each tier, read
    by their turn keys in one scroll a tier."""
    found: list[StoredPoint] = []
    for tier, wanted in places.items():
        keys = [turn_key(scope.tenant, scope.user_id, s, p) for s, p in sorted(wanted)]
        flt = memory.scope_filter(scope, tier, live_only=False, extra=[MatchAny(TURN_FIELD, keys)])
        points, _ = await memory.call(memory.store.scroll, flt, limit=len(keys))
        found += [  # the key is a digest: keep exactly the places asked for
            p
            for p in points
            if (str(p.payload.get("session_id")), int(p.payload.get("position") or 0)) in wanted
        ]
    return found


def check_vector_restore(record: MemoryRecord) -> list[FieldViolation]:
    """Vector store point ids are UUIDs."""
    if is_uuid(record.id):
        return []
    return [FieldViolation("id", "must be a UUID for long-term and persona items")]


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _owned(payload: Mapping[str, Any], scope: Scope) -> bool:
    return payload.get("tenant") == scope.tenant and payload.get("user_id") == scope.user_id


def _derived(scope: Scope, point_id: str) -> str:
    return str(uuid.uuid5(_IMPORT_NAMESPACE, "\x00".join((scope.tenant, scope.user_id, point_id))))
