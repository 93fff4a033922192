"""Rate limits around the calls (the policy is core/rate_limits.py).

* Queries (Retrieve, RenderContext) past the caller's rate are answered softly, never with
  an error: the answer to the same request from the last `rate_cache_seconds` if this
  process has one, else an empty answer; either way with `rate_limited = true`.
* Writes (Add, AddBatch, Delete, Prune, Import, EndSession) past theirs fail with
  RESOURCE_EXHAUSTED (RetryInfo, QuotaFailure) before the servicer runs: nothing is
  written. An AddBatch costs each of its users one write per item of that user, all taken
  before any is stored; an Import is charged once, when its first message arrives. A write
  forgets the cached answers of every user it wrote for.
* Listings (ListMemories, ListUsers: the console's reads) take a token from the same query
  buckets — ListMemories the user's, ListUsers the tenant's (a bucket of no user) — and
  past them fail with RESOURCE_EXHAUSTED, as writes do: a page has no soft answer.

Callers without a limit (auth off) skip all of this, caching included. Runs after identity,
so refused callers spend no tokens.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import grpc
from google.protobuf.message import Message

from memoryd.core.models import Principal, Scope
from memoryd.core.rate_limits import RateLimits
from memoryd.transport.identity import user_of
from memoryd.transport.interceptors import (
    SERVICE_PREFIX,
    AroundCall,
    Behavior,
    CallContext,
    Context,
)
from memoryd.v1 import memory_pb2 as pb

QUERIES: Mapping[str, type[Message]] = {
    "Retrieve": pb.RetrieveResponse,
    "RenderContext": pb.RenderContextResponse,
}
WRITES = frozenset({"Add", "AddBatch", "Delete", "Prune", "Import", "EndSession"})
LISTINGS = frozenset({"ListUsers", "ListMemories"})

_Key = tuple[str, str, str, bytes]


class AnswerCache:
    """Recent query answers of this process, by (tenant, user, rpc, request bytes).

    A write for a user forgets that user's answers here; on other replicas they age out
    after `ttl_s`, so an answer served past a limit is at most that old."""

    def __init__(self, max_entries: int, ttl_s: float, clock: Callable[[], float]) -> None:
        self._entries: OrderedDict[_Key, tuple[float, Message]] = OrderedDict()
        self._max = max_entries
        self._ttl = ttl_s
        self._clock = clock

    def get(self, key: _Key) -> Message | None:
        found = self._entries.get(key)
        if found is None:
            return None
        stored_at, answer = found
        if self._clock() - stored_at > self._ttl:
            del self._entries[key]
            return None
        return answer

    def put(self, key: _Key, answer: Message) -> None:
        if self._max <= 0:
            return
        self._entries.pop(key, None)
        self._entries[key] = (self._clock(), answer)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def forget_user(self, tenant: str, user_id: str) -> None:
        for key in [k for k in self._entries if k[0] == tenant and k[1] == user_id]:
            del self._entries[key]


class RateLimiting(AroundCall):
    def __init__(self, limits: RateLimits, calls: CallContext, cache: AnswerCache) -> None:
        self._limits = limits
        self._calls = calls
        self._cache = cache

    surrounds = False  # the work needs the request: see the wrappers

    @asynccontextmanager
    async def around(
        self, details: grpc.HandlerCallDetails, context: Context
    ) -> AsyncIterator[None]:
        yield

    def wrap_behavior(
        self, behavior: Behavior, details: grpc.HandlerCallDetails, generates: bool
    ) -> Behavior:
        rpc = details.method.removeprefix(SERVICE_PREFIX)
        if generates:
            return behavior  # Export: a read that is not a query
        if rpc in QUERIES:
            return self._query(rpc, behavior, QUERIES[rpc])
        if rpc in WRITES:
            return self._write(behavior)
        if rpc in LISTINGS:
            return self._listing(behavior)
        return behavior

    def _scope(self, principal: Principal, request: Message) -> Scope | None:
        user = user_of(request)
        if not user or not self._limits.limited(principal):
            return None  # no limit (or an invalid request, refused further in)
        return Scope(tenant=principal.tenant, user_id=user)

    def _writes(self, principal: Principal, request: Message) -> dict[Scope, int]:
        """The writes a unary call makes, per user: one, or for an AddBatch one per item of
        each user (an item without a user is refused further in, and costs nothing)."""
        if not self._limits.limited(principal):
            return {}
        if isinstance(request, pb.AddBatchRequest):
            users = Counter(item.scope.user_id for item in request.items if item.scope.user_id)
            return {Scope(tenant=principal.tenant, user_id=u): n for u, n in users.items()}
        scope = self._scope(principal, request)
        return {} if scope is None else {scope: 1}

    def _query(self, rpc: str, behavior: Behavior, empty: type[Message]) -> Behavior:
        async def call(request: Message, context: Context) -> Message:
            principal = self._calls.principal()
            scope = self._scope(principal, request)
            if scope is None:
                return await behavior(request, context)  # type: ignore[no-any-return]
            key = (scope.tenant, scope.user_id, rpc, request.SerializeToString(deterministic=True))
            if await self._limits.allow_query(principal, scope):
                answer = await behavior(request, context)
                self._cache.put(key, answer)
                return answer  # type: ignore[no-any-return]
            degraded = empty()
            cached = self._cache.get(key)
            if cached is not None:
                degraded.CopyFrom(cached)
            degraded.rate_limited = True  # type: ignore[attr-defined]
            return degraded

        return call

    def _listing(self, behavior: Behavior) -> Behavior:
        async def call(request: Message, context: Context) -> Message:
            principal = self._calls.principal()
            if self._limits.limited(principal):
                # ListUsers names no user: it draws on the tenant's bucket (user "").
                user = user_of(request) if isinstance(request, pb.ListMemoriesRequest) else ""
                if user or isinstance(request, pb.ListUsersRequest):
                    await self._limits.charge_listing(
                        principal, Scope(tenant=principal.tenant, user_id=user)
                    )
            return await behavior(request, context)  # type: ignore[no-any-return]

        return call

    def _write(self, behavior: Behavior) -> Behavior:
        async def call(request: Any, context: Context) -> Any:
            principal = self._calls.principal()
            if not self._limits.limited(principal):
                return await behavior(request, context)
            if isinstance(request, Message):
                writes = self._writes(principal, request)
                await self._limits.charge_writes(principal, writes)
                try:
                    return await behavior(request, context)
                finally:
                    for scope in writes:
                        self._cache.forget_user(scope.tenant, scope.user_id)
            charged: list[Scope] = []
            try:
                return await behavior(self._charged_stream(principal, request, charged), context)
            finally:
                for scope in charged:
                    self._cache.forget_user(scope.tenant, scope.user_id)

        return call

    async def _charged_stream(
        self, principal: Principal, stream: AsyncIterator[Message], charged: list[Scope]
    ) -> AsyncIterator[Message]:
        first = True
        async for message in stream:
            if first:
                first = False
                scope = self._scope(principal, message)
                if scope is not None:
                    await self._limits.charge_write(principal, scope)
                    charged.append(scope)
            yield message
