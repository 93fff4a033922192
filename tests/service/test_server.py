"""The server: health, reflection, restarts, stores going down, graceful stop."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from memoryd.app import build_app
from memoryd.core.startup import StartupRefused
from memoryd.settings import Settings
from memoryd.stores.embeddings.port import Embedder
from memoryd.transport.health import LIVENESS_NAME
from memoryd.transport.server import MemorydServer
from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc
from tests.conftest import RunningServer, ServerFactory
from tests.support.redis_server import RedisServer, free_port
from tests.support.rpc import rpc_error, scope

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
ROOT = Path(__file__).resolve().parents[2]


async def health_of(channel: grpc.aio.Channel, service: str = "") -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=service))
    return int(reply.status)


async def test_health_is_serving_overall_per_service_and_per_store(memoryd: RunningServer) -> None:
    for service in ("", "memoryd.v1.MemoryService", "memoryd.hot_store"):
        assert await health_of(memoryd.channel, service) == SERVING


async def test_reflection_lists_the_service_when_enabled(start_server: ServerFactory) -> None:
    s = await start_server(reflection=True)
    stub = reflection_pb2_grpc.ServerReflectionStub(s.channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    async for reply in stub.ServerReflectionInfo(iter([request])):
        names = {svc.name for svc in reply.list_services_response.service}
        assert {"memoryd.v1.MemoryService", "grpc.health.v1.Health"} <= names
        break


async def test_reflection_is_off_by_default(memoryd: RunningServer) -> None:
    # Asked as a unary call: its request goes out with the call itself. On a stream the
    # server's UNIMPLEMENTED can beat the client's first message, which then fails as
    # INTERNAL on the client's side.
    info = memoryd.channel.unary_unary(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await info(reflection_pb2.ServerReflectionRequest(list_services=""))
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_redis_data_survives_a_server_restart(
    start_server: ServerFactory, redis_server: RedisServer, user_id: str
) -> None:
    sc = scope(user_id, agent_id="a", task_id="t", session_id="s")
    first = await start_server(redis_url=redis_server.url)
    await first.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_WORKING, key="k", content="kept"))
    await first.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_SHORT_TERM, content="said"))
    await first.server.stop(grace_s=0)
    second = await start_server(redis_url=redis_server.url)
    reply = await second.stub.Retrieve(pb.RetrieveRequest(scope=sc))
    assert [i.content for i in reply.items] == ["kept", "said"]


async def test_a_redis_that_is_down_gives_unavailable_and_not_serving(
    start_server: ServerFactory, tmp_path: Path, user_id: str
) -> None:
    redis = RedisServer(tmp_path)
    s = await start_server(redis_url=redis.url)
    redis.stop()
    sc = scope(user_id, agent_id="a", task_id="t")
    err = await rpc_error(
        s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_WORKING, key="k", content="v"))
    )
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert "hot store is unavailable" in (err.details() or "")
    await s.server.health.check_now()
    assert await health_of(s.channel, "memoryd.hot_store") == NOT_SERVING
    assert await health_of(s.channel, "memoryd.v1.MemoryService") == NOT_SERVING
    assert await health_of(s.channel, "") == NOT_SERVING
    # Liveness asks only whether the process answers: a store outage must not restart it.
    assert await health_of(s.channel, LIVENESS_NAME) == SERVING


def test_sigterm_turns_not_serving_then_stops_gracefully(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "MEMORYD_LISTEN": f"127.0.0.1:{port}",
        "MEMORYD_DATA_DIR": str(tmp_path),
        "MEMORYD_METRICS__LISTEN": "127.0.0.1:0",
    }
    # This checkout's server and client packages (the CLI imports the client).
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(str(root / d) for d in ("service", "clients/python"))
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)  # the server must silence the bar itself
    proc = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "serve"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert _wait_serving(port, proc), "server did not become SERVING"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    log = proc.stderr.read() if proc.stderr else ""
    assert "signal received" in log and "memoryd stopped" in log
    assert "\r" not in log and "it/s" not in log  # no progress bar in a server's log


def _wait_serving(port: int, proc: subprocess.Popen[str]) -> bool:
    """Poll health until SERVING; start-up loads the embedding model, which takes a while."""

    async def poll() -> bool:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            for _ in range(2400):
                if proc.poll() is not None:
                    return False
                try:
                    if await health_of(channel) == SERVING:
                        return True
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(0.05)
        return False

    return asyncio.run(poll())


def test_the_stub_module_exposes_the_service() -> None:
    assert hasattr(memory_pb2_grpc, "MemoryServiceStub")


async def every_call_lands_on(s: RunningServer, port: int, user_id: str, calls: int) -> None:
    """Each call on a connection of its own (where a second listener would take half)."""
    sc = scope(user_id, agent_id="a", task_id="t")
    for n in range(calls):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            add = pb.AddRequest(scope=sc, tier=pb.TIER_WORKING, key=f"k{n}", content=f"v{n}")
            await memory_pb2_grpc.MemoryServiceStub(channel).Add(add)
    listed = await s.stub.Retrieve(pb.RetrieveRequest(scope=sc, tiers=[pb.TIER_WORKING]))
    assert listed.total_count == calls


async def test_a_second_server_on_a_busy_port_is_refused(
    start_server: ServerFactory, tmp_path: Path, embedder: Embedder, user_id: str
) -> None:
    """grpc binds with SO_REUSEPORT unless told not to: the second server would start and
    take half of the new connections."""
    first = await start_server()
    settings = Settings.explicit(
        listen=f"127.0.0.1:{first.port}",
        data_dir=tmp_path / "second",
        metrics={"listen": "127.0.0.1:0"},
    )
    second = MemorydServer(settings, await build_app(settings, embedder=embedder))
    try:
        with pytest.raises(StartupRefused) as refused:
            await second.start()
    finally:
        await second.stop(grace_s=0)
    assert str(refused.value).startswith(f"port {first.port} is in use (MEMORYD_LISTEN=")
    await every_call_lands_on(first, first.port, user_id, calls=12)


async def test_memoryd_serve_on_a_busy_port_exits_2_in_one_line(
    start_server: ServerFactory, tmp_path: Path, user_id: str
) -> None:
    first = await start_server()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("MEMORYD_")}
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / d) for d in ("service", "clients/python"))
    env["MEMORYD_LISTEN"] = f"127.0.0.1:{first.port}"
    env["MEMORYD_DATA_DIR"] = str(tmp_path / "second")  # another data directory
    env["MEMORYD_METRICS__LISTEN"] = "127.0.0.1:0"
    second = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "memoryd",
        "serve",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(second.communicate(), timeout=120)
    lines = stderr.decode().splitlines()
    assert second.returncode == 2
    assert len(lines) == 1, lines
    assert f"port {first.port} is in use (MEMORYD_LISTEN=127.0.0.1:{first.port})" in lines[0]
    await every_call_lands_on(first, first.port, user_id, calls=12)
