"""The one settings object. Built in `main`, passed down; nothing reads the environment elsewhere.

Every field can be set by an environment variable with the `MEMORYD_` prefix; nested fields
use `__` (e.g. `MEMORYD_WORKING__MAX_ENTRIES=200`). An optional TOML file (`--config` or
`MEMORYD_CONFIG`) is read below the environment: the environment wins.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)


class _Block(BaseModel):
    """A block of settings: a key it does not know is refused, so that a misspelt one
    (`[working] max_entrie = 5`) stops the start-up instead of running on the default."""

    model_config = ConfigDict(extra="forbid")


def check_host_port(value: str) -> str:
    """`host:port` or `[v6]:port`, the port 1..65535 (0: any free port, as tests use)."""
    host, sep, port = value.rpartition(":")
    if not sep or not host.strip("[]") or not port.lstrip("-").isdigit():
        raise ValueError("must be host:port (e.g. 127.0.0.1:50051)")
    if not 0 <= int(port) <= 65_535:
        raise ValueError(f"port {port} is out of range (1..65535; 0: any free port)")
    return value


class WorkingSettings(_Block):
    """Working memory: key/value scratch space of one task (agent + task). Its limits are
    per task, not per user: not a plan's (the quota profile's) to change."""

    max_entries: int = Field(100, ge=1, description="Keys per task scope; the next key is refused")
    max_bytes: int = Field(10_240, ge=1, description="Bytes per task scope; LRU eviction past it")


class ShortTermSettings(_Block):
    """Short-term memory: the conversation window of one session. Its limits are per
    session, not per user: not a plan's (the quota profile's) to change."""

    ttl_seconds: int = Field(3600, ge=1, description="Session lifetime, refreshed on each write")
    max_messages: int = Field(100, ge=1, description="Only the newest messages are kept")
    max_bytes: int = Field(1_048_576, ge=1, description="Bytes per session; oldest dropped past it")


class LimitSettings(_Block):
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


class VectorSettings(_Block):
    """Where long-term, persona and the other vector tiers live."""

    backend: Literal["edge", "qdrant"] = Field(
        "edge", description="edge: in-process qdrant-edge under data_dir; qdrant: a server"
    )
    collection: str = Field("memories", description="The one collection of every vector tier")
    term_space: Literal["shared", "user"] = Field(
        "user",
        description="A new store's keyword term ids (ADR 0601): each user's own (a user's "
        "keyword search and counts read only that user's memories; the keyword weights come "
        "from the statistics of every user of the tenant, kept in memory) or shared by every "
        "user of every tenant (stores created before ADR 0601). An existing store keeps its "
        "own; `memoryd reindex` rewrites it into this one",
    )


class QdrantSettings(_Block):
    """The Qdrant server or cluster (vectors.backend = "qdrant"; docs/scaling.md): where it
    is, and how memoryd creates its collection there. The collection settings apply when
    memoryd creates it; an existing collection is adopted as it is, except that its
    sharding method must match."""

    url: str | None = Field(None, description="Qdrant server URL (vectors.backend=qdrant)")
    api_key: str | None = Field(None, description="API key of the Qdrant server")
    prefer_grpc: bool = Field(True, description="Talk to Qdrant over gRPC, not REST")
    location: str | None = Field(
        None, description="qdrant-client local mode (':memory:' or a path), instead of a URL"
    )

    sharding: Literal["auto", "tenant"] = Field(
        "auto",
        description="auto: points spread over shard_number shards by id; tenant: custom "
        "sharding, one shard key per tenant (created on first use), every call that names a "
        "tenant carries its shard key",
    )
    shard_number: int | None = Field(
        None,
        ge=1,
        description="auto: shards of the collection (unset: one per node); tenant: shards per "
        "tenant's shard key (unset: 1)",
    )
    replication_factor: int = Field(
        1, ge=1, description="Copies of every shard (2: survive a node)"
    )
    write_consistency_factor: int = Field(
        1, ge=1, description="Replicas that must apply a write before it is acknowledged"
    )
    hnsw_m: int = Field(0, ge=0, description="HNSW m of the whole collection (0: no global graph)")
    hnsw_payload_m: int = Field(
        16, ge=1, description="HNSW m of the per-tenant and per-user graphs (is_tenant fields)"
    )
    payload_on_disk: bool = Field(True, description="Payloads on disk, read when a hit is returned")
    vectors_on_disk: bool = Field(
        False, description="Original dense vectors on disk (memory-mapped), not in RAM"
    )
    quantization: Literal["none", "int8"] = Field(
        "none", description="int8: scalar-quantized dense vectors kept in RAM (4x smaller)"
    )
    quantization_quantile: float = Field(
        0.99, ge=0.5, le=1.0, description="Quantile of values the int8 range covers"
    )
    rescore: bool = Field(
        True, description="With int8: re-rank the quantized candidates by the original vectors"
    )
    oversampling: float = Field(
        2.0, ge=1.0, description="With int8: candidates fetched per wanted hit before rescoring"
    )

    @model_validator(mode="after")
    def _consistency(self) -> QdrantSettings:
        if self.write_consistency_factor > self.replication_factor:
            raise ValueError(
                f"write_consistency_factor ({self.write_consistency_factor}) cannot exceed "
                f"replication_factor ({self.replication_factor})"
            )
        return self


class EmbedderSettings(_Block):
    provider: Literal["minilm-onnx", "minilm", "mpnet-onnx", "mpnet", "openai"] = Field(
        "minilm-onnx",
        description="minilm-onnx: local MiniLM on ONNX Runtime; minilm: the same model on "
        "torch (the same vector space); mpnet-onnx: local all-mpnet-base-v2 on ONNX Runtime "
        "(better recall, ~9x the CPU per query, a space of its own, ranking defaults of its "
        "own: ADR 0302); "
        "mpnet: the same model on torch (the same vectors, slower); openai: an "
        "OpenAI-compatible API",
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
        "after looking in the user's cache that `memoryd prepare-embedder` fills); mpnet, "
        "mpnet-onnx: where its weights are assembled and its graph exported (default the "
        "user's cache)",
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
    batch_concurrency: int = Field(
        1,
        ge=1,
        description="Embedding calls in flight at once",
    )
    batch_parallel_backlog: int = Field(
        1,
        ge=1,
        description="Texts that must wait before a further call starts beside a running one; "
        "fewer join the next batch",
    )
    background_nice: int = Field(
        19,
        ge=0,
        le=19,
        description="Niceness of the thread embedding background work (conversation "
        "copies), which has its own batches: requests take the cores first; 0: as requests",
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


class RetrievalSettings(_Block):
    mode: Literal["hybrid", "dense", "keyword"] = Field(
        "hybrid", description="Candidates from both dense and BM25, or one of them"
    )
    min_score: float = Field(
        0.3,
        ge=0,
        le=1,
        description="Default min_score of Retrieve",
    )
    filtered_min_score: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Default min_score of a Retrieve that selects by metadata `filters`: the "
        "filter is the caller's criterion, the query orders what it selects (ADR 0405)",
    )
    task_grounding: bool = Field(
        True,
        description="A Retrieve asking working memory and other tiers also scores their "
        "memories against the query grounded in the working entries it matched (ADR 0405)",
    )
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
        0.5,
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
        0.2,
        ge=0,
        le=1,
        description="Ranking: added to turns said by a speaker the query names (0: off)",
    )
    own_weight: float = Field(
        0.3,
        ge=0,
        le=1,
        description="Ranking: share of a turn's own-text cosine in the cosine it ranks by, "
        "beside its lead's (ADR 0409); a turn embedded after a lead is then also embedded "
        "alone when added (0: neither)",
    )
    dense_without_names: bool = Field(
        True,
        description="Ranking: when the query names a speaker, the dense side ranks by the "
        "query embedded without the name (the speaker lift counts it once; costs one more "
        "query embedding; ADR 0408); false: by the whole query",
    )
    time_lift: float = Field(
        0.15,
        ge=0,
        le=1,
        description="Ranking: added to memories whose occurred_at lies in the time the query "
        "names ('last week', 'in May 2023', 'before she moved'); 0: off",
    )
    when_lift: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Ranking: added to memories that tell a time ('yesterday', 'last Sunday', "
        "'on the 25th') when the query asks when something happened (ADR 0410); 0: off",
    )
    link_weight: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Ranking: lift of a candidate sharing a rare term with one of the first "
        "hits, never above them (ADR 0404: measured at 0.2, not adopted; 0: off)",
    )
    link_hits: int = Field(
        5, ge=1, le=50, description="Ranking: the first hits whose rare terms link others"
    )
    link_max_count: int = Field(
        3,
        ge=1,
        description="Ranking: a term links memories when at most this many of the user's "
        "memories hold it",
    )
    link_search: int = Field(
        10,
        ge=0,
        le=1000,
        description="Ranking: memories holding the first hits' rare terms read from the "
        "store besides the candidates (0: link only among the candidates)",
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


class LongTermSettings(_Block):
    compress_over_bytes: int = Field(1024, ge=1, description="zlib-compress larger content")
    lead_chars: int = Field(
        240,
        ge=0,
        description="A turn of a session is embedded after the last this many characters of "
        "the turn before it, with its speaker (ADR 0400); 0: each turn alone",
    )
    max_memories: int = Field(
        10_000, ge=1, description="Per user, where the quota profile sets none; RESOURCE_EXHAUSTED"
    )
    max_bytes: int = Field(
        100 * 1024 * 1024,
        ge=1,
        description="Content bytes per user, where the quota profile sets none",
    )


class EpisodicSettings(_Block):
    """Episodic memory: an agent's past tasks (task, steps, outcome), found by similarity."""

    ttl_days: int = Field(
        90, ge=1, description="Episodes expire this many days after they are added (at most)"
    )
    max_episodes_per_agent: int = Field(
        1000, ge=1, description="Live episodes per (user, agent), where the quota profile sets none"
    )
    max_steps: int = Field(50, ge=1, description="Steps of one episode")


