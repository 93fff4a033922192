"""`kill -9` of a real `memoryd serve` mid-write, over several rounds on one data
directory (embedded stores: qdrant-edge, the journal queue): every long-term memory the
server acknowledged is there after each restart, and so is the durable copy of every
acknowledged conversation message (replayed from the journal).

The servers embed through the OpenAI-compatible test stub: what is killed is the stores'
write path, and each start is then seconds, not the model's load."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memoryd.v1 import memory_pb2_grpc
from tests.support.openai_stub import OpenAIStub, running_openai_stub
from tests.support.redis_server import free_port
from tests.support.rpc import FAST_RECONNECT
from tests.support.write_load import WriteLoad, missing_long_term

SERVICE_DIR = Path(__file__).resolve().parents[2] / "service"
# More for a longer run: MEMORYD_CRASH_ROUNDS=20 (`make fuzz` sets it).
ROUNDS = int(os.environ.get("MEMORYD_CRASH_ROUNDS", "3"))


@asynccontextmanager
async def serving(
    data: Path, log: Path, embeddings: OpenAIStub
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """A `memoryd serve` subprocess on `data`, once it answers SERVING."""
    target = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "PYTHONPATH": str(SERVICE_DIR),
        "MEMORYD_DATA_DIR": str(data),
        "MEMORYD_LISTEN": target,
        "MEMORYD_METRICS__LISTEN": "127.0.0.1:0",  # not the default port another test holds
        "MEMORYD_WRITE_BEHIND__RETRY_SECONDS": "0.1",
        "MEMORYD_EMBEDDER__PROVIDER": "openai",
        "MEMORYD_EMBEDDER__OPENAI_BASE_URL": embeddings.url,
        "MEMORYD_EMBEDDER__OPENAI_API_KEY": "sk-test",
        "MEMORYD_EMBEDDER__OPENAI_DIMENSIONS": "8",
    }
    env.pop("MEMORYD_REDIS_URL", None)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memoryd", "serve", env=env, stderr=out
        )
    finally:
        os.close(out)
    try:
        async with grpc.aio.insecure_channel(target, options=FAST_RECONNECT) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            request = health_pb2.HealthCheckRequest()
            async with asyncio.timeout(120):
                while True:
                    assert proc.returncode is None, f"memoryd exited; see {log}"
                    try:
                        reply = await health.Check(request, timeout=1)
                        if reply.status == health_pb2.HealthCheckResponse.SERVING:
                            break
                    except grpc.aio.AioRpcError:
                        pass
                    await asyncio.sleep(0.1)
        yield proc, target
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        await proc.wait()


async def all_copied(
    stub: memory_pb2_grpc.MemoryServiceAsyncStub, user: str, ids: list[str]
) -> None:
    """The copier replays the journal in the background after a start: wait for it."""
    async with asyncio.timeout(120):
        while await missing_long_term(stub, user, ids):  # noqa: ASYNC110 (the server's copier)
            await asyncio.sleep(0.2)


@pytest.fixture
def embeddings() -> Iterator[OpenAIStub]:
    with running_openai_stub(dim=8) as stub:
        yield stub


@pytest.mark.slow  # several server starts and kills (CI still runs it)
async def test_kill_9_mid_write_loses_no_acknowledged_long_term_write(
    tmp_path: Path, user_id: str, embeddings: OpenAIStub
) -> None:
    data, log = tmp_path / "data", tmp_path / "memoryd.log"
    acked_memories: list[str] = []
    acked_messages: list[str] = []
    for _ in range(ROUNDS):
        async with (
            serving(data, log, embeddings) as (proc, target),
            grpc.aio.insecure_channel(target) as channel,
        ):
            stub = memory_pb2_grpc.MemoryServiceStub(channel)
            assert await missing_long_term(stub, user_id, acked_memories) == []
            await all_copied(stub, user_id, acked_messages)

            load = WriteLoad(stub, user_id, clients=4, max_ops=5_000, hot=False)
            load.start()
            await load.acked_at_least(60)
            proc.send_signal(signal.SIGKILL)  # mid-write: calls are in flight
            await proc.wait()
            await load.stop()
            assert load.unexpected == []
            acked_memories += load.acked.long_term
            acked_messages += list(load.acked.messages)

    async with (
        serving(data, log, embeddings) as (_, target),
        grpc.aio.insecure_channel(target) as channel,
    ):
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        assert len(acked_memories) >= ROUNDS * 20 and len(acked_messages) >= ROUNDS * 20
        assert await missing_long_term(stub, user_id, acked_memories) == []
        await all_copied(stub, user_id, acked_messages)
