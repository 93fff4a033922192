"""Entity and relation records: what an Add or an import must hold, how a new one is
built, and how a known entity learns from a new mention of it.

Pure functions: the entity tier (`entity.py`) finds, counts and writes.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from memoryd.core.errors import FieldViolation
from memoryd.core.models import (
    AddCommand,
    Entity,
    Kind,
    MemoryRecord,
    Operation,
    Relation,
    Scope,
    Source,
    Tier,
)
from memoryd.core.tiers.bodies import (
    MAX_ALIASES,
    entity_problems,
    name_key,
    relation_problems,
    render_entity,
    render_relation,
)
from memoryd.core.tiers.entity_graph import names_of
from memoryd.core.validation import Violations
from memoryd.settings import LimitSettings


@dataclass
class EntityChange:
    """What an entity or relation Add did."""

    record: MemoryRecord
    operation: Operation
    quota_remaining: int
    # Entities a relation created for its ends.
    created: list[MemoryRecord] = field(default_factory=list)
    # Ids of the relations a new relation closed.
    closed: list[str] = field(default_factory=list)


def check_add(cmd: AddCommand, limits: LimitSettings, v: Violations) -> None:
    """An entity-tier Add: exactly one entity or relation, and nothing else."""
    if (cmd.entity is None) == (cmd.relation is None):
        v.add("entity", "the entity tier takes exactly one of `entity` and `relation`")
    if cmd.content:
        v.add("content", "must be empty for the entity tier: the entity or relation is it")
    if cmd.key:
        v.add("key", "must be empty for the entity tier: an entity is named by entity.name")
    if cmd.expires_at is not None:
        v.add(
            "expires_at",
            "must be unset for the entity tier: entities persist, and a relation ends "
            "with relation.invalid_at",
        )
    if cmd.entity is not None:
        for p in entity_problems(cmd.entity, limits.max_key_bytes, limits.max_content_bytes):
            v.add(p.field, p.description)
        if cmd.entity.relations:
            v.add("entity.relations", "is filled on read; add relations with `relation`")
        if cmd.kind not in (Kind.UNSPECIFIED, Kind.ENTITY):
            v.add("kind", "must be ENTITY (or unset) for an entity")
    if cmd.relation is not None:
        for p in relation_problems(cmd.relation, limits.max_key_bytes):
            v.add(p.field, p.description)
        if cmd.kind not in (Kind.UNSPECIFIED, Kind.RELATION):
            v.add("kind", "must be RELATION (or unset) for a relation")


def restore_problems(record: MemoryRecord, limits: LimitSettings) -> list[FieldViolation]:
    """What is wrong with an imported entity-tier item."""
    problems: list[FieldViolation] = []
    try:
        uuid.UUID(record.id)
    except ValueError:
        problems.append(FieldViolation("id", "must be a UUID for entity items"))
    if (record.entity is None) == (record.relation is None):
        problems.append(
            FieldViolation("entity", "an entity item holds exactly one of entity and relation")
        )
    elif record.entity is not None:
        problems += entity_problems(record.entity, limits.max_key_bytes, limits.max_content_bytes)
        if record.kind is not Kind.ENTITY:
            problems.append(FieldViolation("kind", "must be ENTITY for an entity"))
    elif record.relation is not None:
        problems += relation_problems(record.relation, limits.max_key_bytes)
        if record.kind is not Kind.RELATION:
            problems.append(FieldViolation("kind", "must be RELATION for a relation"))
    return problems


def derived(record: MemoryRecord) -> MemoryRecord | None:
    """An imported item with its content and name key derived from its body, as on Add
    (an import cannot make them differ); None when it holds no body."""
    if record.entity is not None:
        entity = dataclasses.replace(record.entity, relations=())
        return dataclasses.replace(
            record, entity=entity, content=render_entity(entity), key=name_key(entity.name)
        )
    if record.relation is not None:
        return dataclasses.replace(record, content=render_relation(record.relation), key="")
    return None


def new_record(
    scope: Scope,
    kind: Kind,
    content: str,
    source: Source,
    now: float,
    session_id: str,
    metadata: Mapping[str, str] | None,
    importance: float | None,
    *,
    key: str = "",
    entity: Entity | None = None,
    relation: Relation | None = None,
) -> MemoryRecord:
    """A new entity or relation record (what the two share)."""
    return MemoryRecord(
        id=str(uuid.uuid4()),
        tier=Tier.ENTITY,
        content=content,
        kind=kind,
        key=key,
        metadata=dict(metadata or {}),
        importance=0.5 if importance is None else importance,
        created_at=now,
        updated_at=now,
        source=source,
        agent_id=scope.agent_id,
        session_id=session_id,
        entity=entity,
        relation=relation,
    )


def new_entity(
    scope: Scope,
    entity: Entity,
    source: Source,
    now: float,
    *,
    session_id: str = "",
    metadata: Mapping[str, str] | None = None,
    importance: float | None = None,
) -> MemoryRecord:
    """A new entity's record: its name's spacing normalised, aliases that repeat the name
    (or each other) dropped, keyed by its name."""
    name = " ".join(entity.name.split())
    aliases = [a.strip() for a in entity.aliases if name_key(a) != name_key(name)]
    clean = Entity(
        name=name,
        type=entity.type.strip(),
        aliases=tuple(dict.fromkeys(aliases))[:MAX_ALIASES],
        description=entity.description.strip(),
    )
    return new_record(
        scope,
        Kind.ENTITY,
        render_entity(clean),
        source,
        now,
        session_id,
        metadata,
        importance,
        key=name_key(name),
        entity=clean,
    )


def merged(existing: MemoryRecord, new: Entity, source: Source) -> Entity | None:
    """`existing` after learning `new` (its aliases, and a type or description it lacked,
    or any, unless an extracted entity would overwrite an explicit one); None when
    nothing changes."""
    old = existing.entity
    assert old is not None
    aliases = list(old.aliases)
    known = names_of(existing)
    for name in (new.name, *new.aliases):
        if (key := name_key(name)) and key not in known:
            aliases.append(" ".join(name.split()))
            known.add(key)
    may_replace = source is Source.EXPLICIT or existing.source is not Source.EXPLICIT
    kind = new.type.strip() if new.type.strip() and (may_replace or not old.type) else old.type
    description = new.description.strip()
    if not description or not (may_replace or not old.description):
        description = old.description
    result = Entity(old.name, kind, tuple(aliases[:MAX_ALIASES]), description)
    return None if result == dataclasses.replace(old, relations=()) else result


def new_relation(
    scope: Scope,
    relation: Relation,
    subject: Entity,
    obj: Entity,
    valid_from: float,
    invalid_at: float | None,
    source: Source,
    now: float,
    *,
    session_id: str,
    metadata: Mapping[str, str] | None,
    importance: float | None,
) -> MemoryRecord:
    """A new relation's record, naming its ends as their entities are named."""
    body = Relation(
        subject=subject.name,
        predicate=" ".join(relation.predicate.split()),
        object=obj.name,
        valid_from=valid_from,
        invalid_at=invalid_at,
    )
    return new_record(
        scope,
        Kind.RELATION,
        render_relation(body),
        source,
        now,
        session_id,
        metadata,
        importance,
        relation=body,
    )
