"""Health on the server's port while the stores open (a large vector store takes seconds).

`memoryd serve` opens its stores before it can build the real server (every service
needs them). Meanwhile a small server holds the port and answers only health: readiness
(`""` and the MemoryService name) NOT_SERVING, liveness SERVING, so an orchestrator sees a
live replica that is not ready yet instead of a refused connection; every
`PROGRESS_EVERY_S` it logs how long the opening has taken so far (a quicker start logs
nothing). It runs in a process of its own: the embedded engine holds the GIL while it
loads a store (measured at 1M memories: an in-process health server answered nothing for
9 s, ADR 0600). It stops just before the real server binds the same port.
"""

from __future__ import annotations

import errno
import logging
import multiprocessing
import time
from concurrent import futures
from multiprocessing.connection import Connection
from types import TracebackType

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_health.v1 import health_pb2 as hpb

from memoryd.core.startup import StartupRefused
from memoryd.settings import Settings

log = logging.getLogger(__name__)

# How often the "still opening" line is logged.
PROGRESS_EVERY_S = 5.0
# The names `transport.health` serves (not imported: the child process stays light).
SERVICE_NAME = "memoryd.v1.MemoryService"
LIVENESS_NAME = "memoryd.liveness"


def cannot_listen(setting: str, listen: str, exc: OSError | None = None) -> str:
    port = listen.rpartition(":")[2]
    if exc is None or exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} is in use ({setting}={listen}): another memoryd or another program "
            "listens there; stop it, or give this server another port"
        )
    return f"cannot listen on {listen} ({setting}): {exc.strerror or exc}"


def add_port(server: grpc.Server | grpc.aio.Server, settings: Settings) -> int:
    """Bind `server` to `settings.listen` (with TLS when configured); 0 if grpc could not.
    Raises StartupRefused when the TLS files cannot be read."""
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


def _serve_health(settings: Settings, what: str, every_s: float, conn: Connection) -> None:
    """The child process: health only, until the parent says stop (or goes away)."""
    from memoryd.transport.logs import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    servicer = health.HealthServicer()
    servicer.set(LIVENESS_NAME, hpb.HealthCheckResponse.SERVING)
    for name in ("", SERVICE_NAME):
        servicer.set(name, hpb.HealthCheckResponse.NOT_SERVING)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=2), options=[("grpc.so_reuseport", 0)]
    )
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    try:
        port = add_port(server, settings)
    except StartupRefused as exc:
        conn.send(("refused", str(exc)))
        return
    if port == 0:
        conn.send(("refused", cannot_listen("MEMORYD_LISTEN", settings.listen)))
        return
    server.start()
    conn.send(("port", port))
    started = time.monotonic()
    # Until the parent sends "stop" or its end of the pipe closes (it died). Nothing is
    # logged by a quick start (a refused one stays one line).
    while not conn.poll(every_s):
        log.info(
            "starting: still opening %s (%.0f s so far); health answers NOT_SERVING on port %d",
            what,
            time.monotonic() - started,
            port,
        )
    server.stop(0).wait()
    conn.send(("stopped", port))


class StartingServer:
    """`async with StartingServer(settings) as starting:` open the stores inside; the
    port is `starting.port` (the one bound, when `listen` asked for any free port)."""

    def __init__(
        self,
        settings: Settings,
        what: str = "the stores",
        progress_every_s: float = PROGRESS_EVERY_S,
    ) -> None:
        self._settings = settings
        self._what = what
        self._every = progress_every_s
        self._conn: Connection | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        self.port = 0

    async def __aenter__(self) -> StartingServer:
        import asyncio

        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        process = context.Process(
            target=_serve_health,
            args=(self._settings, self._what, self._every, theirs),
            name="memoryd-starting",
            daemon=True,
        )
        process.start()
        theirs.close()
        self._conn, self._process = ours, process
        try:
            kind, value = await asyncio.to_thread(ours.recv)
        except EOFError:
            kind, value = "refused", "the start-up health process exited"
        if kind != "port":
            await self._stop()
            raise StartupRefused(str(value))
        self.port = int(value)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stop()

    async def _stop(self) -> None:
        import asyncio

        conn, process = self._conn, self._process
        self._conn = self._process = None
        if conn is None or process is None:
            return
        try:
            conn.send("stop")
            # The port is free once the child says so (its server stopped).
            await asyncio.to_thread(_until_stopped, conn)
        except (BrokenPipeError, EOFError, OSError):
            pass
        finally:
            conn.close()
            await asyncio.to_thread(process.join, 10)
            if process.is_alive():
                process.kill()

    def listen_for_server(self) -> str:
        """The address the real server should bind: the same port (pinned when `listen`
        asked for any free one, so that clients told this port keep it)."""
        listen = self._settings.listen
        host, _, port = listen.rpartition(":")
        if listen.startswith(("unix:", "unix-abstract:")) or port != "0":
            return listen
        return f"{host}:{self.port}"


def _until_stopped(conn: Connection) -> None:
    while True:
        message = conn.recv()
        if isinstance(message, tuple) and message[0] == "stopped":
            return
