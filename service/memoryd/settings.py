"""The one settings object. Built in `main`, passed down; nothing reads the environment elsewhere.

Every field can be set by an environment variable with the `MEMORYD_` prefix; nested fields
use `__` (e.g. `MEMORYD_WORKING__MAX_ENTRIES=200`). An optional TOML file (`--config` or
`MEMORYD_CONFIG`) is read below the environment: the environment wins.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


class WorkingSettings(BaseModel):
    """Working memory: key/value scratch space of one task (agent + task)."""

    max_entries: int = Field(100, ge=1, description="Keys per task scope; the next key is refused")
    max_bytes: int = Field(10_240, ge=1, description="Bytes per task scope; LRU eviction past it")


class ShortTermSettings(BaseModel):
    """Short-term memory: the conversation window of one session."""

    ttl_seconds: int = Field(3600, ge=1, description="Session lifetime, refreshed on each write")
    max_messages: int = Field(100, ge=1, description="Only the newest messages are kept")
    max_bytes: int = Field(1_048_576, ge=1, description="Bytes per session; oldest dropped past it")


class LimitSettings(BaseModel):
    """Request limits: anything past them is refused with INVALID_ARGUMENT."""

    max_content_bytes: int = Field(65_536, ge=1, description="Bytes of one memory's content")
    max_key_bytes: int = Field(256, ge=1, description="Bytes of a working or persona key")
    max_id_bytes: int = Field(128, ge=1, description="user/agent/session/task ids")
    max_metadata_entries: int = Field(32, ge=0, description="Metadata entries per item")
    max_metadata_key_bytes: int = Field(64, ge=1, description="Bytes of a metadata key")
    max_metadata_value_bytes: int = Field(1024, ge=1, description="Bytes of a metadata value")
    max_top_k: int = Field(100, ge=1, description="Largest top_k a Retrieve may ask")
    default_top_k: int = Field(10, ge=1, description="top_k when a Retrieve gives none")
    max_batch_ids: int = Field(1000, ge=1, description="ids or keys in one Get/Delete")
    max_batch_items: int = Field(256, ge=1, description="Items in one AddBatch; more is refused")
    max_message_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="gRPC message size")
    max_import_items: int = Field(
        100_000, ge=1, description="Items in one Import stream; more is refused"
    )


class VectorSettings(BaseModel):
    """Where long-term, persona and the other vector tiers live."""

    backend: Literal["edge", "qdrant"] = Field(
        "edge", description="edge: in-process qdrant-edge under data_dir; qdrant: a server"
    )
    qdrant_url: str | None = Field(None, description="Qdrant server URL (backend=qdrant)")
    qdrant_api_key: str | None = Field(None, description="API key of the Qdrant server")
    qdrant_prefer_grpc: bool = Field(True, description="Talk to Qdrant over gRPC, not REST")
    qdrant_location: str | None = Field(
        None, description="qdrant-client local mode (':memory:' or a path), instead of a URL"
    )
    collection: str = Field("memories", description="The one collection of every vector tier")


class EmbedderSettings(BaseModel):
    provider: Literal["minilm-onnx", "minilm", "openai"] = Field(
        "minilm-onnx",
        description="minilm-onnx: local MiniLM on ONNX Runtime; minilm: the same model on "
        "torch (the same vector space); openai: an OpenAI-compatible API",
    )
    threads: int = Field(
        1, ge=1, description="Intra-op threads of the local model (ONNX Runtime or torch)"
    )
    onnx_quantized: bool = Field(
        True, description="minilm-onnx: int8 matrix products (false: float, slower)"
    )
    onnx_quantization: Literal["static", "dynamic"] = Field(
        "static",
        description="minilm-onnx int8: static (activation scales fixed by a shipped "
        "calibration corpus; texts batch) or dynamic (scaled per text; each runs alone)",
    )
    model_cache_dir: Path | None = Field(
        None,
        description="minilm-onnx: where the derived int8 graph is kept (default <data_dir>/models, "
        "after looking in the user's cache that `memoryd prepare-embedder` fills)",
    )
    batch_max_size: int = Field(
        64, ge=1, le=2048, description="Most texts of concurrent requests embedded in one call"
    )
    batch_max_wait_ms: float = Field(
        0.0,
        ge=0,
        le=1000,
        description="Under load, longest a batch waits for more requests (a lone caller "
        "on an idle server never waits); 0: batches form only while the model is busy",
    )
    batch_concurrency: int | None = Field(
        None,
        ge=1,
        description="Embedding calls in flight at once (default: 2 minilm-onnx, 1 minilm, "
        "4 openai)",
    )
    batch_parallel_backlog: int | None = Field(
        None,
        ge=1,
        description="Texts that must wait before a further call starts beside a running one "
        "(default: 16 minilm-onnx, 1 otherwise); fewer join the next batch",
    )
    openai_api_key: str | None = Field(None, description="API key of the embeddings API")
    openai_base_url: str | None = Field(None, description="Any OpenAI-compatible endpoint")
    openai_model: str = Field("text-embedding-3-small", description="Embedding model name")
    openai_dimensions: int | None = Field(
        None, ge=1, description="Ask the API for this many dimensions"
    )
    openai_timeout_seconds: float = Field(10.0, gt=0, description="Per embeddings call")
    cache_entries: int = Field(10_000, ge=0, description="In-process LRU of embeddings")
    cache_ttl_seconds: int = Field(7 * 24 * 3600, ge=1, description="Redis cache TTL")


class RetrievalSettings(BaseModel):
    mode: Literal["hybrid", "dense", "keyword"] = Field(
        "hybrid", description="Candidates from both dense and BM25, or one of them"
    )
    min_score: float = Field(0.3, ge=0, le=1, description="Default min_score of Retrieve")
    rrf_k: int = Field(60, ge=1, description="Reciprocal rank fusion constant k")
    dense_weight: float = Field(1.0, gt=0, description="RRF weight of the dense prefetch")
    sparse_weight: float = Field(1.0, gt=0, description="RRF weight of the BM25 prefetch")
    relative_cutoff: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Also drop hits scoring under this share of the best hit's score (0: off)",
    )
    keyword_weight: float = Field(
        0.8,
        ge=0,
        le=1,
        description="How far the IDF-weighted share of query keywords a memory holds lifts "
        "its score from its cosine similarity towards 1 (0: similarity alone)",
    )
    diversity: float = Field(
        0.3,
        ge=0,
        le=1,
        description="Maximal-marginal-relevance penalty per unit of similarity to a memory "
        "already returned (0: plain score order)",
    )
    candidates: int = Field(
        20,
        ge=1,
        le=1000,
        description="Ranking: candidates taken from each of the dense and BM25 searches "
        "(at least 4 x top_k); their union is what the ranking steps score",
    )
    fusion_keyword_weight: float = Field(
        0.6,
        ge=0,
        le=1,
        description="Ranking: weight of the min-max normalised BM25 score against the cosine "
        "score in their convex fusion over the candidate pool (ADR 0400)",
    )
    adjacency_weight: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Ranking: share of the best neighbouring turn's score (same session, "
        "position +-1) added to a turn's own (0: off)",
    )
    question_handoff: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Ranking: share of a question turn's score (text ending in '?') handed "
        "to the turn after it in its session, which holds the answer (0: off)",
    )
    speaker_lift: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Ranking: added to turns said by a speaker the query names (0: off)",
    )
    time_lift: float = Field(
        0.15,
        ge=0,
        le=1,
        description="Ranking: added to memories whose occurred_at lies in the time the query "
        "names ('last week', 'in May 2023', 'before she moved'); 0: off",
    )
    max_context_window: int = Field(
        5, ge=0, le=20, description="Largest context_window accepted by Retrieve/RenderContext"
    )
    default_token_budget: int = Field(1000, ge=1, description="cl100k tokens, when unasked")
    render_token_budget: int = Field(
        1500,
        ge=1,
        description="RenderContext's token_budget when unasked: with no top_k it renders as "
        "many relevant memories as fit",
    )
    max_token_budget: int = Field(16_000, ge=1, description="Largest token_budget accepted")


class LongTermSettings(BaseModel):
    compress_over_bytes: int = Field(1024, ge=1, description="zlib-compress larger content")
    lead_chars: int = Field(
        240,
        ge=0,
        description="A turn of a session is embedded after the last this many characters of "
        "the turn before it, with its speaker (ADR 0400); 0: each turn alone",
    )
    max_memories: int = Field(
        10_000, ge=1, description="Per user of the 'default' quota profile; RESOURCE_EXHAUSTED"
    )
    max_bytes: int = Field(
        100 * 1024 * 1024,
        ge=1,
        description="Content bytes per user of the 'default' quota profile; RESOURCE_EXHAUSTED",
    )


class EpisodicSettings(BaseModel):
    """Episodic memory: an agent's past tasks (task, steps, outcome), found by similarity."""

    ttl_days: int = Field(
        90, ge=1, description="Episodes expire this many days after they are added (at most)"
    )
    max_episodes_per_agent: int = Field(
        1000, ge=1, description="Live episodes per (user, agent); RESOURCE_EXHAUSTED past it"
    )
    max_steps: int = Field(50, ge=1, description="Steps of one episode")


