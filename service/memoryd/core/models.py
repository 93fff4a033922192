"""Domain types shared by the core: tiers, scopes, memory records, requests and results.

Nothing here knows gRPC or any store; the transport converts to and from these.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import StrEnum


class Tier(StrEnum):
    WORKING = "working"
    SHORT_TERM = "short_term"
    LONG_TERM = "long_term"
    PERSONA = "persona"
    EPISODIC = "episodic"
    ENTITY = "entity"
    STRUCTURED = "structured"


class Kind(StrEnum):
    UNSPECIFIED = "unspecified"
    FACT = "fact"
    PREFERENCE = "preference"
    DECISION = "decision"
    NOTE = "note"
    MESSAGE = "message"
    EPISODE = "episode"
    ENTITY = "entity"
    RELATION = "relation"
    DOCUMENT = "document"


class Operation(StrEnum):
    ADD = "add"
    ADD_WITH_PRUNE = "add_with_prune"
    DEDUPLICATED = "deduplicated"
    UPDATED = "updated"


class Role(StrEnum):
    UNSPECIFIED = "unspecified"
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class Source(StrEnum):
    UNSPECIFIED = "unspecified"
    EXPLICIT = "explicit"
    AUTO = "auto"


class PruneStrategy(StrEnum):
    OLDEST_PERCENT = "oldest_percent"
    EXPIRED = "expired"
    ARCHIVE_OLDER_THAN = "archive_older_than"
    BY_FILTER = "by_filter"
    ALL = "all"


@dataclass(frozen=True)
class Principal:
    """Who is calling: attached by the transport from the credential."""

    tenant: str
    subject: str = "anonymous"


@dataclass(frozen=True)
class Scope:
    """What a request is about. The tenant comes from the principal, never the request."""

    tenant: str
    user_id: str
    agent_id: str = ""
    session_id: str = ""
    task_id: str = ""


@dataclass(frozen=True)
class EpisodeStep:
    action: str
    observation: str = ""


@dataclass(frozen=True)
class Episode:
    """What an agent tried (task), how (steps) and how it ended (outcome, success)."""

    task: str
    steps: tuple[EpisodeStep, ...] = ()
    outcome: str = ""
    success: bool = False


@dataclass
class MemoryRecord:
    """One memory as callers see it. Times are epoch seconds (UTC)."""

    id: str
    tier: Tier
    content: str
    kind: Kind = Kind.UNSPECIFIED
    key: str = ""
    score: float = 0.0
    metadata: dict[str, str] = field(default_factory=dict)
    importance: float = 0.5
    created_at: float = 0.0
    updated_at: float = 0.0
    expires_at: float | None = None
    source: Source = Source.UNSPECIFIED
    role: Role = Role.UNSPECIFIED
    agent_id: str = ""
    session_id: str = ""
    task_id: str = ""
    archived: bool = False
    deleted: bool = False
    # Episodic tier: the episode (`content` is its readable rendering).
    episode: Episode | None = None
    # Structured tier: the JSON document (`content` is its readable flattening).
    document_json: str = ""
    # When it was said or happened; 0 means unknown (then `created_at` stands for it).
    occurred_at: float = 0.0
    # Place in its session (1, 2, ... in the order added); 0 when not in a session.
    position: int = 0
    # Retrieve with a context window: the neighbouring turns of a hit, in session order.
    context: list[MemoryRecord] = field(default_factory=list)

    @property
    def when(self) -> float:
        """When it was said or happened: `occurred_at`, else when it was stored."""
        return self.occurred_at or self.created_at


@dataclass
class AddCommand:
    scope: Scope
    tier: Tier
    content: str
    kind: Kind = Kind.UNSPECIFIED
    key: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    importance: float | None = None
    expires_at: float | None = None
    role: Role = Role.UNSPECIFIED
    source: Source = Source.UNSPECIFIED
    auto_prune: bool = False
    episode: Episode | None = None
    document_json: str = ""
    # When it was said or happened (importing a past conversation); None means now.
    occurred_at: float | None = None

    def new_record(
        self,
        content: str,
        kind: Kind,
        now: float,
        expires_at: float | None,
        *,
        episode: Episode | None = None,
        document_json: str = "",
    ) -> MemoryRecord:
        """The memory a vector tier stores for this Add: a fresh id, created `now`."""
        return MemoryRecord(
            id=str(uuid.uuid4()),
            tier=self.tier,
            content=content,
            kind=kind,
            metadata=dict(self.metadata),
            importance=0.5 if self.importance is None else self.importance,
            created_at=now,
            updated_at=now,
            expires_at=expires_at,
            source=Source.EXPLICIT if self.source is Source.UNSPECIFIED else self.source,
            role=self.role,
            agent_id=self.scope.agent_id,
            session_id=self.scope.session_id,
            task_id=self.scope.task_id,
            episode=episode,
            document_json=document_json,
            occurred_at=now if self.occurred_at is None else self.occurred_at,
        )


@dataclass
class AddResult:
    memory_id: str
    operation: Operation
    tier: Tier
    quota_remaining: int
    evicted_keys: list[str] = field(default_factory=list)


@dataclass
class RetrieveQuery:
    scope: Scope
    query: str = ""
    tiers: list[Tier] = field(default_factory=list)
    top_k: int = 0
    filters: dict[str, str] = field(default_factory=dict)
    kinds: list[Kind] = field(default_factory=list)
    min_score: float | None = None
    token_budget: int | None = None
    # Turns before/after each hit of a session to return with it (MemoryRecord.context).
    context_window: int = 0


@dataclass
class RetrieveResult:
    items: list[MemoryRecord]
    total_count: int
    embedding_ms: float = 0.0
    retrieval_ms: float = 0.0
    token_count: int = 0
    truncated: bool = False


@dataclass
class RenderQuery:
    scope: Scope
    query: str = ""
    tiers: list[Tier] = field(default_factory=list)
    top_k: int = 0
    min_score: float | None = None
    token_budget: int | None = None
    context_window: int = 0


@dataclass
class Lookup:
    """Get/Delete by ids and/or keys in one tier."""

    scope: Scope
    tier: Tier
    ids: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)


@dataclass
class GetResult:
    items: list[MemoryRecord]
    missing: list[str]


@dataclass
class PruneCommand:
    scope: Scope
    strategy: PruneStrategy
    tiers: list[Tier] = field(default_factory=list)
    percent: float = 0.0
    older_than_days: int = 0
    filters: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False


@dataclass
class PruneResult:
    deleted_count: int = 0
    archived_count: int = 0
    dry_run: bool = False
    per_tier: dict[Tier, int] = field(default_factory=dict)


@dataclass
class ExportQuery:
    scope: Scope
    # Empty means every tier the server stores.
    tiers: list[Tier] = field(default_factory=list)
    include_archived: bool = False


@dataclass
class TierUsage:
    """What one tier holds for a user. Limits of 0 mean the tier has no quota."""

    tier: Tier
    count: int = 0
    bytes: int = 0
    max_count: int = 0
    max_bytes: int = 0
    percent: float = 0.0
    # The quota profile whose limits these are; empty when the tier has none of its own.
    quota_profile: str = ""


@dataclass(frozen=True)
class UsageAlert:
    tier: Tier
    level: str  # "warning" or "critical"
    percent: float
    message: str


@dataclass
class UsageReport:
    tiers: list[TierUsage]
    alerts: list[UsageAlert]
    estimated_monthly_cost_usd: float
    quota_profile: str


@dataclass
class ImportResult:
    imported_count: int = 0
    skipped_count: int = 0
