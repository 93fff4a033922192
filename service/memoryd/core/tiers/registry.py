"""The tier registry: every tier is declared here once, with its traits.

The engine, usage, backups, maintenance, export/import, erasure and the composition root
read this table; no other module keeps a list of tiers (tests/unit/test_tier_registry.py
walks the `Tier` enum and the source tree to keep it so). Adding a tier is one `TierSpec`
here plus its module (CONTRIBUTING.md, "Add a tier").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from memoryd.core.lifecycle.cold_archive import ColdArchive
from memoryd.core.lifecycle.quotas import QuotaProfiles
from memoryd.core.memory.vector_memory import VectorMemory
from memoryd.core.models import Kind, Tier
from memoryd.core.tiers.base import TierHandler
from memoryd.core.tiers.entity import EntityTier
from memoryd.core.tiers.episodic import EpisodicTier
from memoryd.core.tiers.long_term import LongTermTier
from memoryd.core.tiers.persona import PersonaTier
from memoryd.core.tiers.short_term import MessageListener, ShortTermTier
from memoryd.core.tiers.structured import StructuredTier
from memoryd.core.tiers.working import WorkingTier
from memoryd.settings import RetentionSettings, Settings
from memoryd.stores.hot.port import HotStore
from memoryd.stores.locks.port import UserLocks
from memoryd.stores.usage.port import UsageCounters


class StoreFamily(StrEnum):
    """Where a tier's items live; usage prices the two differently."""

    HOT = "hot"
    VECTORS = "vectors"


class SessionPart(StrEnum):
    """What a tier does for sessions (core/sessions reads it from here)."""

    # The conversation EndSession reads, then clears.
    MESSAGES = "messages"
    # Facts learnt from it, and remembered or forgotten on request.
    FACTS = "facts"
    # The entities and relations it names.
    ENTITIES = "entities"
    # Its summary.
    EPISODES = "episodes"


@dataclass(frozen=True)
class TierDeps:
    """What a tier's builder may use, made once by the composition root (app.py)."""

    settings: Settings
    clock: Callable[[], float]
    hot: HotStore
    memory: VectorMemory
    archive: ColdArchive
    quotas: QuotaProfiles
    # Per user and tier usage (count, bytes): what vector tiers' quotas and Usage read.
    counters: UsageCounters
    # Per user locks (shared by replicas on one Redis): the entity tier's merge by name.
    locks: UserLocks
    on_message: MessageListener | None = None


@dataclass(frozen=True)
class TierSpec:
    tier: Tier
    # How messages and alerts name the tier ("working memory").
    title: str
    store: StoreFamily
    # Builds the tier's handler; None declares a tier this version does not serve yet
    # (its requests answer UNIMPLEMENTED).
    build: Callable[[TierDeps], TierHandler] | None
    # The Settings attribute holding the tier's own settings block, if any.
    settings_section: str | None = None
    # The Scope field a request on this tier must name ("task_id": working memory).
    scope_field: str = ""
    # Addressed by key as well as by id (Get/Delete `keys`).
    keyed: bool = False
    # The request fields that carry this tier's structured bodies instead of `content`.
    body_fields: tuple[str, ...] = ()
    # Kinds only this tier stores; every other tier refuses them.
    kinds: frozenset[Kind] = frozenset()
    exported: bool = True
    backed_up: bool = False
    counted_in_usage: bool = True
    erased: bool = True
    # Returned before every other tier in a multi-tier Retrieve (the task's state).
    first_in_retrieval: bool = False
    # Listed at the head of RenderContext's <memory> block, whatever the query.
    render_header: bool = False
    # Retention: the RetentionSettings field with the archive age in days, if archived.
    archive_after_setting: str = ""
    # Archive before purging expired items (an item whose TTL just lapsed is archived).
    archive_first: bool = False
    # Its part in sessions that learn (core/sessions/parts.py), if any.
    session_part: SessionPart | None = None

    def archive_after_days(self, retention: RetentionSettings) -> int:
        return int(getattr(retention, self.archive_after_setting))


def _working(d: TierDeps) -> TierHandler:
    return WorkingTier(d.hot, d.settings.working, d.settings.limits, d.clock)


def _short_term(d: TierDeps) -> TierHandler:
    return ShortTermTier(d.hot, d.settings.short_term, d.clock, listener=d.on_message)


def _long_term(d: TierDeps) -> TierHandler:
    return LongTermTier(
        d.memory,
        d.settings.long_term,
        d.clock,
        d.archive,
        d.quotas,
        d.settings.limits.max_content_bytes,
        foreign_kinds=kinds_owned_elsewhere(Tier.LONG_TERM),
        counters=d.counters,
    )


