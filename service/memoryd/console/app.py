"""The console's ASGI app: server-rendered pages over the service's RPCs.

Every page asks the service with the signed-in operator's credential, so the service's
grants decide what each one shows and allows; the console adds its own guards in front
(sign-in, CSRF token on each POST, same-origin POSTs, typed confirmation of an erasure).
No page logs a query, a memory or a credential: the access log is ours (method, route,
status, time), not uvicorn's (which would log query strings)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import grpc
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import FormData, UploadFile
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from memoryd.console import graph
from memoryd.console.metrics import MetricsReader
from memoryd.console.service import Service
from memoryd.console.sessions import COOKIE, CookieTooLarge, Session, Sessions
from memoryd.transport import export_stream
from memoryd.v1 import memory_pb2 as pb

log = logging.getLogger("memoryd.console")

HERE = Path(__file__).parent
# What the pages may load: their own origin only; no script at all, no framing.
CSP = (
    "default-src 'self'; script-src 'none'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` with
    # the console's own forms, and the same-origin check below would refuse them.
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
    "Cache-Control": "no-store",
}
TIERS = [int(v) for v in pb.Tier.values() if v != pb.TIER_UNSPECIFIED]
KINDS = [int(v) for v in pb.Kind.values() if v != pb.KIND_UNSPECIFIED]
# Tiers whose items belong to a task or a session: their detail links name it.
HOT = (pb.TIER_WORKING, pb.TIER_SHORT_TERM)
# Health services of the server (see app.py's probes) and of each tier.
HEALTH_SERVICES = [
    "",
    "memoryd.v1.MemoryService",
    "memoryd.hot_store",
    "memoryd.vector_store",
    "memoryd.write_behind",
]
PAGE_SIZES = (10, 25, 50, 100, 200)
ALERT_AT, CRITICAL_AT = 80.0, 95.0


def tier_name(value: int) -> str:
    return pb.Tier.Name(value).removeprefix("TIER_").lower()  # type: ignore[arg-type]


def kind_name(value: int) -> str:
    return pb.Kind.Name(value).removeprefix("KIND_").lower()  # type: ignore[arg-type]


def source_of(item: pb.MemoryItem) -> str:
    """How a memory came in: its origin where the service stored one (Import, a persona
    command), else what its kind and source tell (MemoryItem.origin in the contract)."""
    if item.origin == pb.ORIGIN_IMPORT:
        return "import"
    if item.origin == pb.ORIGIN_COMMAND:
        return "persona command"
    if item.kind == pb.KIND_MESSAGE:
        return "message"
    if item.source == pb.SOURCE_AUTO:
        return "extraction"
    return "explicit add"


def when(ts: Any) -> str:
    if ts is None or not ts.seconds:
        return ""
    return datetime.fromtimestamp(ts.seconds, tz=UTC).strftime("%Y-%m-%d %H:%M")


def level(percent: float) -> str:
    return "critical" if percent >= CRITICAL_AT else "warning" if percent >= ALERT_AT else "ok"


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters.update(
        tier=tier_name,
        kind=kind_name,
        when=when,
        level=level,
        size=human_bytes,
        source=source_of,
        path=lambda v: quote(str(v), safe=""),
    )
    env.globals.update(
        HOT=HOT, TIERS=TIERS, KINDS=KINDS, PAGE_SIZES=PAGE_SIZES, urlencode=urlencode
    )
    return env


class Refused(Exception):
    """A request the console itself refuses (no session, bad CSRF token, cross-site)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


Handler = Callable[[Request, Session], Awaitable[Response]]


