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


class Origin(StrEnum):
    """How a memory came in, where kind and source do not tell (provenance for operators;
    `Source` is whose authority a memory has). Other writes leave it unspecified: a message
    is kind MESSAGE, an extraction source AUTO, anything else an explicit Add."""

    UNSPECIFIED = "unspecified"
    # Restored by Import.
    IMPORT = "import"
    # A persona fact stated by a memory command ("remember that ...") in a user message.
    COMMAND = "command"


class PruneStrategy(StrEnum):
    OLDEST_PERCENT = "oldest_percent"
    EXPIRED = "expired"
    ARCHIVE_OLDER_THAN = "archive_older_than"
    BY_FILTER = "by_filter"
    ALL = "all"


class AccessRole(StrEnum):
    """What a credential may do (core/access.py holds the grants of each)."""

    AGENT = "agent"
    READER = "reader"
    ADMIN = "admin"


@dataclass(frozen=True)
class Principal:
    """Who is calling: attached by the transport from the credential. One tenant only."""

    tenant: str
    subject: str = "anonymous"
    role: AccessRole = AccessRole.ADMIN
    # The users it may act for; empty: every user of its tenant.
    users: frozenset[str] = frozenset()
    # Which credential proved it: "none" (auth off), "api_key", "jwt" or "mtls".
    credential: str = "none"
    # The key id (API key), `kid` (JWT) or certificate fingerprint, for the audit log.
    key_id: str = ""
    # The quota profile the credential names (rate limits); None: the user's own.
    profile: str | None = None

    @property
    def authenticated(self) -> bool:
        return self.credential != "none"


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


@dataclass(frozen=True)
class Relation:
    """(subject, predicate, object) between entities named by name. Times are epoch
    seconds; `invalid_at` is set once a newer contradicting relation closed this one."""

    subject: str
    predicate: str
    object: str
    valid_from: float | None = None
    invalid_at: float | None = None


@dataclass(frozen=True)
class Entity:
    name: str
    type: str = ""
    aliases: tuple[str, ...] = ()
    description: str = ""
    # Filled on Retrieve/Get only: the entity's current one-hop relations.
    relations: tuple[Relation, ...] = ()


@dataclass(frozen=True)
class FactVersion:
    """A value a persona fact held before it changed."""

    content: str
    source: Source
    replaced_at: float


@dataclass(frozen=True, slots=True)
class ScoreComponents:
    """Why a hit ranked where it did: the signals and steps of the ranking (docs/ranking.md).

    `dense` is the cosine to the query (clipped at 0) and `keyword` the memory's BM25 under
    the user's own IDF, `keyword_share` the IDF-weighted share of the query's terms it holds;
    `fused` their convex fusion over the candidate pool; the lifts are what was added for
    the speaker the query names, the time it names (or, for a when-question, the time the
    memory tells) and the memory's conversation (best
    neighbouring turn, question hand-off); `rank` is what the candidates were ordered by;
    `mmr_penalty` what the memory's likeness to an earlier pick took off it (0 when not
    diversified); `relevance` the absolute 0..1 score before the conversation lift and
    `final` the score returned."""

    dense: float
    keyword: float
    keyword_share: float
    fused: float
    speaker_lift: float
    time_lift: float
    conversation_lift: float
    rank: float
    mmr_penalty: float
    relevance: float
    final: float
    # What the query grounded in the task's state added to `dense` (ADR 0405).
    grounding_lift: float = 0.0
    # What the second hop by rare terms (ADR 0404) added to `rank`.
    link_lift: float = 0.0
    # What telling a time added to `rank` when the query asks when (ADR 0410).
    when_lift: float = 0.0
    # The cosine to the query without the speakers it names, which `fused` ranked by
    # instead of `dense` (ADR 0408); None when the query named none.
    unnamed_dense: float | None = None
    # The cosine of a turn's own text (embedded without its lead) to that query, blended
    # into what `fused` ranked by (ADR 0409); None for a memory that keeps no such vector.
    own_dense: float | None = None


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
    origin: Origin = Origin.UNSPECIFIED
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
    # Entity tier: an entity or a relation (`content` is its readable text).
    entity: Entity | None = None
    relation: Relation | None = None
    # Persona: earlier values of the fact, oldest first.
    history: tuple[FactVersion, ...] = ()
    # When it was said or happened; 0 means unknown (then `created_at` stands for it).
    occurred_at: float = 0.0
    # Place in its session (1, 2, ... in the order added); 0 when not in a session.
    position: int = 0
    # Retrieve with a context window: the neighbouring turns of a hit, in session order.
    context: list[MemoryRecord] = field(default_factory=list)
    # A hit of a ranked search: how its score came about (None for anything else). An
    # explanation, not part of the memory: records compare equal without it.
    components: ScoreComponents | None = field(default=None, compare=False)

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
    entity: Entity | None = None
    relation: Relation | None = None
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