class StructuredSettings(BaseModel):
    """Structured memory: a user's JSON documents, searched and filtered by field."""

    max_documents: int = Field(
        5000, ge=1, description="Live documents per user; RESOURCE_EXHAUSTED past it"
    )
    max_bytes: int = Field(
        50 * 1024 * 1024,
        ge=1,
        description="Document JSON bytes per user; an add past it is refused",
    )


class EntitySettings(BaseModel):
    """The entity tier: entities and (subject, predicate, object) relations. Its quotas
    come from the quota profile (entity_max_entities, entity_max_relations)."""

    multi_valued_predicates: list[str] = Field(
        default_factory=lambda: [
            "likes",
            "dislikes",
            "knows",
            "has",
            "owns",
            "uses",
            "speaks",
            "visited",
            "member_of",
            "friend_of",
            "related_to",
        ],
        description="Predicates a subject may hold towards several objects at once; any "
        "other predicate is single-valued: a newer relation to another object closes the old",
    )
    max_relations_per_entity: int = Field(
        20, ge=0, description="Current relations returned with each entity (newest first)"
    )


class ExtractionSettings(BaseModel):
    """The LLM that extracts facts, entities and relations when a session ends: any
    OpenAI-compatible chat completions endpoint with structured output (JSON schema).
    Configured when `base_url` or `api_key` is set; otherwise EndSession skips extraction."""

    base_url: str | None = Field(None, description="OpenAI-compatible endpoint, e.g. .../v1")
    api_key: SecretStr | None = Field(None, description="API key of the chat endpoint")
    model: str = Field("gpt-4o-mini", min_length=1, description="Chat model that extracts facts")
    timeout_seconds: float = Field(60.0, gt=0, description="Per request to the endpoint")
    max_retries: int = Field(
        2, ge=0, description="Retries of timeouts, 429 and 5xx answers (by the client)"
    )
    max_concurrency: int = Field(4, ge=1, description="Extractions running at once")
    temperature: float | None = Field(
        0.0, ge=0, le=2, description="Sampling temperature; unset for models that refuse one"
    )
    min_confidence: float = Field(0.5, ge=0, le=1, description="Facts under it are dropped")
    max_input_chars: int = Field(
        48_000, ge=1000, description="Transcript sent to the model; the newest messages win"
    )

    @property
    def configured(self) -> bool:
        return self.base_url is not None or self.api_key is not None


