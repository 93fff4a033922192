"""Protobuf messages <-> domain types. Enum values map by name (TIER_WORKING <-> WORKING)."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from enum import Enum
from fractions import Fraction
from typing import Any, TypeVar

from google.protobuf.timestamp_pb2 import Timestamp

from memoryd.core.errors import InvalidArgument, MemorydError
from memoryd.core.models import (
    AddCommand,
    AddResult,
    CommandAction,
    CommandOutcome,
    EndSessionCommand,
    EndSessionResult,
    Entity,
    Episode,
    EpisodeStep,
    ExportQuery,
    FactVersion,
    GetResult,
    Kind,
    Lookup,
    MemoriesPage,
    MemoriesQuery,
    MemoryRecord,
    Operation,
    Origin,
    Principal,
    PruneCommand,
    PruneResult,
    PruneStrategy,
    Relation,
    RenderQuery,
    RetrieveQuery,
    RetrieveResult,
    Role,
    Scope,
    Source,
    Tier,
    TierUsage,
    UsageReport,
    UsersPage,
    UsersQuery,
)
from memoryd.core.retrieval.render_context import RenderedContext
from memoryd.transport import status_map
from memoryd.v1 import memory_pb2 as pb

E = TypeVar("E", bound=Enum)

# (domain enum, proto enum wrapper, value-name prefix)
_ENUMS: dict[type[Enum], tuple[Any, str]] = {
    Tier: (pb.Tier, "TIER_"),
    Kind: (pb.Kind, "KIND_"),
    Operation: (pb.Operation, "OPERATION_"),
    Role: (pb.Role, "ROLE_"),
    Source: (pb.Source, "SOURCE_"),
    Origin: (pb.Origin, "ORIGIN_"),
    PruneStrategy: (pb.PruneStrategy, "PRUNE_STRATEGY_"),
    CommandAction: (pb.CommandAction, "COMMAND_ACTION_"),
}


def _choices(enum: type[Enum]) -> str:
    wrapper = _ENUMS[enum][0]
    return ", ".join(n for n in wrapper.keys() if not n.endswith("_UNSPECIFIED"))  # noqa: SIM118


@functools.cache
def _by_value(enum: type[Enum]) -> dict[int, Enum]:
    """The proto enum's numbers to `enum`'s members, built once (Name() and a lookup by
    name on every call cost more than the rest of a working-tier Add's conversion)."""
    wrapper, prefix = _ENUMS[enum]
    return {
        number: enum[name.removeprefix(prefix)]
        for name, number in wrapper.items()
        if name.removeprefix(prefix) in enum.__members__
    }


@functools.cache
def _by_member(enum: type[Enum]) -> dict[Enum, int]:
    wrapper, prefix = _ENUMS[enum]
    names = set(wrapper.keys())
    return {m: wrapper.Value(prefix + m.name) for m in enum if prefix + m.name in names}


def enum_from_proto(enum: type[E], value: int, field: str, *, required: bool = False) -> E:
    member = _by_value(enum).get(value)
    if member is None:
        raise InvalidArgument.of(field, f"unknown value {value}; use one of {_choices(enum)}")
    if required and member.name == "UNSPECIFIED":
        raise InvalidArgument.of(field, f"is required; use one of {_choices(enum)}")
    return member  # type: ignore[return-value]


def enum_to_proto(member: Enum) -> int:
    return _by_member(type(member))[member]


def tier_from_proto(value: int, field: str = "tier") -> Tier:
    if value == pb.TIER_UNSPECIFIED:
        raise InvalidArgument.of(field, f"is required; use one of {_choices(Tier)}")
    return enum_from_proto(Tier, value, field)


def tiers_from_proto(values: Iterable[int], field: str = "tiers") -> list[Tier]:
    return [tier_from_proto(v, f"{field}[{i}]") for i, v in enumerate(values)]


# google.protobuf.Timestamp's range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
_MIN_SECONDS = -62_135_596_800
_MAX_SECONDS = 253_402_300_799
_MIN_NANOS = _MIN_SECONDS * 1_000_000_000
_MAX_NANOS = _MAX_SECONDS * 1_000_000_000 + 999_999_999


def seconds_of(ts: Timestamp, field: str) -> float:
    """A request's Timestamp as epoch seconds; one outside the Timestamp range is refused
    (it could never be sent back)."""
    if not _MIN_SECONDS <= ts.seconds <= _MAX_SECONDS:
        raise InvalidArgument.of(
            field, "is outside the Timestamp range (0001-01-01 to 9999-12-31 UTC)"
        )
    if not 0 <= ts.nanos <= 999_999_999:
        raise InvalidArgument.of(field, "nanos must be between 0 and 999,999,999")
    # Exact arithmetic, correctly rounded once: `seconds + nanos / 1e9` rounds twice and
    # moved about one time in fifteen by a float step, so an exported time came back as
    # another instant (a relation closed "now" was open again after an import).
    return float(Fraction(ts.seconds * 1_000_000_000 + ts.nanos, 1_000_000_000))


def timestamp_of(seconds: float) -> Timestamp:
    """Epoch seconds as a Timestamp (see `_set_time`)."""
    ts = Timestamp()
    _set_time(ts, seconds)
    return ts


def _set_time(ts: Timestamp, seconds: float) -> None:
    """Set `ts` to epoch seconds, rounded exactly once to the nanosecond (half to even,
    as `round` does). Times are kept as floats, which round: the last representable
    instant comes back a little past it, so it is clamped into the range (as is anything
    stored before out-of-range times were refused)."""
    nanos = 0
    if math.isfinite(seconds):
        # A float is n / 2**k exactly: integer arithmetic, no Fraction (a Retrieve sets
        # three or four times per item; with Fraction this alone is a tenth of its cost).
        numerator, denominator = seconds.as_integer_ratio()
        nanos, rest = divmod(numerator * 1_000_000_000, denominator)
        if 2 * rest > denominator or (2 * rest == denominator and nanos % 2):
            nanos += 1
    ts.FromNanoseconds(min(max(nanos, _MIN_NANOS), _MAX_NANOS))


def scope_from_proto(scope: pb.Scope, principal: Principal) -> Scope:
    return Scope(
        tenant=principal.tenant,
        user_id=scope.user_id,
        agent_id=scope.agent_id,
        session_id=scope.session_id,
        task_id=scope.task_id,
    )


def episode_from_proto(episode: pb.Episode) -> Episode:
    return Episode(
        task=episode.task,
        steps=tuple(EpisodeStep(s.action, s.observation) for s in episode.steps),
        outcome=episode.outcome,
        success=episode.success,
    )


def episode_to_proto(episode: Episode) -> pb.Episode:
    return pb.Episode(
        task=episode.task,
        steps=[pb.EpisodeStep(action=s.action, observation=s.observation) for s in episode.steps],
        outcome=episode.outcome,
        success=episode.success,
    )


def add_command(req: pb.AddRequest, principal: Principal) -> AddCommand:
    return AddCommand(
        scope=scope_from_proto(req.scope, principal),
        tier=tier_from_proto(req.tier),
        content=req.content,
        kind=enum_from_proto(Kind, req.kind, "kind"),
        key=req.key,
        metadata=dict(req.metadata),
        importance=req.importance if req.HasField("importance") else None,
        expires_at=seconds_of(req.expires_at, "expires_at") if req.HasField("expires_at") else None,
        role=enum_from_proto(Role, req.role, "role"),
        source=enum_from_proto(Source, req.source, "source"),
        auto_prune=req.auto_prune,
        episode=episode_from_proto(req.episode) if req.HasField("episode") else None,
        document_json=req.document_json,
        entity=entity_from_proto(req.entity) if req.HasField("entity") else None,
        relation=relation_from_proto(req.relation) if req.HasField("relation") else None,
        occurred_at=seconds_of(req.occurred_at, "occurred_at")
        if req.HasField("occurred_at")
        else None,
    )


def add_response(result: AddResult, latency_ms: float) -> pb.AddResponse:
    response = pb.AddResponse(
        memory_id=result.memory_id,
        operation=enum_to_proto(result.operation),  # type: ignore[arg-type]
        tier=enum_to_proto(result.tier),  # type: ignore[arg-type]
        latency_ms=latency_ms,
        quota_remaining=result.quota_remaining,
        evicted_keys=result.evicted_keys,
    )
    if result.command is not None:
        response.command.CopyFrom(command_outcome(result.command))
    return response


def item_error(exc: MemorydError) -> pb.ItemError:
    """What a single Add of the item would have failed with, as one batch result's error."""
    row = status_map.row_of(exc)
    field = exc.violations[0].field if isinstance(exc, InvalidArgument) and exc.violations else ""
    return pb.ItemError(
        code=row.code.value[0],
        message=status_map.message_of(exc),
        field=status_map.field_of(field),
        reason=row.reason,
    )


def add_batch_response(
    outcomes: Sequence[AddResult | MemorydError], latency_ms: float
) -> pb.AddBatchResponse:
    response = pb.AddBatchResponse(latency_ms=latency_ms)
    for index, outcome in enumerate(outcomes):
        if isinstance(outcome, MemorydError):
            response.results.add(index=index, error=item_error(outcome))
            response.failed_count += 1
            continue
        single = add_response(outcome, 0.0)
        response.results.add(
            index=index,
            memory_id=single.memory_id,
            operation=single.operation,
            tier=single.tier,
            quota_remaining=single.quota_remaining,
            evicted_keys=single.evicted_keys,
            command=single.command if single.HasField("command") else None,
        )
        response.succeeded_count += 1
    return response


def retrieve_query(req: pb.RetrieveRequest, principal: Principal) -> RetrieveQuery:
    return RetrieveQuery(
        scope=scope_from_proto(req.scope, principal),
        query=req.query,
        tiers=tiers_from_proto(req.tiers),
        top_k=req.top_k,
        filters=dict(req.filters),
        kinds=[enum_from_proto(Kind, k, f"kinds[{i}]") for i, k in enumerate(req.kinds)],
        min_score=req.min_score if req.HasField("min_score") else None,
        token_budget=req.token_budget if req.HasField("token_budget") else None,
        context_window=req.context_window,
    )


def exported_item(record: MemoryRecord) -> pb.MemoryItem:
    """An item of an export stream: the memory without its origin here. The stream's
    format (and its checksum, and every importer of it) predates the field, and an Import
    gives what it restores an origin of its own."""
    item = memory_item(record)
    item.ClearField("origin")
    return item


def memory_item(record: MemoryRecord) -> pb.MemoryItem:
    item = pb.MemoryItem(
        id=record.id,
        tier=enum_to_proto(record.tier),  # type: ignore[arg-type]
        kind=enum_to_proto(record.kind),  # type: ignore[arg-type]
        content=record.content,
        key=record.key,
        score=record.score,
        metadata=record.metadata,
        importance=record.importance,
        source=enum_to_proto(record.source),  # type: ignore[arg-type]
        origin=enum_to_proto(record.origin),  # type: ignore[arg-type]
        role=enum_to_proto(record.role),  # type: ignore[arg-type]
        agent_id=record.agent_id,
        session_id=record.session_id,
        task_id=record.task_id,
        archived=record.archived,
        deleted=record.deleted,
        document_json=record.document_json,
        history=[fact_version_to_proto(v) for v in record.history],
        position=record.position,
        context=[memory_item(r) for r in record.context],
    )
    if record.episode is not None:
        item.episode.CopyFrom(episode_to_proto(record.episode))
    if record.entity is not None:
        item.entity.CopyFrom(entity_to_proto(record.entity))
    if record.relation is not None:
        item.relation.CopyFrom(relation_to_proto(record.relation))
    if record.created_at:
        _set_time(item.created_at, record.created_at)
    if record.updated_at:
        _set_time(item.updated_at, record.updated_at)
    if record.expires_at is not None:
        _set_time(item.expires_at, record.expires_at)
    if record.occurred_at:
        _set_time(item.occurred_at, record.occurred_at)
    return item


def retrieve_response(result: RetrieveResult) -> pb.RetrieveResponse:
    return pb.RetrieveResponse(
        items=[memory_item(r) for r in result.items],
        total_count=result.total_count,
        embedding_ms=result.embedding_ms,
        retrieval_ms=result.retrieval_ms,
        token_count=result.token_count,
        truncated=result.truncated,
        skipped_tiers=[enum_to_proto(t) for t in result.skipped_tiers],  # type: ignore[misc]
    )


def render_query(req: pb.RenderContextRequest, principal: Principal) -> RenderQuery:
    return RenderQuery(
        scope=scope_from_proto(req.scope, principal),
        query=req.query,
        tiers=tiers_from_proto(req.tiers),
        top_k=req.top_k,
        min_score=req.min_score if req.HasField("min_score") else None,
        token_budget=req.token_budget if req.HasField("token_budget") else None,
        context_window=req.context_window,
    )


def render_response(rendered: RenderedContext) -> pb.RenderContextResponse:
    return pb.RenderContextResponse(
        context=rendered.text,
        token_count=rendered.token_count,
        truncated=rendered.truncated,
        item_count=rendered.item_count,
    )


def lookup(req: pb.GetRequest | pb.DeleteRequest, principal: Principal) -> Lookup:
    return Lookup(
        scope=scope_from_proto(req.scope, principal),
        tier=tier_from_proto(req.tier),
        ids=list(req.ids),
        keys=list(req.keys),
    )


def get_response(result: GetResult) -> pb.GetResponse:
    return pb.GetResponse(items=[memory_item(r) for r in result.items], missing=result.missing)


def prune_command(req: pb.PruneRequest, principal: Principal) -> PruneCommand:
    if req.strategy == pb.PRUNE_STRATEGY_UNSPECIFIED:
        raise InvalidArgument.of("strategy", f"is required; use one of {_choices(PruneStrategy)}")
    return PruneCommand(
        scope=scope_from_proto(req.scope, principal),
        strategy=enum_from_proto(PruneStrategy, req.strategy, "strategy"),
        tiers=tiers_from_proto(req.tiers),
        percent=req.percent,
        older_than_days=req.older_than_days,
        filters=dict(req.filters),
        dry_run=req.dry_run,
    )


def prune_response(result: PruneResult) -> pb.PruneResponse:
    return pb.PruneResponse(
        deleted_count=result.deleted_count,
        archived_count=result.archived_count,
        dry_run=result.dry_run,
        per_tier=[
            pb.TierCount(tier=enum_to_proto(t), count=c)  # type: ignore[arg-type]
            for t, c in result.per_tier.items()
        ],
    )


def export_query(req: pb.ExportRequest, principal: Principal) -> ExportQuery:
    return ExportQuery(
        scope=scope_from_proto(req.scope, principal),
        tiers=tiers_from_proto(req.tiers),
        include_archived=req.include_archived,
    )


def record_from_item(item: pb.MemoryItem) -> MemoryRecord:
    """An imported item; its tier must be named. Field names are those of the item."""
    return MemoryRecord(
        id=item.id,
        tier=tier_from_proto(item.tier, "item.tier"),
        content=item.content,
        kind=enum_from_proto(Kind, item.kind, "item.kind"),
        key=item.key,
        metadata=dict(item.metadata),
        importance=item.importance,
        created_at=seconds_of(item.created_at, "item.created_at")
        if item.HasField("created_at")
        else 0.0,
        updated_at=seconds_of(item.updated_at, "item.updated_at")
        if item.HasField("updated_at")
        else 0.0,
        expires_at=seconds_of(item.expires_at, "item.expires_at")
        if item.HasField("expires_at")
        else None,
        source=enum_from_proto(Source, item.source, "item.source"),
        origin=enum_from_proto(Origin, item.origin, "item.origin"),
        role=enum_from_proto(Role, item.role, "item.role"),
        agent_id=item.agent_id,
        session_id=item.session_id,
        task_id=item.task_id,
        deleted=item.deleted,
        episode=episode_from_proto(item.episode) if item.HasField("episode") else None,
        document_json=item.document_json,
        entity=entity_from_proto(item.entity) if item.HasField("entity") else None,
        relation=relation_from_proto(item.relation) if item.HasField("relation") else None,
        history=tuple(
            FactVersion(
                content=v.content,
                source=enum_from_proto(Source, v.source, "item.history.source"),
                replaced_at=seconds_of(v.replaced_at, "item.history.replaced_at"),
            )
            for v in item.history
        ),
        occurred_at=seconds_of(item.occurred_at, "item.occurred_at")
        if item.HasField("occurred_at")
        else 0.0,
        position=item.position,
    )


def _tier_usage(usage: TierUsage) -> pb.TierUsage:
    return pb.TierUsage(
        tier=enum_to_proto(usage.tier),  # type: ignore[arg-type]
        count=usage.count,
        bytes=usage.bytes,
        max_count=usage.max_count,
        max_bytes=usage.max_bytes,
        percent=usage.percent,
    )


def usage_response(report: UsageReport) -> pb.UsageResponse:
    return pb.UsageResponse(
        tiers=[_tier_usage(t) for t in report.tiers],
        alerts=[
            pb.UsageAlert(
                tier=enum_to_proto(a.tier),  # type: ignore[arg-type]
                level=a.level,
                percent=a.percent,
                message=a.message,
            )
            for a in report.alerts
        ],
        estimated_monthly_cost_usd=report.estimated_monthly_cost_usd,
        quota_profile=report.quota_profile,
        skipped_tiers=[enum_to_proto(t) for t in report.skipped_tiers],  # type: ignore[misc]
    )


def relation_from_proto(relation: pb.Relation) -> Relation:
    return Relation(
        subject=relation.subject,
        predicate=relation.predicate,
        object=relation.object,
        valid_from=(
            seconds_of(relation.valid_from, "relation.valid_from")
            if relation.HasField("valid_from")
            else None
        ),
        invalid_at=(
            seconds_of(relation.invalid_at, "relation.invalid_at")
            if relation.HasField("invalid_at")
            else None
        ),
    )


def relation_to_proto(relation: Relation) -> pb.Relation:
    message = pb.Relation(
        subject=relation.subject, predicate=relation.predicate, object=relation.object
    )
    if relation.valid_from is not None:
        message.valid_from.CopyFrom(timestamp_of(relation.valid_from))
    if relation.invalid_at is not None:
        message.invalid_at.CopyFrom(timestamp_of(relation.invalid_at))
    return message


def entity_from_proto(entity: pb.Entity) -> Entity:
    return Entity(
        name=entity.name,
        type=entity.type,
        aliases=tuple(entity.aliases),
        description=entity.description,
        relations=tuple(relation_from_proto(r) for r in entity.relations),
    )


def entity_to_proto(entity: Entity) -> pb.Entity:
    return pb.Entity(
        name=entity.name,
        type=entity.type,
        aliases=list(entity.aliases),
        description=entity.description,
        relations=[relation_to_proto(r) for r in entity.relations],
    )


def fact_version_to_proto(version: FactVersion) -> pb.FactVersion:
    message = pb.FactVersion(
        content=version.content,
        source=enum_to_proto(version.source),  # type: ignore[arg-type]
    )
    message.replaced_at.CopyFrom(timestamp_of(version.replaced_at))
    return message


def command_outcome(outcome: CommandOutcome) -> pb.CommandOutcome:
    message = pb.CommandOutcome(
        action=enum_to_proto(outcome.action),  # type: ignore[arg-type]
        subject=outcome.subject,
        facts=[memory_item(r) for r in outcome.facts],
    )
    if outcome.operation is not None:
        message.operation = enum_to_proto(outcome.operation)  # type: ignore[assignment]
    return message


def end_session_command(req: pb.EndSessionRequest, principal: Principal) -> EndSessionCommand:
    return EndSessionCommand(
        scope=scope_from_proto(req.scope, principal),
        extract=req.extract_facts if req.HasField("extract_facts") else None,
        auto_prune=req.auto_prune,
    )


def end_session_response(result: EndSessionResult) -> pb.EndSessionResponse:
    return pb.EndSessionResponse(
        messages_processed=result.messages_processed,
        facts_extracted=result.facts_extracted,
        facts=[memory_item(r) for r in result.facts],
        added_count=len(result.added_ids),
        updated_count=len(result.updated_ids),
        skipped_count=result.skipped_count,
        added_ids=result.added_ids,
        updated_ids=result.updated_ids,
        extraction_skipped=result.extraction_skipped,
        extraction_skipped_reason=result.extraction_skipped_reason,
        warnings=result.warnings,
    )


# Browsing (ListUsers, ListMemories) and explain.


def users_query(req: pb.ListUsersRequest, principal: Principal) -> UsersQuery:
    return UsersQuery(
        tenant=principal.tenant,
        prefix=req.user_id_prefix,
        page_size=req.page_size,
        page_token=req.page_token,
        only=principal.users,
    )


def users_response(page: UsersPage) -> pb.ListUsersResponse:
    users = []
    for user in page.users:
        usage = usage_response(user.usage)
        summary = pb.UserSummary(user_id=user.user_id, tiers=usage.tiers, alerts=usage.alerts)
        if user.last_active:
            _set_time(summary.last_active_at, user.last_active)
        users.append(summary)
    return pb.ListUsersResponse(
        users=users,
        next_page_token=page.next_page_token,
        totals=[
            pb.TierUsage(tier=enum_to_proto(t.tier), count=t.count, bytes=t.bytes)  # type: ignore[arg-type]
            for t in page.totals
        ],
    )


def memories_query(req: pb.ListMemoriesRequest, principal: Principal) -> MemoriesQuery:
    return MemoriesQuery(
        scope=scope_from_proto(req.scope, principal),
        tiers=tiers_from_proto(req.tiers),
        kinds=[enum_from_proto(Kind, k, f"kinds[{i}]") for i, k in enumerate(req.kinds)],
        filters=dict(req.filters),
        page_size=req.page_size,
        page_token=req.page_token,
    )


def memories_response(page: MemoriesPage) -> pb.ListMemoriesResponse:
    return pb.ListMemoriesResponse(
        items=[memory_item(r) for r in page.items],
        next_page_token=page.next_page_token,
        tasks=[
            pb.Scope(user_id=s.user_id, agent_id=s.agent_id, task_id=s.task_id) for s in page.tasks
        ],
        session_ids=[s.session_id for s in page.sessions],
    )


def explain_scores(response: pb.RetrieveResponse, records: Sequence[MemoryRecord]) -> None:
    """RetrieveRequest.explain: each hit's score components, as its tier's ranking gave
    them (the hot tiers rank by recency: their hits carry the final score alone)."""
    for item, record in zip(response.items, records, strict=True):
        out = item.explain
        out.final = item.score
        parts = record.components
        if parts is None:
            continue
        out.dense = parts.dense
        if parts.unnamed_dense is not None:
            out.unnamed_dense = parts.unnamed_dense
        if parts.own_dense is not None:
            out.own_dense = parts.own_dense
        out.keyword = parts.relevance - parts.dense - parts.grounding_lift
        out.fused, out.bm25, out.keyword_share = parts.fused, parts.keyword, parts.keyword_share
        out.relevance, out.rank, out.mmr = parts.relevance, parts.rank, -parts.mmr_penalty
        out.lifts["conversation"] = parts.final - parts.relevance
        for name, lift in (
            ("task", parts.grounding_lift),
            ("speaker (rank)", parts.speaker_lift),
            ("time (rank)", parts.time_lift),
            ("when (rank)", parts.when_lift),
            ("conversation (rank)", parts.conversation_lift),
            ("link (rank)", parts.link_lift),
        ):
            if lift:
                out.lifts[name] = lift
