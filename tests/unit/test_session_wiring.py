"""Sessions are wired from the tier registry: each tier's `session_part` says what it
does for sessions, and the wiring reads it (no wiring code names a tier class)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memoryd.app import App
from memoryd.core.lifecycle.cold_archive import ColdArchive
from memoryd.core.lifecycle.quotas import QuotaProfiles
from memoryd.core.models import Lookup, MemoryRecord, Scope, Tier
from memoryd.core.sessions.parts import Entities, Facts, Messages, Summaries, parts_of
from memoryd.core.tiers.base import TierHandler
from memoryd.core.tiers.registry import TIERS, SessionPart, TierDeps, build_tiers, served
from memoryd.settings import Settings
from memoryd.stores.archive.jsonl_store import JsonlArchiveStore
from memoryd.stores.hot.memory_store import InProcessHotStore
from memoryd.stores.locks.memory_locks import InProcessLocks
from memoryd.stores.usage.memory_counters import InProcessCounters
from tests.support.clock import MovableClock
from tests.unit.unit_kit import AppFactory

_REQUIRED = (SessionPart.MESSAGES, SessionPart.FACTS)
_PROTOCOL = {
    SessionPart.MESSAGES: Messages,
    SessionPart.FACTS: Facts,
    SessionPart.ENTITIES: Entities,
    SessionPart.EPISODES: Summaries,
}


class _Conversation:
    """A stand-in short-term tier: what sessions read and clear."""

    tier = Tier.SHORT_TERM

    async def messages(self, scope: Scope) -> list[MemoryRecord]:
        return []

    async def delete(self, lookup: Lookup) -> int:
        return 0


class _NoFacts:
    """A stand-in persona tier that offers none of what sessions need from facts."""

    tier = Tier.PERSONA


def _handlers(**by_tier: object) -> dict[Tier, TierHandler]:
    handlers: dict[Tier, Any] = {Tier(k): v for k, v in by_tier.items()}
    return handlers


def test_each_session_part_is_declared_by_exactly_one_tier() -> None:
    declared = [s.session_part for s in TIERS.values() if s.session_part is not None]
    assert sorted(declared) == sorted(SessionPart)


def test_sessions_are_off_without_the_tier_that_holds_facts() -> None:
    assert parts_of(_handlers(short_term=_Conversation())) is None


def test_a_tier_declared_for_a_part_it_does_not_offer_is_a_wiring_error() -> None:
    with pytest.raises(TypeError, match="persona"):
        parts_of(_handlers(short_term=_Conversation(), persona=_NoFacts()))


async def test_each_served_tier_fills_the_part_the_registry_gives_it(
    make_app: AppFactory, tmp_path: Path, clock: MovableClock
) -> None:
    app: App = await make_app()
    settings = Settings(data_dir=tmp_path / "tiers")
    deps = TierDeps(
        settings=settings,
        clock=clock,
        hot=InProcessHotStore(),
        memory=app.memory,
        archive=ColdArchive(JsonlArchiveStore(tmp_path / "archive"), clock),
        quotas=QuotaProfiles(settings.quotas, settings.long_term),
        counters=InProcessCounters(),
        locks=InProcessLocks(),
    )
    tiers = build_tiers(deps)
    parts = parts_of(tiers)
    assert parts is not None
    filled = {
        SessionPart.MESSAGES: parts.messages,
        SessionPart.FACTS: parts.facts,
        SessionPart.ENTITIES: parts.entities,
        SessionPart.EPISODES: parts.episodes,
    }
    for spec in served():
        if spec.session_part is not None:
            assert filled[spec.session_part] is tiers[spec.tier], spec.tier
            assert isinstance(tiers[spec.tier], _PROTOCOL[spec.session_part])
    # Without the entity and episodic tiers, sessions still run; they write neither.
    fewer = parts_of({t: h for t, h in tiers.items() if TIERS[t].session_part in _REQUIRED})
    assert fewer is not None and fewer.entities is None and fewer.episodes is None