class SessionSettings(BaseModel):
    """Ending sessions and the explicit remember/forget commands of user messages."""

    keep_messages_on_end: bool = Field(
        False, description="EndSession leaves the session's messages in short-term memory"
    )
    forget_min_score: float = Field(
        0.6,
        ge=0,
        le=1,
        description="A forget command that names no fact key deletes the facts scoring at "
        "least this against it (persona search)",
    )


class QuotaProfile(BaseModel):
    """The limits of one plan. Unset fields take the RT-006 per-user figures (pro)."""

    long_term_max_memories: int = Field(10_000, ge=1, description="Long-term memories per user")
    long_term_max_bytes: int = Field(
        100 * 1024 * 1024, ge=1, description="Long-term content bytes per user"
    )
    entity_max_entities: int = Field(5_000, ge=1, description="Entities per user")
    entity_max_relations: int = Field(
        10_000, ge=1, description="Relations per user (RT-006 gives 10,000; no plan differs)"
    )
    # Rate limits per tenant + user (token buckets: this many per minute, as a burst too).
    queries_per_minute: int | None = Field(
        None, ge=1, description="Retrieve/RenderContext per minute; past it answers degrade"
    )
    writes_per_minute: int | None = Field(
        None, ge=1, description="Add/Delete/Prune/Import/EndSession per minute; RESOURCE_EXHAUSTED"
    )


_MB = 1024 * 1024