class StructuredSettings(_Block):
    """Structured memory: a user's JSON documents, searched and filtered by field."""

    max_documents: int = Field(
        5000, ge=1, description="Live documents per user, where the quota profile sets none"
    )
    max_bytes: int = Field(
        50 * 1024 * 1024,
        ge=1,
        description="Document JSON bytes per user, where the quota profile sets none",
    )


class EntitySettings(_Block):
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


class ExtractionSettings(_Block):
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


class SessionSettings(_Block):
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


class QuotaProfile(_Block):
    """The limits of one plan: every per-user limit lives here. A field left unset takes
    the default of its tier's block (`long_term.max_memories`, `structured.max_documents`,
    ...): the tier blocks hold only the defaults a profile starts from."""

    long_term_max_memories: int | None = Field(
        None, ge=1, description="Long-term memories per user; unset: long_term.max_memories"
    )
    long_term_max_bytes: int | None = Field(
        None, ge=1, description="Long-term content bytes per user; unset: long_term.max_bytes"
    )
    episodic_max_episodes_per_agent: int | None = Field(
        None,
        ge=1,
        description="Live episodes per (user, agent); unset: episodic.max_episodes_per_agent",
    )
    structured_max_documents: int | None = Field(
        None, ge=1, description="Structured documents per user; unset: structured.max_documents"
    )
    structured_max_bytes: int | None = Field(
        None, ge=1, description="Document JSON bytes per user; unset: structured.max_bytes"
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

# The profile of users with no assignment: every limit its tier block's default (so
# `MEMORYD_LONG_TERM__MAX_MEMORIES` sets it), unless `profiles` defines one of this name.
DEFAULT_PROFILE = "default"


class QuotaSettings(_Block):
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
                raise ValueError(
                    f"{where}: unknown quota profile {name!r} (known: {', '.join(sorted(known))})"
                )
        for key in self.user_profiles:
            if key.count("/") != 1 or not all(key.split("/")):
                raise ValueError(f"user_profiles: key {key!r} must be 'tenant/user'")
        return self


class RetentionSettings(_Block):
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
    survey_share: float = Field(
        0.2,
        gt=0,
        le=1,
        description="The storage survey (every stored memory, read page by page) pauses after "
        "each page so that its work is at most this share of its time (1: no pause); requests "
        "keep the rest of the process",
    )


class UsageSettings(_Block):
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


class WriteBehindSettings(_Block):
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


class BackupSettings(_Block):
    """`memoryd backup`: one export file per user and day under `<data_dir>/backups`."""

    retention_days: int = Field(30, ge=1, description="Backup days older than this are deleted")


class MetricsSettings(_Block):
    """Prometheus metrics, served on their own HTTP listener (docs/reference/metrics.md)."""

    listen: str = Field(
        "127.0.0.1:9464", description="host:port serving /metrics; empty turns metrics off"
    )

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        return check_host_port(value) if value else value


class TracingSettings(_Block):
    """OpenTelemetry traces (the `otel` extra). The exporter reads the standard
    OTEL_EXPORTER_OTLP_* variables."""

    enabled: bool = Field(False, description="Trace calls, embedding, store calls and fusion")
    exporter: Literal["otlp", "console"] = Field("otlp", description="Where spans go")
    service_name: str = Field("memoryd", description="The service.name resource attribute")


class JwtSettings(_Block):
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


class AuthSettings(_Block):
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


class TlsSettings(_Block):
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


# Defaults that differ with the embedder provider, by settings block and field: the one home
# of such values (the settings reference prints this table). Where the operator set a value
# (environment, file or code), it is kept, even the generic default.
# - Batching (ADR 0301): a remote API hides its round trips best with a few calls in flight,
#   started at once. A local ONNX model takes a core per call: a second call starts only for
#   a backlog (Adds outrunning one core), not for each query of a trickle, whose batch of
#   one would take a core from the event loop. The torch models run one call at a time.
# - Ranking (ADR 0302): mpnet's cosines of unrelated texts run higher (the relevance floor),
#   its dense side deserves more of the fusion, and a turn's own vector more of the cosine
#   (ADR 0409); chosen on the tune halves and the golden set, kept because they helped both
#   report halves.
_LOCAL_ONNX: dict[str, float] = {"batch_concurrency": 2, "batch_parallel_backlog": 16}
_MPNET_RANKING: dict[str, float] = {
    "min_score": 0.32,
    "fusion_keyword_weight": 0.3,
    "own_weight": 0.5,
}
EMBEDDER_DEFAULTS: dict[str, dict[str, dict[str, float]]] = {
    "minilm-onnx": {"embedder": _LOCAL_ONNX},
    "mpnet-onnx": {"embedder": _LOCAL_ONNX, "retrieval": _MPNET_RANKING},
    "mpnet": {"retrieval": _MPNET_RANKING},
    "openai": {"embedder": {"batch_concurrency": 4}},
}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MEMORYD_",
        env_nested_delimiter="__",
        extra="forbid",
    )

    listen: str = Field("127.0.0.1:50051", description="host:port of the gRPC server")
    data_dir: Path = Field(Path(".memoryd-data"), description="Where embedded stores keep data")
    redis_url: str | None = Field(None, description="Hot tiers in Redis; unset: in-process")
    redis_cluster: bool = Field(
        False, description="redis_url names a node of a Redis Cluster: use the cluster client"
    )
    redis_timeout_seconds: float = Field(
        2.0,
        gt=0,
        description="Longest wait for one Redis command or connect; a request's Redis calls "
        "also end before its deadline",
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
    qdrant: QdrantSettings = QdrantSettings()
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

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        if value.startswith(("unix:", "unix-abstract:")):  # a socket file: no port
            return value
        return check_host_port(value)

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return value

    @model_validator(mode="after")
    def _defaults_follow_the_embedder(self) -> Settings:
        # EMBEDDER_DEFAULTS where the operator set no value: an explicit one, even the
        # generic default, is kept.
        for name, values in EMBEDDER_DEFAULTS.get(self.embedder.provider, {}).items():
            block: BaseModel = getattr(self, name)
            unset = {k: v for k, v in values.items() if k not in block.model_fields_set}
            if unset:
                setattr(self, name, block.model_copy(update=unset))
        return self

    @classmethod
    def explicit(cls, **values: Any) -> Settings:
        """These values over the defaults, and nothing else: no MEMORYD_* variable and no
        file is read (what tests build, whatever environment they run in)."""
        return _ExplicitSettings(**values)

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


class _ExplicitSettings(Settings):
    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


class InvalidSettings(ValueError):
    """The settings cannot be used; the message is one line naming the setting."""


PREFIX = "MEMORYD_"
# MEMORYD_* variables that are not settings: the config file's, the clients' (read by
# `memoryd mcp`, the client libraries and examples) and the test suite's and tools'.
# Any other MEMORYD_* name that is no setting refuses the start when it names a setting
# block (`MEMORYD_WORKNG__MAX_ENTRIES`) or lies close to a setting's name
# (`MEMORYD_LISEN`, `MEMORYD_LOGLEVEL`); names far from every setting are left alone.
NOT_SETTINGS = frozenset(
    {
        "CONFIG",
        "TARGET",
        "USER_ID",
        "AGENT_ID",
        "PYTHON",
        "FUZZ_SEED",
        "FUZZ_EXAMPLES",
        "CRASH_ROUNDS",
    }
)
_CLOSE = 0.8  # difflib ratio at which an unknown name is taken for a misspelt setting


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    return [
        t
        for t in (annotation, *get_args(annotation))
        if isinstance(t, type) and issubclass(t, BaseModel)
    ]


def _dict_value(annotation: Any) -> Any | None:
    """The value type of a dict-valued field (None: not a dict)."""
    for t in (annotation, *get_args(annotation)):
        if get_origin(t) is dict:
            return get_args(t)[1]
    return None


def setting_paths(model: type[BaseModel] = Settings, prefix: tuple[str, ...] = ()) -> set[str]:
    """Every settings path, blocks included, `.`-separated; `*` stands for a dict's key."""
    paths: set[str] = set()
    for name, info in model.model_fields.items():
        path = (*prefix, name)
        paths.add(".".join(path))
        for sub in _models_in(info.annotation):
            paths |= setting_paths(sub, path)
        value = _dict_value(info.annotation)
        if value is not None:
            paths.add(".".join((*path, "*")))
            for sub in _models_in(value):
                paths |= setting_paths(sub, (*path, "*"))
    return paths


def env_name(path: str) -> str:
    return PREFIX + path.replace(".", "__").upper()


def _is_complex(path: tuple[str, ...]) -> bool:
    """Whether the environment gives this setting as JSON (a block, a list or a dict)."""
    model: type[BaseModel] | None = Settings
    annotation: Any = None
    for part in path:
        if model is None or part not in model.model_fields:
            return False
        annotation = model.model_fields[part].annotation
        models = _models_in(annotation)
        model = models[0] if models else None
    if _models_in(annotation) or _dict_value(annotation) is not None:
        return True
    return any(get_origin(t) in (list, dict) for t in (annotation, *get_args(annotation)))


def check_environment(environ: Mapping[str, str]) -> None:
    """Refuse MEMORYD_* variables that look like settings but are none, and settings given
    as JSON that is not JSON, naming the variable (and the nearest setting)."""
    paths = setting_paths()
    names = {env_name(p): p for p in paths if "*" not in p}
    under_dicts = [env_name(p)[: -len("*")] for p in paths if p.endswith("*")]
    for raw, value in sorted(environ.items()):
        name = raw.upper()
        if not name.startswith(PREFIX) or name.removeprefix(PREFIX) in NOT_SETTINGS:
            continue
        if name in names:
            path = tuple(names[name].split("."))
            if _is_complex(path) and value.strip():
                try:
                    json.loads(value)
                except ValueError:
                    raise InvalidSettings(
                        f"{raw} must be JSON (as every block, list and map setting given by "
                        f"the environment), not {_shown(name, value)}"
                    ) from None
            continue
        if any(name.startswith(d) for d in under_dicts):
            continue
        near = difflib.get_close_matches(name, names, n=1, cutoff=_CLOSE)
        if "__" in name.removeprefix(PREFIX) or near:
            hint = f"; did you mean {near[0]}?" if near else ""
            raise InvalidSettings(f"{raw} is not a setting of memoryd{hint}")


def _shown(where: str, value: object) -> str:
    """A value for an error message: never one of a secret, never long."""
    if any(w in where.lower() for w in ("key", "secret", "token", "password")):
        return "(value withheld)"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fields_at(loc: tuple[str | int, ...]) -> list[str]:
    """The names valid beside the last part of a validation error's location."""
    model: type[BaseModel] | None = Settings
    below_dict: Any = None
    for part in loc[:-1]:
        if below_dict is not None:
            models = _models_in(below_dict)
            model, below_dict = (models[0] if models else None), None
            continue
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return []
        annotation = model.model_fields[part].annotation
        below_dict = _dict_value(annotation)
        models = _models_in(annotation)
        model = models[0] if models else None
    return list(model.model_fields) if model is not None and below_dict is None else []


def describe(exc: ValidationError, config_file: Path | None = None) -> str:
    """A ValidationError of the settings as one line naming each setting (path and
    variable) and, for an unknown key, the nearest valid one."""
    parts: list[str] = []
    for error in exc.errors():
        loc = tuple(p for p in error["loc"] if p)
        path = ".".join(str(p) for p in loc)
        if error["type"] == "extra_forbidden":
            near = difflib.get_close_matches(str(loc[-1]), _fields_at(loc), n=1, cutoff=0.6)
            where = f" in {config_file}" if config_file else ""
            hint = f"; did you mean {'.'.join((*map(str, loc[:-1]), near[0]))}?" if near else ""
            parts.append(f"{path}{where} is not a setting of memoryd{hint}")
            continue
        message = str(error["msg"]).removeprefix("Value error, ")
        # A block's own check names its field first ("default_profile: unknown ..."):
        # name that setting in full.
        field = re.match(r"(\w+)(\[[^\]]*\])?: ", message)
        if field and field[1] in _fields_at((*loc, "")):
            path, message = f"{path}.{field[1]}" if path else field[1], message[field.end() :]
            variable = env_name(path) + (f"__{field[2][1:-1].upper()}" if field[2] else "")
        else:
            variable = env_name(path)
        shown = "" if isinstance(error["input"], dict) else f", not {_shown(path, error['input'])}"
        parts.append(f"setting {path} ({variable}): {message}{shown}")
    return "; ".join(parts)


def load_settings(config_file: Path | None = None, **overrides: object) -> Settings:
    """Settings from the environment, over an optional TOML file, under explicit overrides.
    Raises InvalidSettings (one line naming the setting) for anything that cannot be used."""
    path = config_file or (Path(p) if (p := os.environ.get("MEMORYD_CONFIG")) else None)
    check_environment(os.environ)
    if path is not None and not path.is_file():
        raise InvalidSettings(f"config file not found: {path} (--config or MEMORYD_CONFIG)")
    try:
        if path is None:
            return Settings(**overrides)  # type: ignore[arg-type]

        class _FileSettings(Settings):
            model_config = SettingsConfigDict(toml_file=path)

        return _FileSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise InvalidSettings(describe(exc, path)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidSettings(f"config file {path} is not valid TOML: {exc}") from exc
    except SettingsError as exc:  # a value the environment gives that cannot be parsed
        raise InvalidSettings(f"the settings cannot be read: {exc}") from exc