class CommandAction(StrEnum):
    REMEMBER = "remember"
    FORGET = "forget"


@dataclass
class CommandOutcome:
    """What an explicit remember/forget command in a user message did."""

    action: CommandAction
    subject: str
    facts: list[MemoryRecord] = field(default_factory=list)
    operation: Operation | None = None


@dataclass
class AddResult:
    memory_id: str
    operation: Operation
    tier: Tier
    quota_remaining: int
    evicted_keys: list[str] = field(default_factory=list)
    command: CommandOutcome | None = None


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
    # The task's state the query matched ("key: content" of its working hits): the vector
    # tiers also score memories against the query grounded in it (ADR 0405). Set by the
    # engine, never by a caller.
    grounding: str = ""


@dataclass
class RetrieveResult:
    items: list[MemoryRecord]
    total_count: int
    embedding_ms: float = 0.0
    retrieval_ms: float = 0.0
    token_count: int = 0
    truncated: bool = False
    # Tiers left out (no tier was named and their store is down).
    skipped_tiers: list[Tier] = field(default_factory=list)


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
    # Filled by the engine's export_counts: with no tiers named, the tiers left out of the
    # export because their store is down.
    skipped_tiers: list[Tier] = field(default_factory=list)


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
    # Tiers left out because their store is down.
    skipped_tiers: list[Tier] = field(default_factory=list)


@dataclass
class ImportResult:
    imported_count: int = 0
    skipped_count: int = 0


@dataclass
class EndSessionCommand:
    scope: Scope
    # None: extract when an extractor is configured; False: never.
    extract: bool | None = None
    auto_prune: bool = False


@dataclass
class EndSessionResult:
    messages_processed: int = 0
    facts_extracted: int = 0
    facts: list[MemoryRecord] = field(default_factory=list)
    added_ids: list[str] = field(default_factory=list)
    updated_ids: list[str] = field(default_factory=list)
    skipped_count: int = 0
    extraction_skipped: bool = False
    extraction_skipped_reason: str = ""
    warnings: list[str] = field(default_factory=list)


@dataclass
class UsersQuery:
    """ListUsers: a page of the tenant's users (the principal's tenant)."""

    tenant: str
    prefix: str = ""
    page_size: int = 0
    page_token: str = ""
    # The users a bound credential may see; empty: every user of the tenant.
    only: frozenset[str] = frozenset()


@dataclass
class UserSummary:
    user_id: str
    usage: UsageReport
    last_active: float


@dataclass
class UsersPage:
    users: list[UserSummary]
    next_page_token: str = ""
    # Count and bytes per tier over every user the query may list (not just this page).
    totals: list[TierUsage] = field(default_factory=list)


@dataclass
class MemoriesQuery:
    """ListMemories: a page of a user's memories across the vector-store tiers."""

    scope: Scope
    tiers: list[Tier] = field(default_factory=list)
    kinds: list[Kind] = field(default_factory=list)
    filters: dict[str, str] = field(default_factory=dict)
    page_size: int = 0
    page_token: str = ""


@dataclass
class MemoriesPage:
    items: list[MemoryRecord]
    next_page_token: str = ""
    # First page only: the user's live tasks and sessions (scopes a listing may name).
    tasks: list[Scope] = field(default_factory=list)
    sessions: list[Scope] = field(default_factory=list)
