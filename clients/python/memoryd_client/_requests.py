"""Keyword arguments -> request messages, shared by the sync and asyncio clients.

Each `*Args` TypedDict is the keyword surface of one method (`client.add(**AddArgs)`);
the builder next to it makes the protobuf request. Scope fields (user_id, agent_id,
session_id, task_id) are plain keywords of every method.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Required, TypedDict

from memoryd_client._enums import Kind, PruneStrategy, Role, Source, Tier
from memoryd_client._proto_enum import EnumLike, to_number
from memoryd_client.results import Episode, Relation
from memoryd_client.v1 import memory_pb2 as pb


class ScopeArgs(TypedDict, total=False):
    user_id: Required[str]
    agent_id: str
    session_id: str
    task_id: str


class AddArgs(ScopeArgs, total=False):
    content: str
    tier: EnumLike  # default long_term
    kind: EnumLike
    key: str
    metadata: Mapping[str, str]
    importance: float
    expires_at: datetime  # aware; naive is taken as UTC
    role: EnumLike
    source: EnumLike
    auto_prune: bool
    episode: Episode | pb.Episode
    relation: Relation | pb.Relation
    document: Mapping[str, Any] | str  # structured tier: a JSON object, or its text


class RetrieveArgs(ScopeArgs, total=False):
    query: Required[str]
    tiers: Iterable[EnumLike]
    top_k: int
    filters: Mapping[str, str]
    kinds: Iterable[EnumLike]
    min_score: float
    token_budget: int
    explain: bool


class ListUsersArgs(TypedDict, total=False):
    user_id_prefix: str
    page_size: int
    page_token: str


class ListMemoriesArgs(ScopeArgs, total=False):
    tiers: Iterable[EnumLike]
    kinds: Iterable[EnumLike]
    filters: Mapping[str, str]
    page_size: int
    page_token: str


class LookupArgs(ScopeArgs, total=False):
    tier: Required[EnumLike]
    ids: Iterable[str]
    keys: Iterable[str]


class PruneArgs(ScopeArgs, total=False):
    strategy: Required[EnumLike]
    tiers: Iterable[EnumLike]
    percent: float
    older_than_days: int
    filters: Mapping[str, str]
    dry_run: bool


class ExportArgs(ScopeArgs, total=False):
    tiers: Iterable[EnumLike]
    include_archived: bool


class RenderContextArgs(ScopeArgs, total=False):
    query: str
    token_budget: int
    tiers: Iterable[EnumLike]
    top_k: int
    min_score: float


class EndSessionArgs(ScopeArgs, total=False):
    extract_facts: bool


def scope(args: Mapping[str, Any]) -> pb.Scope:
    return pb.Scope(
        user_id=args["user_id"],
        agent_id=args.get("agent_id", ""),
        session_id=args.get("session_id", ""),
        task_id=args.get("task_id", ""),
    )


def _tiers(values: Iterable[EnumLike] | None) -> list[int]:
    return [to_number(Tier, t) for t in values or ()]


def add(a: AddArgs) -> pb.AddRequest:
    request = pb.AddRequest(
        scope=scope(a),
        tier=to_number(Tier, a.get("tier", Tier.LONG_TERM)),  # type: ignore[arg-type]
        content=a.get("content", ""),
        kind=to_number(Kind, a.get("kind", 0)),  # type: ignore[arg-type]
        key=a.get("key", ""),
        metadata=dict(a.get("metadata", {})),
        role=to_number(Role, a.get("role", 0)),  # type: ignore[arg-type]
        source=to_number(Source, a.get("source", 0)),  # type: ignore[arg-type]
        auto_prune=a.get("auto_prune", False),
    )
    if "importance" in a:
        request.importance = a["importance"]
    if "expires_at" in a:
        request.expires_at.FromDatetime(a["expires_at"])
    if (episode := a.get("episode")) is not None:
        request.episode.CopyFrom(episode.to_proto() if isinstance(episode, Episode) else episode)
    if (relation := a.get("relation")) is not None:
        request.relation.CopyFrom(
            relation.to_proto() if isinstance(relation, Relation) else relation
        )
    if (document := a.get("document")) is not None:
        request.document_json = document if isinstance(document, str) else json.dumps(document)
    return request


def add_batch(items: Iterable[AddArgs]) -> pb.AddBatchRequest:
    return pb.AddBatchRequest(items=[add(a) for a in items])


def retrieve(a: RetrieveArgs) -> pb.RetrieveRequest:
    request = pb.RetrieveRequest(
        scope=scope(a),
        query=a["query"],
        tiers=_tiers(a.get("tiers")),  # type: ignore[arg-type]
        top_k=a.get("top_k", 0),
        filters=dict(a.get("filters", {})),
        kinds=[to_number(Kind, k) for k in a.get("kinds", ())],  # type: ignore[misc]
        explain=a.get("explain", False),
    )
    if "min_score" in a:
        request.min_score = a["min_score"]
    if "token_budget" in a:
        request.token_budget = a["token_budget"]
    return request


def list_users(a: ListUsersArgs) -> pb.ListUsersRequest:
    return pb.ListUsersRequest(
        user_id_prefix=a.get("user_id_prefix", ""),
        page_size=a.get("page_size", 0),
        page_token=a.get("page_token", ""),
    )


def list_memories(a: ListMemoriesArgs) -> pb.ListMemoriesRequest:
    return pb.ListMemoriesRequest(
        scope=scope(a),
        tiers=_tiers(a.get("tiers")),  # type: ignore[arg-type]
        kinds=[to_number(Kind, k) for k in a.get("kinds", ())],  # type: ignore[misc]
        filters=dict(a.get("filters", {})),
        page_size=a.get("page_size", 0),
        page_token=a.get("page_token", ""),
    )


def get(a: LookupArgs) -> pb.GetRequest:
    return pb.GetRequest(
        scope=scope(a),
        tier=to_number(Tier, a["tier"]),  # type: ignore[arg-type]
        ids=list(a.get("ids", ())),
        keys=list(a.get("keys", ())),
    )


def delete(a: LookupArgs) -> pb.DeleteRequest:
    return pb.DeleteRequest(
        scope=scope(a),
        tier=to_number(Tier, a["tier"]),  # type: ignore[arg-type]
        ids=list(a.get("ids", ())),
        keys=list(a.get("keys", ())),
    )


def prune(a: PruneArgs) -> pb.PruneRequest:
    return pb.PruneRequest(
        scope=scope(a),
        tiers=_tiers(a.get("tiers")),  # type: ignore[arg-type]
        strategy=to_number(PruneStrategy, a["strategy"]),  # type: ignore[arg-type]
        percent=a.get("percent", 0.0),
        older_than_days=a.get("older_than_days", 0),
        filters=dict(a.get("filters", {})),
        dry_run=a.get("dry_run", False),
    )


def export(a: ExportArgs) -> pb.ExportRequest:
    return pb.ExportRequest(
        scope=scope(a),
        tiers=_tiers(a.get("tiers")),  # type: ignore[arg-type]
        include_archived=a.get("include_archived", False),
    )


def usage(a: ScopeArgs) -> pb.UsageRequest:
    return pb.UsageRequest(scope=scope(a))


def render_context(a: RenderContextArgs) -> pb.RenderContextRequest:
    request = pb.RenderContextRequest(
        scope=scope(a),
        query=a.get("query", ""),
        tiers=_tiers(a.get("tiers")),  # type: ignore[arg-type]
        top_k=a.get("top_k", 0),
    )
    if "token_budget" in a:
        request.token_budget = a["token_budget"]
    if "min_score" in a:
        request.min_score = a["min_score"]
    return request


def end_session(a: EndSessionArgs) -> pb.EndSessionRequest:
    return pb.EndSessionRequest(scope=scope(a), extract_facts=a.get("extract_facts", False))
