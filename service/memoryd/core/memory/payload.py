"""How a memory is laid out in the vector store's payload, and read back.

Content over the compression threshold is stored zlib-compressed (base64 in `content_z`)
and returned decompressed: callers never see the difference.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Mapping
from typing import Any

from memoryd.core.models import (
    FactVersion,
    Kind,
    MemoryRecord,
    Origin,
    Role,
    Scope,
    Source,
    Tier,
)
from memoryd.core.retrieval.conversation import SPEAKER_KEYS, speaker_of
from memoryd.core.text import utf8_len
from memoryd.core.tiers.bodies import body_payload, document_of, entity_of, episode_of, relation_of


def content_hash(scope: Scope, tier: Tier, key: str, content: str) -> str:
    """Identity of a memory's content for de-duplication, per tenant, user and tier."""
    normal = " ".join(content.split()).casefold()
    material = "\x00".join((scope.tenant, scope.user_id, tier.value, key, normal))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


# A turn's place among every user's turns: a short digest of tenant, user and session,
# and its position, in one indexed keyword, so that the turns around a hit are read by an
# index lookup of exactly those turns. (Session ids and positions alone are shared by
# users, and a filter of sessions and position ranges is checked point by point: ~50 ms
# for a user with 10,000 memories among 300,000, measured in ADR 0600.)
TURN_FIELD = "turn"


def turn_key(tenant: str, user_id: str, session_id: str, position: int) -> str:
    material = "\x00".join((tenant, user_id, session_id)).encode("utf-8")
    return f"{hashlib.blake2b(material, digest_size=8).hexdigest()}:{position}"


def to_payload(
    record: MemoryRecord, scope: Scope, digest: str, compress_over_bytes: int
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "tenant": scope.tenant,
        "user_id": scope.user_id,
        "tier": record.tier.value,
        "kind": record.kind.value,
        "key": record.key,
        "metadata": dict(record.metadata),
        "importance": record.importance,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "occurred_at": record.when,
        "deleted": False,
        "source": record.source.value,
        "role": record.role.value,
        "agent_id": record.agent_id,
        "session_id": record.session_id,
        "task_id": record.task_id,
        "content_hash": digest,
        "size": utf8_len(record.content),
    }
    if record.expires_at is not None:
        payload["expires_at"] = record.expires_at
    if record.origin is not Origin.UNSPECIFIED:
        payload["origin"] = record.origin.value
    if record.position:
        payload["position"] = record.position
    if record.session_id and record.position:
        payload[TURN_FIELD] = turn_key(
            scope.tenant, scope.user_id, record.session_id, record.position
        )
    raw = record.content.encode("utf-8")
    if len(raw) > compress_over_bytes:
        packed = zlib.compress(raw, level=6)
        payload["content_z"] = base64.b64encode(packed).decode("ascii")
        payload["compressed"] = True
        payload["stored_size"] = len(packed)
    else:
        payload["content"] = record.content
        payload["compressed"] = False
        payload["stored_size"] = len(raw)
    payload.update(body_payload(record, compress_over_bytes))
    if record.history:
        payload["history"] = [
            {"content": v.content, "source": v.source.value, "replaced_at": v.replaced_at}
            for v in record.history
        ]
    return payload


def history_of(payload: Mapping[str, Any]) -> tuple[FactVersion, ...]:
    return tuple(
        FactVersion(
            content=str(v.get("content", "")),
            source=Source(v.get("source", Source.UNSPECIFIED.value)),
            replaced_at=float(v.get("replaced_at", 0.0)),
        )
        for v in payload.get("history") or []
        if isinstance(v, dict)
    )


def content_of(payload: Mapping[str, Any]) -> str:
    if payload.get("compressed"):
        return zlib.decompress(base64.b64decode(payload["content_z"])).decode("utf-8")
    return str(payload.get("content", ""))


