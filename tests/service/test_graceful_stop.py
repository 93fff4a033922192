"""Graceful stop: SIGTERM turns health NOT_SERVING at once, lets calls already running
finish, flushes the write-behind copy, closes the stores and exits 0."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memoryd.stores.queue.file_queue import FileQueue
from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc
from tests.conftest import ServerFactory
from tests.support.openai_stub import OpenAIStub, start_openai_stub
from tests.support.redis_server import free_port
from tests.support.rpc import FAST_RECONNECT, scope

ROOT = Path(__file__).resolve().parents[2]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def openai_api() -> Iterator[OpenAIStub]:
    stub = start_openai_stub(dim=8)
    yield stub
    stub.stop()


async def test_stopping_flushes_the_queued_conversation_copies(
    start_server: ServerFactory, tmp_path: Path, user_id: str
) -> None:
    s = await start_server(data_dir=tmp_path / "data")
    await s.app.copier.stop()  # nothing is copied in the background from now on
    sc = scope(user_id, session_id="s")
    for text in ["I live in Lisbon", "I have a cat", "I like jazz"]:
        await s.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_SHORT_TERM, content=text))
    queue = FileQueue(tmp_path / "data" / "queue")
    assert await queue.pending() == 3
    await queue.close()

    await s.server.stop()

    reopened = FileQueue(tmp_path / "data" / "queue")
    assert await reopened.pending() == 0  # copied to long-term before the stores closed
    await reopened.close()


def test_sigterm_goes_not_serving_at_once_and_finishes_a_running_call(
    tmp_path: Path, openai_api: OpenAIStub
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "MEMORYD_LISTEN": f"127.0.0.1:{port}",
        "MEMORYD_DATA_DIR": str(tmp_path),
        "MEMORYD_METRICS__LISTEN": "127.0.0.1:0",
        "MEMORYD_GRACE_PERIOD_SECONDS": "30",
        # Embeddings from the stub: a call can be held in flight while it embeds.
        "MEMORYD_EMBEDDER__PROVIDER": "openai",
        "MEMORYD_EMBEDDER__OPENAI_BASE_URL": openai_api.url,
        "MEMORYD_EMBEDDER__OPENAI_API_KEY": "sk-test",
        "MEMORYD_EMBEDDER__OPENAI_DIMENSIONS": "8",
        # This checkout's server and client packages (the CLI imports the client).
        "PYTHONPATH": os.pathsep.join(str(ROOT / d) for d in ("service", "clients/python")),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "serve"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        asyncio.run(_stop_during_a_call(port, proc, openai_api))
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    log = proc.stderr.read() if proc.stderr else ""
    assert "memoryd stopped" in log


async def _stop_during_a_call(port: int, proc: subprocess.Popen[str], api: OpenAIStub) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=FAST_RECONNECT) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for _ in range(2400):  # start-up
            assert proc.poll() is None, "the server exited during start-up"
            try:
                if (await health.Check(health_pb2.HealthCheckRequest())).status == SERVING:
                    break
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.05)
        watch = health.Watch(health_pb2.HealthCheckRequest())
        assert (await watch.read()).status == SERVING

        api.behaviour.delay_s = 1.0  # every embedding now takes a second
        seen = len(api.requests)
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        call = asyncio.ensure_future(
            stub.Add(pb.AddRequest(scope=scope("u1"), tier=pb.TIER_LONG_TERM, content="I like tea"))
        )
        while len(api.requests) == seen:  # noqa: ASYNC110 (the stub runs in a thread)
            await asyncio.sleep(0.01)  # once it asks for an embedding, the call is running
        proc.send_signal(signal.SIGTERM)

        # The watcher hears NOT_SERVING while the call is still held in the embedder.
        assert (await watch.read()).status == NOT_SERVING
        assert not call.done()
        reply = await call
        assert reply.memory_id
