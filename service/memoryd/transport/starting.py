"""Health on the server's port while the stores open (a large vector store takes seconds).

`memoryd serve` opens its stores before it can build the real server (every service
needs them). Meanwhile this small server holds the port and answers only health:
readiness (`""` and the MemoryService name) NOT_SERVING, liveness SERVING, so an
orchestrator sees a live replica that is not ready yet instead of a refused connection,
and a log line says how long the opening has taken so far. It stops just before the
real server binds the same port.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from types import TracebackType

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2 as hpb
from grpc_health.v1 import health_pb2_grpc

from memoryd.app import StartupRefused
from memoryd.settings import Settings
from memoryd.transport.health import LIVENESS_NAME, SERVICE_NAME

log = logging.getLogger(__name__)

# How often the "still opening" line is logged.
PROGRESS_EVERY_S = 5.0


def cannot_listen(setting: str, listen: str, exc: OSError | None = None) -> str:
    port = listen.rpartition(":")[2]
    if exc is None or exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} is in use ({setting}={listen}): another memoryd or another program "
            "listens there; stop it, or give this server another port"
        )
    return f"cannot listen on {listen} ({setting}): {exc.strerror or exc}"


def add_port(server: grpc.aio.Server, settings: Settings) -> int:
    """Bind `server` to `settings.listen` (with TLS when configured); 0 if grpc could not."""
    tls = settings.tls
    try:
        if tls.cert_file is None or tls.key_file is None:
            return server.add_insecure_port(settings.listen)
        try:
            credentials = grpc.ssl_server_credentials(
                [(tls.key_file.read_bytes(), tls.cert_file.read_bytes())],
                root_certificates=tls.client_ca_file.read_bytes() if tls.client_ca_file else None,
                require_client_auth=bool(tls.client_ca_file),
            )
        except OSError as exc:
            raise StartupRefused(f"the TLS files cannot be read: {exc}") from exc
        return server.add_secure_port(settings.listen, credentials)
    except RuntimeError:  # grpc's "Failed to bind to address"
        return 0


class StartingServer:
    """`async with StartingServer(settings) as starting:` open the stores inside; the
    port is `starting.port` (the one bound, when `listen` asked for any free port)."""

    def __init__(self, settings: Settings, what: str = "the stores") -> None:
        self._settings = settings
        self._what = what
        self._server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        self._health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        self._ticker: asyncio.Task[None] | None = None
        self.port = 0

    async def __aenter__(self) -> StartingServer:
        # Set before the port opens: no probe ever sees an unknown service.
        await self._health.set(LIVENESS_NAME, hpb.HealthCheckResponse.SERVING)
        for name in ("", SERVICE_NAME):
            await self._health.set(name, hpb.HealthCheckResponse.NOT_SERVING)
        self.port = add_port(self._server, self._settings)
        if self.port == 0:
            raise StartupRefused(cannot_listen("MEMORYD_LISTEN", self._settings.listen))
        await self._server.start()
        log.info(
            "starting: opening %s; health answers NOT_SERVING on port %d", self._what, self.port
        )
        self._ticker = asyncio.create_task(self._progress(time.monotonic()), name="starting")
        return self

    async def _progress(self, started: float) -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            log.info(
                "starting: still opening %s (%.0f s so far)", self._what, time.monotonic() - started
            )

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        await self._server.stop(0)

    def listen_for_server(self) -> str:
        """The address the real server should bind: the same port (pinned when `listen`
        asked for any free one, so that clients told this port keep it)."""
        listen = self._settings.listen
        host, _, port = listen.rpartition(":")
        if listen.startswith(("unix:", "unix-abstract:")) or port != "0":
            return listen
        return f"{host}:{self.port}"
