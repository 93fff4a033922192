"""Identity: who is calling, and may they make this call for this user?

For every MemoryService call the `Identity` concern

1. authenticates: a Bearer API key or JWT in the `authorization` metadata, else the mTLS
   client certificate, else (only when no credential is configured at all) the anonymous
   principal of the default tenant. Missing or bad: UNAUTHENTICATED.
2. binds the principal to the call (`CallContext`): the servicer takes the tenant of every
   scope from it, never from the request.
3. authorizes, before the servicer sees the request: the RPC's action must be granted to the
   principal's role and `scope.user_id` must be one of its users (core/access.py);
   otherwise PERMISSION_DENIED. For Import the first message's scope is checked before it
   reaches the servicer.
4. writes the audit log: every refusal, and every admin-only operation with its outcome,
   each with the key id (never a secret).

Health and reflection are other services: the interceptor chain leaves them open.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc
from google.protobuf.message import Message

from memoryd.core.access import ADMIN_ACTIONS, Action, authorize
from memoryd.core.credentials import Authenticator, ClientCertificates
from memoryd.core.errors import MemorydError, PermissionDenied, Unauthenticated
from memoryd.core.models import AccessRole, Principal
from memoryd.core.startup import StartupRefused
from memoryd.core.tiers.registry import TIERS
from memoryd.settings import Settings
from memoryd.stores.audit.port import AuditLog, AuditLogError
from memoryd.transport.interceptors import (
    SERVICE_PREFIX,
    AroundCall,
    Behavior,
    CallContext,
    Context,
)
from memoryd.transport.status_map import status_code_of
from memoryd.v1 import memory_pb2 as pb

log = logging.getLogger(__name__)

# What each RPC does, for the grants. An RPC missing here needs the admin role.
ACTIONS: Mapping[str, Action] = {
    "Add": Action.WRITE,
    "AddBatch": Action.WRITE,
    "Retrieve": Action.READ,
    "Get": Action.READ,
    "Delete": Action.WRITE,
    "Prune": Action.WRITE,
    "Export": Action.READ,
    "Import": Action.RESTORE,
    "Usage": Action.READ,
    "RenderContext": Action.READ,
    "EndSession": Action.WRITE,
    "ListUsers": Action.LIST,
    "ListMemories": Action.READ,
}


# Tiers whose Prune ALL also erases the user's cold archive of them (proto numbers).
_ARCHIVED_TIERS = frozenset(
    pb.Tier.Value(f"TIER_{tier.name}") for tier, s in TIERS.items() if s.archive_after_setting
)


def action_of(rpc: str, request: Message | None) -> Action | None:
    """The action a call takes. Prune ALL erases: with no tier named the whole user, and
    on a tier that keeps a cold archive that archive too (so naming every tier is no way
    around the erasure's grant and audit line). ALL on the other tiers (ending a task or a
    session, clearing persona facts or entities) is a write."""
    if (
        rpc == "Prune"
        and isinstance(request, pb.PruneRequest)
        and request.strategy == pb.PRUNE_STRATEGY_ALL
        and (not request.tiers or not _ARCHIVED_TIERS.isdisjoint(request.tiers))
    ):
        return Action.ERASE
    return ACTIONS.get(rpc)


def user_of(request: Message) -> str:
    scope = getattr(request, "scope", None)
    return str(getattr(scope, "user_id", "") or "")


def users_of(request: Message) -> list[str]:
    """Every user a request acts for: AddBatch items carry a scope each, and each one is
    checked (a batch for a user outside the grants is refused whole, nothing written)."""
    if isinstance(request, pb.AddBatchRequest):
        return list(dict.fromkeys(item.scope.user_id for item in request.items)) or [""]
    return [user_of(request)]


# Start-up.


def credentials_configured(settings: Settings) -> bool:
    return bool(settings.auth.keys_file or settings.auth.jwt.enabled or settings.tls.client_ca_file)


def is_loopback(listen: str) -> bool:
    if listen.startswith("unix:"):
        return True
    host = listen.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(settings: Settings) -> None:
    """With no credential configured, serve loopback only unless told otherwise."""
    if credentials_configured(settings) or is_loopback(settings.listen):
        return
    if settings.auth.allow_unauthenticated:
        log.warning(
            "serving %s WITHOUT authentication (MEMORYD_AUTH__ALLOW_UNAUTHENTICATED=true): "
            "every caller can read and erase every user",
            settings.listen,
        )
        return
    raise StartupRefused(
        f"MEMORYD_LISTEN={settings.listen} is not a loopback address and no credential is "
        "configured (MEMORYD_AUTH__KEYS_FILE, MEMORYD_AUTH__JWT__*, MEMORYD_TLS__CLIENT_CA_FILE); "
        "configure one, or set MEMORYD_AUTH__ALLOW_UNAUTHENTICATED=true to serve anyone"
    )


class Identity(AroundCall):
    def __init__(
        self,
        authenticator: Authenticator,
        calls: CallContext,
        audit: AuditLog | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._auth = authenticator
        self._calls = calls
        self._audit = audit
        self._clock = clock

    @asynccontextmanager
    async def around(
        self, details: grpc.HandlerCallDetails, context: Context
    ) -> AsyncIterator[None]:
        """Authenticates and binds the principal (authorization needs the request: see
        `_admit`, used by the wrappers below)."""
        rpc = details.method.removeprefix(SERVICE_PREFIX)
        # Each RPC runs in its own task with its own context copy: no reset needed.
        self._calls.bind(await self._authenticate(rpc, context))
        yield

    def around_unary(self, method: str, behavior: Behavior) -> Behavior:
        rpc = method.removeprefix(SERVICE_PREFIX)
        authenticate, bind = self._authenticate, self._calls.bind

        async def call(request: Any, context: Context) -> Any:
            bind(await authenticate(rpc, context))
            return await behavior(request, context)

        return call

    async def _authenticate(self, rpc: str, context: Context) -> Principal:
        if not self._auth.configured:
            return self._auth.authenticate(())  # the anonymous principal: no metadata read
        try:
            cert = None
            if self._auth.certs is not None:
                cert = ClientCertificates.pem_of(_auth_context(context))
            return self._auth.authenticate(tuple(context.invocation_metadata() or ()), cert)
        except Unauthenticated as exc:
            await self._record_refusal(rpc, context, None, exc, "")
            raise

    async def _admit(self, rpc: str, context: Context, request: Any) -> tuple[_Call, Any]:
        """Checks the call's grants; returns what it is and the request to pass on (for a
        request stream, one that checks its first message's user before handing it on)."""
        principal = self._calls.principal()
        streamed = not isinstance(request, Message)
        action = action_of(rpc, None if streamed else request)
        users = [""] if streamed else users_of(request)
        user = users[0]
        call = _Call(rpc, action, user)
        try:
            if action is None:
                if principal.role is not AccessRole.ADMIN:
                    raise PermissionDenied(
                        "RPC_NOT_GRANTED", f"{rpc} is open to admin credentials only", {"rpc": rpc}
                    )
            else:
                for user in users:
                    authorize(principal, action, user)
        except PermissionDenied as exc:
            await self._record_refusal(rpc, context, principal, exc, user)
            raise
        if streamed:
            request = self._checked_stream(call, context, principal, request)
        return call, request

    async def _checked_stream(
        self, call: _Call, context: Context, principal: Principal, stream: AsyncIterator[Message]
    ) -> AsyncIterator[Message]:
        first = True
        async for message in stream:
            if first:
                first = False
                call.user = user_of(message)
                try:
                    if call.action is not None:
                        authorize(principal, call.action, call.user)
                except PermissionDenied as exc:
                    await self._record_refusal(call.rpc, context, principal, exc, call.user)
                    raise
            yield message

    def wrap_behavior(
        self, behavior: Behavior, details: grpc.HandlerCallDetails, generates: bool
    ) -> Behavior:
        """Grants need the request (its user): checked here, inside `around`, which has
        bound the principal."""
        rpc = details.method.removeprefix(SERVICE_PREFIX)
        # A one-user call whose action does not depend on the request and is not audited
        # (Add, Retrieve, ...): one grant check, no bookkeeping.
        plain = ACTIONS.get(rpc)
        if rpc in ("Prune", "AddBatch", "Import") or plain is None or plain in ADMIN_ACTIONS:
            plain = None

        async def simple(request: Any, context: Context) -> Any:
            assert plain is not None
            principal = self._calls.principal()
            user = user_of(request)
            try:
                authorize(principal, plain, user)
            except PermissionDenied as exc:
                await self._record_refusal(rpc, context, principal, exc, user)
                raise
            return await behavior(request, context)

        async def unary(request: Any, context: Context) -> Any:
            facts, request = await self._admit(rpc, context, request)
            if not _is_audited(facts):
                return await behavior(request, context)
            async with self._audited(facts):
                return await behavior(request, context)

        async def stream(request: Any, context: Context) -> AsyncIterator[Any]:
            facts, request = await self._admit(rpc, context, request)
            async with self._audited(facts):
                async for response in behavior(request, context):
                    yield response

        if generates:
            return stream
        return unary if plain is None else simple

    @asynccontextmanager
    async def _audited(self, call: _Call) -> AsyncIterator[None]:
        """Admin-only operations leave an audit line with their outcome."""
        if not _is_audited(call):
            yield
            return
        outcome = "OK"
        try:
            yield
        except MemorydError as exc:
            outcome = status_code_of(exc).name
            raise
        except BaseException:
            outcome = "ERROR"
            raise
        finally:
            principal = self._calls.principal()
            await self._write(
                {
                    "event": "admin_operation",
                    "rpc": call.rpc,
                    "action": call.action.value if call.action else "",
                    **_who(principal),
                    "user_id": call.user,
                    "outcome": outcome,
                }
            )

    async def _record_refusal(
        self,
        rpc: str,
        context: Context,
        principal: Principal | None,
        exc: Unauthenticated | PermissionDenied,
        user_id: str,
    ) -> None:
        entry: dict[str, Any] = {
            "event": "auth_failure",
            "rpc": rpc,
            "status": status_code_of(exc).name,
            "reason": exc.reason,
        }
        if principal is not None:
            entry.update(_who(principal))
        else:
            assert isinstance(exc, Unauthenticated)
            entry.update(key_id=exc.key_id, detail=exc.detail)
        entry.update(user_id=user_id, peer=context.peer())
        log.info("refused %s: %s %s key=%s", rpc, entry["status"], exc.reason, entry["key_id"])
        await self._write(entry)

    async def _write(self, entry: dict[str, Any]) -> None:
        if self._audit is None:
            return
        line = {"time": datetime.fromtimestamp(self._clock(), tz=UTC).isoformat(), **entry}
        try:
            await asyncio.to_thread(self._audit.append, line)
        except AuditLogError as exc:
            log.error("audit log not written (%s): %s", exc, line)


@dataclass
class _Call:
    """What a call is, for its checks and its audit line (`user` of a request stream is
    known once its first message arrives)."""

    rpc: str
    action: Action | None
    user: str


def _is_audited(call: _Call) -> bool:
    return call.action is None or call.action in ADMIN_ACTIONS


def _who(principal: Principal) -> dict[str, str]:
    return {
        "credential": principal.credential,
        "key_id": principal.key_id,
        "subject": principal.subject,
        "tenant": principal.tenant,
        "role": principal.role.value,
    }


def _auth_context(context: Context) -> Mapping[str, Iterable[bytes]]:
    try:
        return context.auth_context()
    except Exception:  # an insecure connection has no auth context to speak of
        return {}