# RT-006 "Pricing Tiers"; query rates from memory-v1 "Rate Limiting" (10/minute per user).
RT006_PROFILES: dict[str, dict[str, int]] = {
    "free": {
        "long_term_max_memories": 100,
        "long_term_max_bytes": 10 * _MB,
        "entity_max_entities": 500,
        "queries_per_minute": 10,
        "writes_per_minute": 60,
    },
    "pro": {
        "long_term_max_memories": 10_000,
        "long_term_max_bytes": 100 * _MB,
        "entity_max_entities": 5_000,
        "queries_per_minute": 600,
        "writes_per_minute": 1_200,
    },
    "enterprise": {
        "long_term_max_memories": 100_000,
        "long_term_max_bytes": 1_000 * _MB,
        "entity_max_entities": 50_000,
        "queries_per_minute": 6_000,
        "writes_per_minute": 12_000,
    },
}

# The profile built from the `long_term` block (and so `MEMORYD_LONG_TERM__MAX_MEMORIES`),
# unless `profiles` defines one of this name.
DEFAULT_PROFILE = "default"


class TierQuota(BaseModel):
    """Per-user limits of one tier for users on the default profile."""

    max_memories: int | None = Field(
        None, ge=1, description="Overrides the default profile's long-term count limit"
    )
    max_bytes: int | None = Field(
        None, ge=1, description="Overrides the default profile's long-term byte limit"
    )


