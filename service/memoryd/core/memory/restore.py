"""Restoring imported memories into a vector tier: which are new for the user, under which
ids, and writing them as they were (times, payload, a turn embedded after its lead)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memoryd.core.errors import FieldViolation
from memoryd.core.memory.payload import (
    LEAD_FIELD,
    attach_lead,
    content_hash,
    embed_text_of,
    from_payload,
    to_payload,
)
from memoryd.core.memory.points import NewPoint
from memoryd.core.models import ImportResult, MemoryRecord, Scope, Tier
from memoryd.core.retrieval.turns import turn_of, turns_around
from memoryd.stores.vectors.port import StoredPoint, canonical_id

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
        # The user's turns next to the batch's, apart from the import's own: a stored turn
        # between two imported ones is still led again by the first.
        stored = await _stored_neighbours(memory, scope, batch) if lead_chars else {}
        points: list[NewPoint] = []
        for record in batch:
            digest = content_hash(scope, record.tier, record.key, record.content)
            payload = to_payload(record, scope, digest, compress_over_bytes)
            payload["deleted"] = record.deleted
            place = (record.session_id, record.position - 1)
            before = turns.get(place) or _record_of(stored.get(place))
            lead = attach_lead(payload, record, before, lead_chars)
            points.append(NewPoint(record, payload, embed_text_of(payload), lead=lead))
        points += _led_again(batch, turns, stored, lead_chars)
        await memory.insert(points)
    return ImportResult(imported_count=len(plan.new), skipped_count=plan.skipped)


async def _stored_neighbours(
    memory: VectorMemory, scope: Scope, records: Sequence[MemoryRecord]
) -> dict[tuple[str, int], StoredPoint]:
    """The user's stored turns at `records`' turns' places and either side of them, by
    (session, position): one read by turn keys a tier (`turns_around`)."""
    by_tier: dict[Tier, list[tuple[str, int]]] = {}
    for r in records:
        if r.session_id and r.position:
            by_tier.setdefault(r.tier, []).append((r.session_id, r.position))
    found: dict[tuple[str, int], StoredPoint] = {}
    for tier, places in by_tier.items():
        flt = memory.scope_filter(scope, tier, live_only=False)
        for point in await turns_around(memory, flt, places, 1):
            place = turn_of(point.payload)
            if place is not None:  # always: what turns_around reads are turns
                found[place] = point
    return found


def _led_again(
    records: Sequence[MemoryRecord],
    imported: Mapping[tuple[str, int], MemoryRecord],
    stored: Mapping[tuple[str, int], StoredPoint],
    lead_chars: int,
) -> list[NewPoint]:
    """The `stored` turns just after `records`' turns (not themselves imported) that were
    embedded without a lead, to be embedded again after the imported turn: a conversation
    imported in pieces, in any order, ends as it was added."""
    again: list[NewPoint] = []
    for before in records:
        place = (before.session_id, before.position + 1)
        point = stored.get(place) if place not in imported else None
        if point is None or LEAD_FIELD in point.payload or point.payload.get("deleted"):
            continue  # none, led already (by a turn kept meanwhile), or never searched
        record, payload = from_payload(point.id, point.payload), dict(point.payload)
        lead = attach_lead(payload, record, before, lead_chars)
        if lead:
            again.append(NewPoint(record, payload, embed_text_of(payload), lead=lead))
    return again


def _record_of(point: StoredPoint | None) -> MemoryRecord | None:
    return from_payload(point.id, point.payload) if point is not None else None


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