class Console:
    def __init__(
        self,
        service: Service,
        *,
        idle_s: float = 900.0,
        metrics_url: str | None = None,
        secure_cookies: bool = False,
        session_key: bytes | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.service = service
        # Sessions live in their cookies (sessions.py): replicas sharing the key share them.
        self.sessions = Sessions(session_key, idle_s, clock)
        self.metrics = MetricsReader(metrics_url)
        self.secure_cookies = secure_cookies
        self.env = _templates()

    # Rendering and guards.

    def page(
        self, request: Request, name: str, session: Session | None, status: int = 200, **kw: Any
    ) -> HTMLResponse:
        html = self.env.get_template(name).render(
            request=request, session=session, csrf=session.csrf if session else "", **kw
        )
        response = HTMLResponse(html, status_code=status)
        if session is not None:
            self._set_cookie(response, session, request)
        return response

    def _set_cookie(self, response: Response, session: Session, request: Request) -> None:
        response.set_cookie(
            COOKIE,
            self.sessions.cookie(session),
            httponly=True,
            samesite="strict",
            secure=self.secure_cookies or request.url.scheme == "https",
            path="/",
        )

    def session_of(self, request: Request) -> Session | None:
        return self.sessions.read(request.cookies.get(COOKIE))

    async def checked_post(self, request: Request, session: Session) -> dict[str, str]:
        """The form of a POST that passed the CSRF and same-origin checks."""
        form = await self.checked_form(request, session)
        return {k: v for k, v in form.items() if isinstance(v, str)}

    async def checked_form(self, request: Request, session: Session) -> FormData:
        """The whole form (its uploads included) of a POST that passed the same checks."""
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            raise Refused(403, "a request from another site is refused")
        form = await request.form()
        token = form.get("csrf", "")
        if not isinstance(token, str) or not session.csrf_ok(token):
            await form.close()
            raise Refused(403, "the form's CSRF token is missing or wrong: reload the page")
        return form

    def signed_in(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session = self.session_of(request)
            if session is None or not session.signed_in:
                if request.method == "POST":
                    return self.page(
                        request,
                        "error.html",
                        None,
                        403,
                        title="Refused",
                        message="sign in first (or your session expired)",
                    )
                return RedirectResponse("/signin", status_code=303)
            try:
                return await handler(request, session)
            except Refused as exc:
                return self.page(
                    request, "error.html", session, exc.status, title="Refused", message=str(exc)
                )
            except grpc.aio.AioRpcError as err:
                return self.rpc_failed(request, session, err)

        return endpoint

    def rpc_failed(self, request: Request, session: Session, err: grpc.aio.AioRpcError) -> Response:
        code = err.code()
        if code == grpc.StatusCode.UNAUTHENTICATED:
            expired = RedirectResponse("/signin?expired=1", status_code=303)
            expired.delete_cookie(COOKIE, path="/")
            return expired
        status = {
            grpc.StatusCode.PERMISSION_DENIED: 403,
            grpc.StatusCode.INVALID_ARGUMENT: 400,
            grpc.StatusCode.NOT_FOUND: 404,
            grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
        }.get(code, 502)
        return self.page(
            request, "error.html", session, status, title=code.name, message=err.details() or ""
        )

    async def call(self, session: Session, rpc: str, request: Any) -> Any:
        return await self.service.call(rpc, request, session.credential)

    # Sign-in and out.

    async def signin_form(self, request: Request) -> Response:
        session = self.session_of(request) or self.sessions.new()
        if session.signed_in:
            return RedirectResponse("/", status_code=303)
        expired = request.query_params.get("expired") == "1"
        return self.page(request, "signin.html", session, expired=expired, error="")

    async def signin(self, request: Request) -> Response:
        session = self.session_of(request)
        if session is None:
            return self.page(
                request,
                "error.html",
                None,
                403,
                title="Refused",
                message="the sign-in form expired: open it again",
            )
        try:
            form = await self.checked_post(request, session)
        except Refused as exc:
            return self.page(
                request, "error.html", None, exc.status, title="Refused", message=str(exc)
            )
        credential = form.get("credential", "").strip()
        if not credential:
            return self.page(request, "signin.html", session, 400, error="enter an API key or JWT")
        try:
            await self.service.call("ListUsers", pb.ListUsersRequest(page_size=1), credential)
            may_list = True
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.UNAUTHENTICATED:
                return self.page(
                    request,
                    "signin.html",
                    session,
                    401,
                    error="the service does not accept this credential",
                )
            if err.code() != grpc.StatusCode.PERMISSION_DENIED:
                return self.page(
                    request,
                    "signin.html",
                    session,
                    502,
                    error=f"the service answered {err.code().name}",
                )
            may_list = False  # an agent credential: it may still look at its own users
        label = f"…{credential[-6:]}" if len(credential) > 12 else "credential"
        try:
            signed = self.sessions.sign_in(credential, label, may_list)
        except CookieTooLarge as exc:
            return self.page(request, "signin.html", session, 400, error=str(exc))
        log.info("console sign-in", extra={"may_list": may_list})
        response = RedirectResponse("/", status_code=303)
        self._set_cookie(response, signed, request)
        return response

    async def signout(self, request: Request, session: Session) -> Response:
        await self.checked_post(request, session)
        # The session is its cookie: clearing it signs out.
        response = RedirectResponse("/signin", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    # Pages.

    async def overview(self, request: Request, session: Session) -> Response:
        q = request.query_params
        prefix = q.get("q", "").strip()
        size = _size(q.get("size"), 25)
        token = q.get("page", "")
        if not session.may_list:
            return self.page(
                request,
                "overview.html",
                session,
                users=[],
                totals={},
                prefix=prefix,
                size=size,
                next_token="",
                token="",
                listed=False,
            )
        reply = await self.call(
            session,
            "ListUsers",
            pb.ListUsersRequest(user_id_prefix=prefix, page_size=size, page_token=token),
        )
        # The tenant's totals (every user, not this page's), from the service.
        totals = {t.tier: (t.count, t.bytes) for t in reply.totals}
        return self.page(
            request,
            "overview.html",
            session,
            users=list(reply.users),
            totals=totals,
            prefix=prefix,
            size=size,
            next_token=reply.next_page_token,
            token=token,
            listed=True,
        )

    async def user(self, request: Request, session: Session) -> Response:
        user_id = request.path_params["user_id"]
        q = request.query_params
        tier = _number(q.get("tier"), TIERS)
        kind = _number(q.get("kind"), KINDS)
        session_id = q.get("session", "").strip()
        task_id = q.get("task", "").strip()
        agent_id = q.get("agent", "").strip() if task_id else ""
        meta = q.get("meta", "").strip()
        filters: dict[str, str] = {}
        if meta:
            key, sep, value = meta.partition("=")
            if not sep:
                raise Refused(400, "a metadata filter is written key=value")
            filters[key.strip()] = value.strip()
        size = _size(q.get("size"), 50)
        token = q.get("page", "")
        # A session or task named lists its hot tier too (its window, its working memory).
        scope = pb.Scope(user_id=user_id, session_id=session_id, agent_id=agent_id, task_id=task_id)
        reply = await self.call(
            session,
            "ListMemories",
            pb.ListMemoriesRequest(
                scope=scope,
                tiers=[tier] if tier else [],  # type: ignore[list-item]
                kinds=[kind] if kind else [],  # type: ignore[list-item]
                filters=filters,
                page_size=size,
                page_token=token,
            ),
        )
        usage = await self.call(session, "Usage", pb.UsageRequest(scope=pb.Scope(user_id=user_id)))
        here = {
            "tier": q.get("tier", ""),
            "kind": q.get("kind", ""),
            "session": session_id,
            "task": task_id,
            "agent": agent_id,
            "meta": meta,
            "size": str(size),
        }
        return self.page(
            request,
            "user.html",
            session,
            user_id=user_id,
            items=list(reply.items),
            usage=usage,
            next_token=reply.next_page_token,
            token=token,
            here=here,
            tier=tier,
            kind=kind,
            tasks=list(reply.tasks),
            sessions=list(reply.session_ids),
        )

    async def memory(self, request: Request, session: Session) -> Response:
        user_id = request.path_params["user_id"]
        tier = _number(request.path_params["tier"], TIERS)
        if not tier:
            raise Refused(404, "no such tier")
        q = request.query_params
        # A hot tier's item is found in its session or task (the table's link names it).
        scope = pb.Scope(
            user_id=user_id,
            session_id=q.get("session", ""),
            task_id=q.get("task", ""),
            agent_id=q.get("agent", ""),
        )
        reply = await self.call(
            session,
            "Get",
            pb.GetRequest(
                scope=scope,
                tier=tier,  # type: ignore[arg-type]
                ids=[request.path_params["memory_id"]],
            ),
        )
        if not reply.items:
            raise Refused(404, "no such memory (deleted, expired, or another user's)")
        return self.page(request, "memory.html", session, user_id=user_id, item=reply.items[0])

    async def entity_graph(self, request: Request, session: Session) -> Response:
        user_id = request.path_params["user_id"]
        items: list[pb.MemoryItem] = []
        token = ""
        # The picture stays readable up to a few hundred entities: the first 5 pages.
        for _ in range(5):
            reply = await self.call(
                session,
                "ListMemories",
                pb.ListMemoriesRequest(
                    scope=pb.Scope(user_id=user_id),
                    tiers=[pb.TIER_ENTITY],
                    page_size=200,
                    page_token=token,
                ),
            )
            items += reply.items
            token = reply.next_page_token
            if not token:
                break
        picture = graph.layout(items)
        return self.page(
            request,
            "graph.html",
            session,
            user_id=user_id,
            graph=picture,
            more=bool(token),
            node_radius=graph.NODE_RADIUS,
        )

    async def ask(self, request: Request, session: Session) -> Response:
        user_id = request.path_params["user_id"]
        q = request.query_params
        query = q.get("q", "").strip()
        budget = _int(q.get("budget"), 1000, 1, 100_000)
        top_k = _int(q.get("top_k"), 10, 1, 100)
        hits: list[pb.MemoryItem] = []
        rendered = None
        retrieved = None
        if query:
            scope = pb.Scope(user_id=user_id)
            retrieved = await self.call(
                session,
                "Retrieve",
                pb.RetrieveRequest(
                    scope=scope, query=query, top_k=top_k, explain=True, token_budget=budget
                ),
            )
            hits = list(retrieved.items)
            rendered = await self.call(
                session,
                "RenderContext",
                pb.RenderContextRequest(scope=scope, query=query, token_budget=budget, top_k=top_k),
            )
        return self.page(
            request,
            "ask.html",
            session,
            user_id=user_id,
            query=query,
            budget=budget,
            top_k=top_k,
            hits=hits,
            rendered=rendered,
            retrieved=retrieved,
        )

    async def erase_form(self, request: Request, session: Session) -> Response:
        user_id = request.path_params["user_id"]
        erase = pb.PruneRequest(
            scope=pb.Scope(user_id=user_id), strategy=pb.PRUNE_STRATEGY_ALL, dry_run=True
        )
        try:
            counts = await self.call(session, "Prune", erase)
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.PERMISSION_DENIED:
                raise
            return self.page(
                request,
                "erase.html",
                session,
                403,
                user_id=user_id,
                allowed=False,
                counts=None,
                error=err.details() or "",
            )
        return self.page(
            request, "erase.html", session, user_id=user_id, allowed=True, counts=counts, error=""
        )

    async def erase(self, request: Request, session: Session) -> Response:
        user_id = request.path_params["user_id"]
        form = await self.checked_post(request, session)
        if form.get("confirm", "") != user_id:
            return self.page(
                request,
                "erase.html",
                session,
                400,
                user_id=user_id,
                allowed=True,
                counts=None,
                error="type the user id exactly to confirm",
            )
        scope = pb.Scope(user_id=user_id)
        done = await self.call(
            session, "Prune", pb.PruneRequest(scope=scope, strategy=pb.PRUNE_STRATEGY_ALL)
        )
        log.info("console erasure", extra={"deleted_count": done.deleted_count})
        # The proof: what an agent, Usage and Export find now.
        found = await self.call(
            session,
            "Retrieve",
            pb.RetrieveRequest(scope=scope, query="anything at all", top_k=100, min_score=0.0),
        )
        usage = await self.call(session, "Usage", pb.UsageRequest(scope=scope))
        exported = [
            m async for m in self.service.export(pb.ExportRequest(scope=scope), session.credential)
        ]
        items = [m for m in exported if m.WhichOneof("payload") == "item"]
        header = next((m.header for m in exported if m.WhichOneof("payload") == "header"), None)
        held = sum(t.count for t in usage.tiers)
        return self.page(
            request,
            "erased.html",
            session,
            user_id=user_id,
            done=done,
            retrieved=len(found.items),
            held=held,
            usage=usage,
            exported=len(items),
            export_total=header.total if header is not None else 0,
            empty=not found.items and held == 0 and not items,
        )

    async def import_form(self, request: Request, session: Session) -> Response:
        user_id = request.path_params["user_id"]
        # An Import that ends before its trailer writes nothing: the service checks the
        # grant on the first message, then refuses the incomplete stream. So this asks
        # whether the credential may import without changing anything.
        try:
            await self.service.import_(
                _only(pb.ImportRequest(scope=_scope(user_id))), session.credential
            )
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.PERMISSION_DENIED:
                return self.page(
                    request,
                    "import.html",
                    session,
                    403,
                    user_id=user_id,
                    allowed=False,
                    error=err.details() or "",
                )
            if err.code() != grpc.StatusCode.INVALID_ARGUMENT:
                raise
        return self.page(request, "import.html", session, user_id=user_id, allowed=True, error="")

    async def import_(self, request: Request, session: Session) -> Response:
        user_id = request.path_params["user_id"]
        form = await self.checked_form(request, session)
        try:
            upload = form.get("file")
            if not isinstance(upload, UploadFile) or not upload.filename:
                return self._import_refused(request, session, user_id, "choose an export file")
            sent = _Sent()
            try:
                reply = await self.service.import_(
                    _import_requests(user_id, upload, sent), session.credential
                )
            except grpc.aio.AioRpcError as err:
                if sent.problem:  # a bad line ended the stream: that is the cause
                    return self._import_refused(request, session, user_id, sent.problem)
                if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    return self._import_refused(
                        request, session, user_id, f"the service refused the file: {err.details()}"
                    )
                raise
        finally:
            await form.close()
        # Counts only: memory content is never logged.
        log.info("console import", extra={"imported_count": reply.imported_count})
        usage = await self.call(session, "Usage", pb.UsageRequest(scope=_scope(user_id)))
        return self.page(
            request,
            "imported.html",
            session,
            user_id=user_id,
            reply=reply,
            sent=sorted(sent.per_tier.items()),
            total=sum(sent.per_tier.values()),
            usage=usage,
        )

    def _import_refused(
        self, request: Request, session: Session, user_id: str, error: str
    ) -> Response:
        return self.page(
            request, "import.html", session, 400, user_id=user_id, allowed=True, error=error
        )

    async def export(self, request: Request, session: Session) -> Response:
        user_id = request.path_params["user_id"]
        stream = self.service.export(
            pb.ExportRequest(scope=pb.Scope(user_id=user_id)), session.credential
        )
        # The first message is read here, so that a refusal is a page, not a broken file.
        first = await anext(aiter(stream))

        async def lines() -> AsyncIterator[bytes]:
            yield (export_stream.to_json_line(first) + "\n").encode()
            async for message in stream:
                yield (export_stream.to_json_line(message) + "\n").encode()

        name = re.sub(r"[^A-Za-z0-9._-]", "_", user_id) or "user"
        return StreamingResponse(
            lines(),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="{name}.jsonl"'},
        )

    async def health(self, request: Request, session: Session) -> Response:
        names = HEALTH_SERVICES + [f"memoryd.tier.{tier_name(t)}" for t in TIERS]
        statuses = [(n or "(server)", await self.service.health(n)) for n in names]
        figures = await self.metrics.read()
        return self.page(
            request,
            "health.html",
            session,
            statuses=statuses,
            figures=figures,
            target=self.service.target,
            metrics_url=self.metrics.url,
        )


def _size(value: str | None, default: int) -> int:
    return _int(value, default, 1, 200)


def _int(value: str | None, default: int, low: int, high: int) -> int:
    try:
        return min(high, max(low, int(value))) if value else default
    except ValueError:
        return default


def _number(value: str | None, allowed: list[int]) -> int:
    """A tier or kind from its number or its short name; 0 when not given or unknown."""
    if not value:
        return 0
    if value.isdigit():
        return int(value) if int(value) in allowed else 0
    for n in allowed:
        if value in (tier_name(n) if allowed is TIERS else kind_name(n),):
            return n
    return 0


def _scope(user_id: str) -> pb.Scope:
    return pb.Scope(user_id=user_id)


async def _only(request: pb.ImportRequest) -> AsyncIterator[pb.ImportRequest]:
    yield request


class _Sent:
    """What an upload streamed to Import: items per tier, and the first bad line."""

    def __init__(self) -> None:
        self.per_tier: dict[int, int] = {}
        self.problem = ""


async def _import_requests(
    user_id: str, upload: UploadFile, sent: _Sent
) -> AsyncIterator[pb.ImportRequest]:
    """The uploaded JSONL export as Import messages, line by line (never whole in memory).
    A line that is not an export message ends the stream: the service then refuses it for
    its missing trailer and nothing is written; `sent.problem` names the line."""
    await upload.seek(0)
    first = True
    number = 0
    for raw in upload.file:
        number += 1
        line = raw.decode("utf-8", errors="replace").strip()
        if not line:
            continue
        try:
            message = export_stream.from_json_line(line)
        except export_stream.NotAnExportLine:
            sent.problem = f"line {number} is not a line of a memoryd export"
            return
        request = export_stream.import_request(message)
        if first:
            # The items belong to the user of this page, whoever the file was exported from.
            request.scope.CopyFrom(_scope(user_id))
            first = False
        if message.WhichOneof("payload") == "item":
            sent.per_tier[message.item.tier] = sent.per_tier.get(message.item.tier, 0) + 1
        yield request
    if first:
        sent.problem = "the file is empty"


class _Framing(BaseHTTPMiddleware):
    """The security headers on every answer, and one log line per request (no path
    parameters, no query string: they carry user ids and queries)."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if request.url.path.startswith("/static/"):
            response.headers["Cache-Control"] = "max-age=3600"
        route = request.scope.get("route")
        log.info(
            "console request",
            extra={
                "method": request.method,
                "route": getattr(route, "path", "?"),
                "status": response.status_code,
                "ms": round((time.perf_counter() - started) * 1000, 1),
            },
        )
        return response


def create_app(console: Console) -> Starlette:
    c = console
    routes = [
        Route("/signin", c.signin_form, methods=["GET"]),
        Route("/signin", c.signin, methods=["POST"]),
        Route("/signout", c.signed_in(c.signout), methods=["POST"]),
        Route("/", c.signed_in(c.overview), methods=["GET"]),
        Route("/health", c.signed_in(c.health), methods=["GET"]),
        Route("/users/{user_id}", c.signed_in(c.user), methods=["GET"]),
        Route("/users/{user_id}/ask", c.signed_in(c.ask), methods=["GET"]),
        Route("/users/{user_id}/graph", c.signed_in(c.entity_graph), methods=["GET"]),
        Route("/users/{user_id}/export", c.signed_in(c.export), methods=["GET"]),
        Route("/users/{user_id}/erase", c.signed_in(c.erase_form), methods=["GET"]),
        Route("/users/{user_id}/erase", c.signed_in(c.erase), methods=["POST"]),
        Route("/users/{user_id}/import", c.signed_in(c.import_form), methods=["GET"]),
        Route("/users/{user_id}/import", c.signed_in(c.import_), methods=["POST"]),
        Route("/users/{user_id}/memories/{tier}/{memory_id}", c.signed_in(c.memory)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(_Framing)])