class QuotaSettings(BaseModel):
    """RT-006 quota profiles and who is on which.

    A user's profile: their entry in `user_profiles` ("tenant/user"), else their tenant's
    in `tenant_profiles`, else `default_profile`. Profiles given here are merged over the
    built-in free/pro/enterprise figures, so one field of one profile can be changed alone.
    """

    profiles: dict[str, QuotaProfile] = Field(
        default_factory=lambda: {n: QuotaProfile(**f) for n, f in RT006_PROFILES.items()},
        description="Named profiles; free/pro/enterprise are built in",
    )
    default_profile: str = Field(DEFAULT_PROFILE, description="Profile of users with no assignment")
    long_term: TierQuota = Field(
        default_factory=TierQuota,
        description="Default-profile long-term limits (MEMORYD_QUOTAS__LONG_TERM__MAX_MEMORIES)",
    )
    tenant_profiles: dict[str, str] = Field(
        default_factory=dict, description='Tenant -> profile, e.g. {"acme": "enterprise"}'
    )
    user_profiles: dict[str, str] = Field(
        default_factory=dict, description='"tenant/user" -> profile; wins over the tenant\'s'
    )
    rate_cache_entries: int = Field(
        1000,
        ge=0,
        description="Recent query answers kept (per process) to answer again past a query "
        "rate limit; 0: past it, answers are empty",
    )
    rate_cache_seconds: float = Field(
        60.0, gt=0, description="How long such an answer may be served again"
    )

    @model_validator(mode="before")
    @classmethod
    def _merge_builtin_profiles(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "profiles" not in data:
            return data
        given = data["profiles"]
        if not isinstance(given, dict):
            return data
        merged: dict[str, Any] = {n: dict(f) for n, f in RT006_PROFILES.items()}
        for name, fields in given.items():
            if isinstance(fields, QuotaProfile):
                fields = fields.model_dump(exclude_unset=True)
            if isinstance(fields, dict):
                merged[name] = {**merged.get(name, {}), **fields}
            else:
                merged[name] = fields
        return {**data, "profiles": merged}

    @model_validator(mode="after")
    def _assigned_profiles_exist(self) -> QuotaSettings:
        known = set(self.profiles) | {DEFAULT_PROFILE}
        assigned = [
            ("default_profile", self.default_profile),
            *((f"tenant_profiles[{k}]", v) for k, v in self.tenant_profiles.items()),
            *((f"user_profiles[{k}]", v) for k, v in self.user_profiles.items()),
        ]
        for where, name in assigned:
            if name not in known:
                raise ValueError(f"{where}: unknown quota profile {name!r}")
        for key in self.user_profiles:
            if key.count("/") != 1 or not all(key.split("/")):
                raise ValueError(f"user_profiles: key {key!r} must be 'tenant/user'")
        return self


class RetentionSettings(BaseModel):
    """RT-005 retention: when a tier's memories move to the cold archive, and how often the
    server's maintenance runs (short-term TTL is enforced by the hot store itself)."""

    long_term_archive_after_days: int = Field(
        365, ge=1, description="Long-term memories older than this are archived"
    )
    structured_archive_after_days: int = Field(
        180, ge=1, description="Structured documents older than this are archived"
    )
    episodic_archive_after_days: int = Field(
        90, ge=1, description="Episodes older than this are archived"
    )
    maintenance_interval_seconds: float = Field(
        3600.0, ge=0, description="Seconds between maintenance runs in the server; 0 disables"
    )
    maintenance_lease_seconds: float = Field(
        30.0,
        gt=0,
        description="With Redis, one replica runs maintenance under a lease this long, renewed",
    )


class UsageSettings(BaseModel):
    """Usage report: alert thresholds and storage prices.

    Prices come from RT-006 "Cost Tracking": vector store $0.40/GB/month, Redis
    $0.15/GB/month (the seed's comments give the unit as GB; its sample code multiplies
    MB by the same figures, which we take to be a slip).
    """

    quota_profile: str = Field(
        "default", description="Name reported by Usage when no tier resolves a quota profile"
    )
    warning_percent: float = Field(80.0, gt=0, le=100, description="Usage alert level warning")
    critical_percent: float = Field(95.0, gt=0, le=100, description="Usage alert level critical")
    vector_usd_per_gb_month: float = Field(
        0.40, ge=0, description="Long-term and persona content (RT-006: $0.40/GB/month)"
    )
    hot_usd_per_gb_month: float = Field(
        0.15, ge=0, description="Working and short-term content (RT-006: $0.15/GB/month)"
    )


class WriteBehindSettings(BaseModel):
    """The durable copy of conversation messages into long-term memory."""

    batch_size: int = Field(64, ge=1, description="Messages copied to long-term per batch")
    retry_seconds: float = Field(1.0, gt=0, description="Wait before retrying a failed copy")
    stuck_after_seconds: float = Field(
        60.0,
        gt=0,
        description="Health turns NOT_SERVING when copying has failed for this long",
    )
    claim_after_seconds: float = Field(
        60.0,
        gt=0,
        description="With Redis, messages another replica took and left unacked this long "
        "(it died) are claimed and copied here",
    )


class BackupSettings(BaseModel):
    """`memoryd backup`: one export file per user and day under `<data_dir>/backups`."""

    retention_days: int = Field(30, ge=1, description="Backup days older than this are deleted")


class MetricsSettings(BaseModel):
    """Prometheus metrics, served on their own HTTP listener (docs/reference/metrics.md)."""

    listen: str = Field(
        "127.0.0.1:9464", description="host:port serving /metrics; empty turns metrics off"
    )


class TracingSettings(BaseModel):
    """OpenTelemetry traces (the `otel` extra). The exporter reads the standard
    OTEL_EXPORTER_OTLP_* variables."""

    enabled: bool = Field(False, description="Trace calls, embedding, store calls and fusion")
    exporter: Literal["otlp", "console"] = Field("otlp", description="Where spans go")
    service_name: str = Field("memoryd", description="The service.name resource attribute")


class JwtSettings(BaseModel):
    """Bearer JWTs (PyJWT). Configure one key source: an HS256 secret, a PEM public key
    (RS*/PS*/ES*/EdDSA) or a JWKS file (keys chosen by the token's `kid`)."""

    hs256_secret: SecretStr | None = Field(None, description="Shared secret (HS256)")
    public_key_file: Path | None = Field(None, description="PEM public key")
    jwks_file: Path | None = Field(None, description="JSON Web Key Set file; re-read on change")
    algorithms: list[str] = Field(
        default_factory=list, description="Accepted algorithms; empty: those of the key"
    )
    issuer: str | None = Field(None, description="Required `iss`, when set")
    audience: str | None = Field(None, description="Required `aud`, when set")
    tenant_claim: str = Field("tenant", description="Claim naming the tenant")
    role_claim: str = Field("role", description="Claim naming the role (agent, reader, admin)")
    user_claim: str = Field(
        "sub", description="The user (or list of users) an agent/reader token is bound to"
    )
    profile_claim: str = Field("", description="Claim naming the quota profile; empty: none")
    leeway_seconds: float = Field(0.0, ge=0, description="Clock skew allowed on exp/nbf/iat")

    @property
    def enabled(self) -> bool:
        return bool(self.hs256_secret or self.public_key_file or self.jwks_file)


class AuthSettings(BaseModel):
    """Who may call: API keys (a keys file), JWTs, or mTLS client certificates (see `tls`).
    With none configured every caller is tenant "default" and the server stays on loopback."""

    keys_file: Path | None = Field(
        None, description="API keys file (`memoryd keys create`); changes apply at once"
    )
    jwt: JwtSettings = JwtSettings()
    allow_unauthenticated: bool = Field(
        False, description="Serve a non-loopback MEMORYD_LISTEN with no credential configured"
    )
    default_tenant: str = Field(
        "default", description="The tenant of every caller when auth is off"
    )


class TlsSettings(BaseModel):
    """TLS for the gRPC port; with a client CA, mutual TLS: every connection needs a client
    certificate of that CA (gRPC Python cannot make it optional), and the certificate is a
    credential, its subject naming tenant, role and user (attribute names below)."""

    cert_file: Path | None = Field(None, description="Server certificate chain (PEM)")
    key_file: Path | None = Field(None, description="Server private key (PEM)")
    client_ca_file: Path | None = Field(None, description="CA(s) of client certificates (PEM)")
    tenant_attribute: str = Field("O", description="Subject attribute holding the tenant")
    role_attribute: str = Field("OU", description="Subject attribute holding the role")
    user_attribute: str = Field(
        "CN", description="Subject attribute holding the user of agent/reader certificates"
    )

    @model_validator(mode="after")
    def _pairs(self) -> TlsSettings:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("tls: cert_file and key_file go together")
        if self.client_ca_file and not self.cert_file:
            raise ValueError("tls: client_ca_file needs cert_file and key_file")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MEMORYD_",
        env_nested_delimiter="__",
        extra="ignore",
    )

    listen: str = Field("127.0.0.1:50051", description="host:port of the gRPC server")
    data_dir: Path = Field(Path(".memoryd-data"), description="Where embedded stores keep data")
    redis_url: str | None = Field(None, description="Hot tiers in Redis; unset: in-process")
    redis_cluster: bool = Field(
        False, description="redis_url names a node of a Redis Cluster: use the cluster client"
    )
    reflection: bool = Field(False, description="Serve gRPC server reflection")
    grace_period_seconds: float = Field(5.0, ge=0, description="Graceful stop on SIGTERM")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Lowest level logged"
    )
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="auto: JSON lines unless the log stream is a terminal"
    )
    metrics: MetricsSettings = MetricsSettings()
    tracing: TracingSettings = TracingSettings()

    working: WorkingSettings = WorkingSettings()
    short_term: ShortTermSettings = ShortTermSettings()
    limits: LimitSettings = LimitSettings()
    vectors: VectorSettings = VectorSettings()
    embedder: EmbedderSettings = EmbedderSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    long_term: LongTermSettings = LongTermSettings()
    episodic: EpisodicSettings = EpisodicSettings()
    structured: StructuredSettings = StructuredSettings()
    entity: EntitySettings = EntitySettings()
    extraction: ExtractionSettings = ExtractionSettings()
    sessions: SessionSettings = SessionSettings()
    write_behind: WriteBehindSettings = WriteBehindSettings()
    usage: UsageSettings = UsageSettings()
    retention: RetentionSettings = RetentionSettings()
    quotas: QuotaSettings = QuotaSettings()
    backup: BackupSettings = BackupSettings()
    auth: AuthSettings = AuthSettings()
    tls: TlsSettings = TlsSettings()
    instance_id: str = Field(
        "", description="Names this replica's Redis stream consumer; empty: the host name"
    )
    api_key: SecretStr | None = Field(
        None, description="The client commands' API key (MEMORYD_API_KEY); the server ignores it"
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The TOML source reads model_config["toml_file"], which only load_settings sets.
        return (
            init_settings,
            env_settings,
            TomlConfigSettingsSource(settings_cls),
            file_secret_settings,
        )


def load_settings(config_file: Path | None = None, **overrides: object) -> Settings:
    """Settings from the environment, over an optional TOML file, under explicit overrides."""
    path = config_file or (Path(p) if (p := os.environ.get("MEMORYD_CONFIG")) else None)
    if path is None:
        return Settings(**overrides)  # type: ignore[arg-type]
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")

    class _FileSettings(Settings):
        model_config = SettingsConfigDict(toml_file=path)

    return _FileSettings(**overrides)  # type: ignore[arg-type]