def _persona(d: TierDeps) -> TierHandler:
    return PersonaTier(d.memory, d.settings.long_term, d.settings.limits, d.clock)


def _episodic(d: TierDeps) -> TierHandler:
    s = d.settings
    return EpisodicTier(
        d.memory,
        s.episodic,
        d.clock,
        d.archive,
        s.limits.max_content_bytes,
        s.long_term.compress_over_bytes,
        counters=d.counters,
        quotas=d.quotas,
    )


def _structured(d: TierDeps) -> TierHandler:
    s = d.settings
    return StructuredTier(
        d.memory,
        s.structured,
        d.clock,
        d.archive,
        s.limits.max_content_bytes,
        s.long_term.compress_over_bytes,
        counters=d.counters,
        quotas=d.quotas,
    )


def _entity(d: TierDeps) -> TierHandler:
    s = d.settings
    return EntityTier(
        d.memory,
        s.entity,
        d.quotas,
        s.limits,
        d.clock,
        d.counters,
        d.locks,
        s.long_term.compress_over_bytes,
    )


_SPECS = (
    TierSpec(
        Tier.WORKING,
        "working memory",
        StoreFamily.HOT,
        _working,
        settings_section="working",
        scope_field="task_id",
        keyed=True,
        first_in_retrieval=True,
    ),
    TierSpec(
        Tier.SHORT_TERM,
        "short-term memory",
        StoreFamily.HOT,
        _short_term,
        settings_section="short_term",
        scope_field="session_id",
        session_part=SessionPart.MESSAGES,
    ),
    TierSpec(
        Tier.LONG_TERM,
        "long-term memory",
        StoreFamily.VECTORS,
        _long_term,
        settings_section="long_term",
        backed_up=True,
        archive_after_setting="long_term_archive_after_days",
    ),
    TierSpec(
        Tier.PERSONA,
        "persona memory",
        StoreFamily.VECTORS,
        _persona,
        keyed=True,
        backed_up=True,
        render_header=True,
        session_part=SessionPart.FACTS,
    ),
    TierSpec(
        Tier.EPISODIC,
        "episodic memory",
        StoreFamily.VECTORS,
        _episodic,
        settings_section="episodic",
        body_fields=("episode",),
        kinds=frozenset({Kind.EPISODE}),
        backed_up=True,
        archive_after_setting="episodic_archive_after_days",
        archive_first=True,
        session_part=SessionPart.EPISODES,
    ),
    TierSpec(
        Tier.ENTITY,
        "entity memory",
        StoreFamily.VECTORS,
        _entity,
        settings_section="entity",
        # Entities are addressed by name as well (Get/Delete `keys`).
        keyed=True,
        body_fields=("entity", "relation"),
        kinds=frozenset({Kind.ENTITY, Kind.RELATION}),
        backed_up=True,
        session_part=SessionPart.ENTITIES,
    ),
    TierSpec(
        Tier.STRUCTURED,
        "structured memory",
        StoreFamily.VECTORS,
        _structured,
        settings_section="structured",
        body_fields=("document_json",),
        kinds=frozenset({Kind.DOCUMENT}),
        backed_up=True,
        archive_after_setting="structured_archive_after_days",
    ),
)

TIERS: dict[Tier, TierSpec] = {spec.tier: spec for spec in _SPECS}


def spec(tier: Tier) -> TierSpec:
    return TIERS[tier]


def served() -> list[TierSpec]:
    """The tiers this version serves, in declaration order."""
    return [s for s in TIERS.values() if s.build is not None]


def kinds_owned_elsewhere(tier: Tier) -> frozenset[Kind]:
    return frozenset().union(*(s.kinds for s in TIERS.values() if s.tier is not tier))


def backed_up_tiers() -> list[Tier]:
    return [s.tier for s in served() if s.backed_up]


def retained() -> list[TierSpec]:
    """Tiers that maintenance archives; archive-first ones last, so that an item's own
    TTL lapsing on the day it is due for the archive sends it to the archive."""
    return sorted((s for s in served() if s.archive_after_setting), key=lambda s: s.archive_first)


def build_tiers(deps: TierDeps, only: Iterable[Tier] | None = None) -> dict[Tier, TierHandler]:
    """One handler per served tier (or per tier of `only`), in declaration order."""
    wanted = set(TIERS) if only is None else set(only)
    return {s.tier: s.build(deps) for s in served() if s.tier in wanted and s.build is not None}
