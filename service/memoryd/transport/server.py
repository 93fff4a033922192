"""The grpc.aio server: MemoryService, health, optional reflection, graceful stop."""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import grpc
from grpc_health.v1 import health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer

from memoryd.core.credentials import Authenticator
from memoryd.core.engine import MemoryEngine
from memoryd.core.rate_limits import RateLimits
from memoryd.core.startup import StartupRefused
from memoryd.settings import Settings
from memoryd.stores.audit.port import AuditLog
from memoryd.telemetry import Telemetry
from memoryd.telemetry.metrics import MetricsListener
from memoryd.transport.grpc_logs import withhold_header_values
from memoryd.transport.health import SERVICE_NAME, HealthMonitor
from memoryd.transport.identity import Identity, check_exposure
from memoryd.transport.interceptors import CallChain, CallContext, ErrorMapping
from memoryd.transport.limits import AnswerCache, RateLimiting
from memoryd.transport.observability import Observability
from memoryd.transport.servicer import MemoryServicer
from memoryd.transport.starting import add_port, cannot_listen
from memoryd.transport.tracing import server_interceptor
from memoryd.v1 import memory_pb2, memory_pb2_grpc

log = logging.getLogger(__name__)


class Served(Protocol):
    """What the server serves and reports with, all built by the composition root
    (`memoryd.app.App` is one): the transport wires it into gRPC and builds none of it."""

    engine: MemoryEngine
    authenticator: Authenticator
    rate_limits: RateLimits
    access_audit: AuditLog
    telemetry: Telemetry
    # Health probes by name, the store each checks (as metrics name it), and the health
    # services that follow them.
    probes: dict[str, Callable[[], Awaitable[bool]]]
    probe_stores: dict[str, str]
    health_services: dict[str, list[str]]

    @property
    def clock(self) -> Callable[[], float]: ...

    async def start(self) -> None:
        """Background work (the write-behind copy, maintenance), once the server listens."""

    def serving(self) -> None:
        """Background work that waits until the server answers (it would delay SERVING)."""

    async def close(self) -> None:
        """Stop the background work and close every store."""


class MemorydServer:
    def __init__(self, settings: Settings, app: Served, health_interval_s: float = 2.0) -> None:
        self._settings = settings
        self._app = app
        withhold_header_values()  # before any call: no credential may reach the log
        metrics = app.telemetry.metrics
        self._health = HealthMonitor(
            app.probes,
            health_interval_s,
            services=app.health_services,
            report=lambda probe, up: metrics.set_store_up(app.probe_stores.get(probe, probe), up),
        )
        self._metrics_listener = (
            MetricsListener(metrics.registry, settings.metrics.listen)
            if settings.metrics.listen
            else None
        )
        check_exposure(settings)
        calls = CallContext()
        identity = Identity(app.authenticator, calls, app.access_audit, app.clock)
        quotas = settings.quotas
        answers = AnswerCache(quotas.rate_cache_entries, quotas.rate_cache_seconds, app.clock)
        max_bytes = settings.limits.max_message_bytes
        provider = app.telemetry.tracer_provider
        # The trace's server span encloses the whole call, so every log line is inside it.
        tracing = [server_interceptor(provider)] if provider is not None else []
        self._server = grpc.aio.server(
            interceptors=tracing,
            options=[
                ("grpc.max_receive_message_length", max_bytes),
                ("grpc.max_send_message_length", max_bytes),
                # grpc sets SO_REUSEPORT by default: a second server on the same port would
                # start and take half of the new connections. One server per port.
                ("grpc.so_reuseport", 0),
            ],
        )
        # Outermost first: the request id, metrics and log line see every outcome; errors
        # are mapped for everything inside, identity included; identity refuses before any
        # rate-limit token is spent. Every handler is wrapped once, as it is registered.
        chain = CallChain(
            [
                Observability(metrics, calls),
                ErrorMapping(),
                identity,
                RateLimiting(app.rate_limits, calls, answers),
            ]
        )
        registrar: Any = chain.registrar(self._server)
        memory_pb2_grpc.add_MemoryServiceServicer_to_server(
            MemoryServicer(app.engine, calls), registrar
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health.servicer, registrar)
        if settings.reflection:
            names = (
                memory_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name,
                "grpc.health.v1.Health",
                reflection.SERVICE_NAME,
            )
            reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
                ReflectionServicer(names), registrar
            )
        self.port = 0
        self.metrics_port = 0
        self._stopped = False

    @property
    def health(self) -> HealthMonitor:
        return self._health

    async def start(self) -> int:
        listen = self._settings.listen
        self.port = add_port(self._server, self._settings)
        if self.port == 0:
            raise StartupRefused(cannot_listen("MEMORYD_LISTEN", listen))
        if self._metrics_listener is not None:
            try:
                self.metrics_port = self._metrics_listener.start()
            except OSError as exc:
                metrics = self._settings.metrics.listen
                raise StartupRefused(
                    cannot_listen("MEMORYD_METRICS__LISTEN", metrics, exc)
                ) from exc
            log.info("metrics on port %d", self.metrics_port)
        await self._health.start()
        await self._app.start()
        await self._server.start()
        log.info("memoryd serving %s on port %d", SERVICE_NAME, self.port)
        self._app.serving()
        return self.port

    async def stop(self, grace_s: float | None = None) -> None:
        if self._stopped:
            return
        self._stopped = True
        grace = self._settings.grace_period_seconds if grace_s is None else grace_s
        log.debug("stopping: health")
        await self._health.shutdown()
        log.debug("stopping: server")
        await self._server.stop(grace)
        log.debug("stopping: app")
        await self._app.close()
        if self._metrics_listener is not None:
            self._metrics_listener.stop()
        log.info("memoryd stopped")

    async def wait(self) -> None:
        await self._server.wait_for_termination()


def check_ports_free(settings: Settings) -> None:
    """Refuse at once, before the embedding model loads, a port that another process
    listens on or a host that does not resolve (grpc's own refusal comes later, and with a
    line of its C core on stderr). The bind in `start` stays the authority."""
    for setting, listen in (
        ("MEMORYD_LISTEN", settings.listen),
        ("MEMORYD_METRICS__LISTEN", settings.metrics.listen),
    ):
        if not listen or listen.startswith(("unix:", "unix-abstract:")):
            continue
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        try:
            addresses = socket.getaddrinfo(
                host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
        except socket.gaierror as exc:
            raise StartupRefused(f"cannot listen on {listen} ({setting}): {exc.strerror}") from exc
        if int(port) == 0:
            continue  # any free port
        for family, kind, proto, _, address in addresses:
            with socket.socket(family, kind, proto) as probe:
                # As grpc binds: a connection of an earlier run in TIME_WAIT owns nothing.
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(address)
                except OSError as exc:
                    if exc.errno == errno.EADDRINUSE:
                        raise StartupRefused(cannot_listen(setting, listen)) from exc


async def serve(settings: Settings, app: Served) -> None:
    """Run until SIGTERM/SIGINT, then go NOT_SERVING and stop within the grace period."""
    server = MemorydServer(settings, app)
    try:
        await server.start()
    except BaseException:
        await server.stop(grace_s=0)  # closes the stores the app opened
        raise
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    log.info("signal received: stopping within %.1f s", settings.grace_period_seconds)
    await server.stop()
