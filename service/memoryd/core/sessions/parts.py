"""What sessions need from the tiers, and which tier gives it: the registry declares each
tier's part (`TierSpec.session_part`) and `parts_of` reads it, so no wiring code names a
tier class.

Messages and facts are required (without them sessions are off); entities and episodes
are written when their tiers are served.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from memoryd.core.models import (
    Entity,
    Episode,
    Kind,
    Lookup,
    MemoryRecord,
    Relation,
    Scope,
    Source,
    Tier,
)
from memoryd.core.tiers.base import TierHandler
from memoryd.core.tiers.entity_records import EntityChange
from memoryd.core.tiers.persona import FactChange
from memoryd.core.tiers.registry import SessionPart, served


@runtime_checkable
class Messages(Protocol):
    """The session's conversation: read at EndSession, then cleared."""

    async def messages(self, scope: Scope) -> list[MemoryRecord]: ...

    async def delete(self, lookup: Lookup) -> int: ...


@runtime_checkable
class Facts(Protocol):
    """Facts about the user: learnt from a conversation, remembered or forgotten on
    request."""

    async def learn(
        self,
        scope: Scope,
        key: str,
        value: str,
        *,
        kind: Kind = Kind.FACT,
        session_id: str = "",
        metadata: dict[str, str] | None = None,
    ) -> FactChange: ...

    async def remember(
        self, scope: Scope, key: str, value: str, *, session_id: str = ""
    ) -> FactChange: ...

    async def forget(
        self,
        scope: Scope,
        keys: Sequence[str],
        about: str,
        min_score: float,
        *,
        among: set[str] | None = None,
    ) -> list[MemoryRecord]: ...


@runtime_checkable
class Entities(Protocol):
    """Entities and relations a conversation names."""

    async def upsert_entity(
        self,
        scope: Scope,
        entity: Entity,
        *,
        source: Source = Source.EXPLICIT,
        auto_prune: bool = False,
        session_id: str = "",
        metadata: Mapping[str, str] | None = None,
        importance: float | None = None,
    ) -> EntityChange: ...

    async def add_relation(
        self,
        scope: Scope,
        relation: Relation,
        *,
        source: Source = Source.EXPLICIT,
        auto_prune: bool = False,
        session_id: str = "",
        metadata: Mapping[str, str] | None = None,
        importance: float | None = None,
    ) -> EntityChange: ...


@runtime_checkable
class Summaries(Protocol):
    """Where a session's summary goes, once (under an id derived from its messages)."""

    async def add_summary(
        self,
        scope: Scope,
        point_id: str,
        episode: Episode,
        *,
        auto_prune: bool = False,
        metadata: dict[str, str] | None = None,
    ) -> MemoryRecord | None: ...


@dataclass(frozen=True)
class SessionParts:
    messages: Messages
    facts: Facts
    entities: Entities | None = None
    episodes: Summaries | None = None


def _wrong(handler: TierHandler, part: SessionPart) -> TypeError:
    # A registry entry giving a part to a handler without its methods: a wiring bug.
    return TypeError(f"the {handler.tier.value} tier is declared as sessions' {part.value}")


def parts_of(tiers: Mapping[Tier, TierHandler]) -> SessionParts | None:
    """The served tiers' session parts, as the registry declares them; None when messages
    or facts are not served (sessions are then off)."""
    handlers = {
        s.session_part: tiers[s.tier] for s in served() if s.session_part and s.tier in tiers
    }
    messages, facts = handlers.get(SessionPart.MESSAGES), handlers.get(SessionPart.FACTS)
    if messages is None or facts is None:
        return None
    if not isinstance(messages, Messages):
        raise _wrong(messages, SessionPart.MESSAGES)
    if not isinstance(facts, Facts):
        raise _wrong(facts, SessionPart.FACTS)
    entities = handlers.get(SessionPart.ENTITIES)
    if entities is not None and not isinstance(entities, Entities):
        raise _wrong(entities, SessionPart.ENTITIES)
    episodes = handlers.get(SessionPart.EPISODES)
    if episodes is not None and not isinstance(episodes, Summaries):
        raise _wrong(episodes, SessionPart.EPISODES)
    return SessionParts(messages, facts, entities, episodes)
