"""While `memoryd serve` opens its stores (seconds on a large vector store), its port
answers health: not ready (NOT_SERVING) but alive (liveness SERVING), with a log line
saying so and how long the opening has taken so far, even while the opening process holds
its event loop (the embedded engine keeps the GIL while it loads); then the server takes
the port."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memoryd.settings import MetricsSettings, Settings
from memoryd.transport.health import LIVENESS_NAME, SERVICE_NAME
from memoryd.transport.starting import StartingServer
from tests.support.redis_server import free_port

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def settings(tmp_path: Path, listen: str) -> Settings:
    return Settings.explicit(
        listen=listen, data_dir=tmp_path, metrics=MetricsSettings(listen="127.0.0.1:0")
    )


async def status(port: int, service: str) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=10
        )
        return int(reply.status)


async def test_while_the_stores_open_the_port_is_alive_but_not_ready(tmp_path: Path) -> None:
    port = free_port()
    async with StartingServer(settings(tmp_path, f"127.0.0.1:{port}")) as opening:
        assert opening.port == port
        assert await status(port, "") == NOT_SERVING
        assert await status(port, SERVICE_NAME) == NOT_SERVING
        assert await status(port, LIVENESS_NAME) == SERVING
    assert opening.listen_for_server() == f"127.0.0.1:{port}"


async def test_health_answers_while_the_opening_process_holds_its_event_loop(
    tmp_path: Path,
) -> None:
    answered = threading.Event()
    statuses: list[int] = []

    def ask(port: int) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=30
            )
        statuses.append(int(reply.status))
        answered.set()

    async with StartingServer(settings(tmp_path, "127.0.0.1:0")) as opening:
        asker = threading.Thread(target=ask, args=(opening.port,))
        asker.start()
        # The loop is held here, as a store's load holds it: the answer must come anyway
        # (the bound is against hanging, not a timing assertion).
        answered.wait(30)
        asker.join()
    assert statuses == [NOT_SERVING]


async def test_any_free_port_is_kept_for_the_server(tmp_path: Path) -> None:
    async with StartingServer(settings(tmp_path, "127.0.0.1:0")) as opening:
        assert opening.port > 0
    assert opening.listen_for_server() == f"127.0.0.1:{opening.port}"


async def test_a_long_opening_logs_its_progress(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    err = ""
    async with StartingServer(
        settings(tmp_path, "127.0.0.1:0"), what="the vector store", progress_every_s=0.01
    ):
        for _ in range(1000):  # a bound against hanging, not a timing assertion
            err += capfd.readouterr().err
            if "still opening the vector store" in err:
                break
            await asyncio.sleep(0.01)
    assert "starting: still opening the vector store (" in err
    assert "health answers NOT_SERVING on port" in err


async def test_the_port_is_free_for_the_server_once_the_stores_are_open(tmp_path: Path) -> None:
    async with StartingServer(settings(tmp_path, "127.0.0.1:0")) as opening:
        pass
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    assert server.add_insecure_port(opening.listen_for_server()) == opening.port
    await server.start()
    await server.stop(0)
