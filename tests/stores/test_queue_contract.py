"""The write-behind queue contract: the journal file (embedded) and the Redis stream."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from memoryd.stores.queue.file_queue import FileQueue
from memoryd.stores.queue.port import QueueDown, WriteBehindQueue
from memoryd.stores.queue.redis_stream import RedisStreamQueue
from redis_server import RedisServer

Opener = Callable[[], Awaitable[WriteBehindQueue]]


@pytest.fixture(params=["file", "redis"])
async def open_queue(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens the same queue again on each call, as a restarted server would."""
    opened: list[WriteBehindQueue] = []
    clients: list[aioredis.Redis] = []
    stream = f"test:wb:{uuid.uuid4().hex}"

    async def open_() -> WriteBehindQueue:
        queue: WriteBehindQueue
        if request.param == "redis":
            client = aioredis.Redis.from_url(request.getfixturevalue("redis_server").url)
            clients.append(client)
            queue = RedisStreamQueue(client, consumer="replica-1", stream=stream)
        else:
            queue = FileQueue(tmp_path / "queue")
        opened.append(queue)
        return queue

    yield open_
    for queue in opened:
        await queue.close()
    for client in clients:
        await client.aclose()


async def test_entries_come_out_in_order_and_leave_when_acked(open_queue: Opener) -> None:
    queue = await open_queue()
    for n in range(3):
        await queue.put({"n": n})
    assert await queue.pending() == 3
    taken = await queue.take(10, wait_s=0.1)
    assert [e.body for e in taken] == [{"n": 0}, {"n": 1}, {"n": 2}]
    await queue.ack([e.id for e in taken])
    assert await queue.pending() == 0


async def test_take_respects_the_batch_size(open_queue: Opener) -> None:
    queue = await open_queue()
    for n in range(5):
        await queue.put({"n": n})
    assert [e.body["n"] for e in await queue.take(2, wait_s=0.1)] == [0, 1]
    assert [e.body["n"] for e in await queue.take(10, wait_s=0.1)] == [2, 3, 4]


async def test_take_on_an_empty_queue_returns_nothing_after_waiting(open_queue: Opener) -> None:
    queue = await open_queue()
    assert await queue.take(10, wait_s=0.05) == []


async def test_unacked_entries_are_handed_out_again_after_a_restart(open_queue: Opener) -> None:
    queue = await open_queue()
    for n in range(4):
        await queue.put({"n": n})
    first = await queue.take(2, wait_s=0.1)
    await queue.ack([first[0].id])  # n=0 done, n=1 taken but never acked, n=2..3 never taken
    await queue.close()
    reopened = await open_queue()
    seen: list[int] = []
    while batch := await reopened.take(10, wait_s=0.1):
        seen += [e.body["n"] for e in batch]
        await reopened.ack([e.id for e in batch])
    assert sorted(seen) == [1, 2, 3]
    assert await reopened.pending() == 0


async def test_acked_entries_never_come_back(open_queue: Opener) -> None:
    queue = await open_queue()
    await queue.put({"n": 1})
    await queue.ack([e.id for e in await queue.take(10, wait_s=0.1)])
    await queue.close()
    reopened = await open_queue()
    assert await reopened.take(10, wait_s=0.05) == []


async def test_a_redis_that_is_down_is_reported(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path)
    client = aioredis.Redis.from_url(redis.url, socket_connect_timeout=0.5)
    queue = RedisStreamQueue(client, consumer="c", stream="s")
    redis.stop()
    with pytest.raises(QueueDown):
        await queue.put({"n": 1})
    await client.aclose()


async def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    queue = FileQueue(tmp_path)
    await queue.put({"n": 1})
    await queue.close()
    with (tmp_path / "messages.jsonl").open("a") as journal:
        journal.write('{"seq": 2, "bo')  # the process died mid-write: never acknowledged
    reopened = FileQueue(tmp_path)
    await reopened.put({"n": 3})
    await reopened.close()
    again = FileQueue(tmp_path)
    assert [e.body for e in await again.take(10, wait_s=0.05)] == [{"n": 1}, {"n": 3}]
    await again.close()


async def test_released_entries_are_handed_out_again_at_once(open_queue: Opener) -> None:
    """The copy of a batch failed (a store was down): it is retried now, not after a
    restart."""
    queue = await open_queue()
    for n in range(3):
        await queue.put({"n": n})
    failed = await queue.take(2, wait_s=0.1)
    await queue.release([e.id for e in failed])
    seen: list[int] = []
    while batch := await queue.take(10, wait_s=0.1):
        seen += [e.body["n"] for e in batch]
        await queue.ack([e.id for e in batch])
    assert sorted(seen) == [0, 1, 2]
    assert await queue.pending() == 0


@pytest.mark.parametrize("lost", ["flushall", "group_destroyed"])
async def test_a_redis_stream_that_lost_its_group_carries_on(tmp_path: Path, lost: str) -> None:
    """Redis restarted without its data (or FLUSHALL, or a fail-over to a fresh node):
    the consumer group is created again and entries put afterwards are handed out."""
    redis = RedisServer(tmp_path)  # a private one: it is flushed
    client = aioredis.Redis.from_url(redis.url)
    stream = f"test:wb:{uuid.uuid4().hex}"
    queue = RedisStreamQueue(client, consumer="replica-1", stream=stream)
    await queue.put({"n": 0})
    await queue.ack([e.id for e in await queue.take(10, wait_s=0.1)])
    if lost == "flushall":
        await client.flushall()
    else:
        await client.xgroup_destroy(stream, "memoryd")
    await queue.put({"n": 1})
    assert await queue.pending() == 1
    taken = await queue.take(10, wait_s=0.1)
    assert [e.body for e in taken] == [{"n": 1}]
    await queue.ack([e.id for e in taken])
    assert await queue.pending() == 0
    await client.aclose()
    redis.stop()