def from_payload(point_id: str, payload: dict[str, Any], score: float = 0.0) -> MemoryRecord:
    expires = payload.get("expires_at")
    return MemoryRecord(
        id=point_id,
        tier=Tier(payload["tier"]),
        content=content_of(payload),
        kind=Kind(payload.get("kind", Kind.UNSPECIFIED.value)),
        key=payload.get("key", ""),
        score=score,
        metadata=dict(payload.get("metadata") or {}),
        importance=float(payload.get("importance", 0.5)),
        created_at=float(payload.get("created_at", 0.0)),
        updated_at=float(payload.get("updated_at", 0.0)),
        expires_at=float(expires) if expires is not None else None,
        source=Source(payload.get("source", Source.UNSPECIFIED.value)),
        origin=Origin(payload.get("origin", Origin.UNSPECIFIED.value)),
        role=Role(payload.get("role", Role.UNSPECIFIED.value)),
        agent_id=payload.get("agent_id", ""),
        session_id=payload.get("session_id", ""),
        task_id=payload.get("task_id", ""),
        deleted=bool(payload.get("deleted", False)),
        episode=episode_of(payload),
        document_json=document_of(payload),
        entity=entity_of(payload),
        relation=relation_of(payload),
        history=history_of(payload),
        occurred_at=float(payload.get("occurred_at") or 0.0),
        position=int(payload.get("position") or 0),
    )


# Metadata saying when and by whom something was said. A turn of a conversation ("I
# adopted her last week") means little without its speaker and date, and questions name
# them ("When did Maria adopt her dog?"), so they are indexed with the content.
CONTEXT_METADATA_KEYS = ("date", "session_date", "speaker", "author", "sender")


# The id of the turn before a memory in its session, when the memory's dense vector was
# computed with that turn as its lead (ADR 0400). The text itself is not copied: deleting a
# turn must not leave its words in its neighbour's payload.
LEAD_FIELD = "lead_id"


def is_turn(kind: Kind, metadata: Mapping[str, Any]) -> bool:
    """A turn of a conversation: a message, or a memory that names who said it. Only turns
    lead each other; a fact or a note stands alone whatever was added before it."""
    return kind is Kind.MESSAGE or any(metadata.get(k) for k in SPEAKER_KEYS)


def lead_for(
    kind: Kind, metadata: Mapping[str, Any], before: MemoryRecord | None, limit: int
) -> str:
    """The lead a memory (its `kind` and `metadata`) is embedded after: the turn `before`
    it in its session, when both are turns and that one is not deleted; else none."""
    if before is None or before.deleted or not is_turn(kind, metadata):
        return ""
    if not is_turn(before.kind, before.metadata):
        return ""
    return lead_of(before.content, before.metadata, limit)


def attach_lead(
    payload: dict[str, Any], record: MemoryRecord, before: MemoryRecord | None, limit: int
) -> str:
    """`lead_for` the record, whose id is then kept in its `payload` (`LEAD_FIELD`)."""
    lead = lead_for(record.kind, record.metadata, before, limit)
    if lead and before is not None:
        payload[LEAD_FIELD] = before.id
    return lead


def lead_of(content: str, metadata: Mapping[str, Any], limit: int) -> str:
    """What a turn lends the embedding of the turn after it: its speaker and the last
    `limit` characters of its text (the end of a turn is what the reply answers). The
    speaker is its metadata's, else the name its line begins with (ADR 0407), which a turn
    longer than `limit` would otherwise lose."""
    if limit <= 0:
        return ""
    # A line within `limit` lends its own "Name: " already.
    speaker = speaker_of(metadata, content, said=len(content) > limit).strip()
    text = content[-limit:]
    return f"{speaker}: {text}" if speaker else text


def with_lead(lead: str, text: str) -> str:
    """The text a dense vector is computed from: the memory's own, after its lead."""
    return f"{lead}\n{text}" if lead else text


def embed_text_of(payload: Mapping[str, Any]) -> str:
    """The text a memory's vectors are computed from: persona facts embed as "key: value",
    other memories as their content, prefixed "<date> <speaker>: " when the metadata
    holds those (see CONTEXT_METADATA_KEYS). Keyword terms come from this text; the dense
    vector may also see a lead (`with_lead`)."""
    return embed_text_for(
        payload.get("tier", ""),
        str(payload.get("key", "")),
        content_of(payload),
        payload.get("metadata") or {},
    )


def embed_text_for(tier: str, key: str, content: str, metadata: Mapping[str, Any]) -> str:
    """`embed_text_of` from a memory's parts, before its payload exists (an Add embeds its
    text before it takes the user's lock)."""
    if tier == Tier.PERSONA.value:
        return f"{key}: {content}"
    context = [v for k in CONTEXT_METADATA_KEYS if (v := str(metadata.get(k) or "").strip())]
    return f"{' '.join(context)}: {content}" if context else content
