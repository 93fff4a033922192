"""The write-behind queue contract: every registered adapter (the journal file, the Redis
stream) behaves the same."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest
import redis.asyncio as aioredis

from memoryd.settings import Settings
from memoryd.stores import queue as queues
from memoryd.stores.queue.file_queue import FileQueue
from memoryd.stores.queue.port import QueueDown, WriteBehindQueue
from memoryd.stores.queue.redis_stream import RedisStreamQueue
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer

Opener = Callable[[], Awaitable[WriteBehindQueue]]
T = TypeVar("T")


async def own_redis_database(redis_server: RedisServer) -> str:
    """The URL of an emptied Redis database no other test writes to: the Redis queue's
    stream has a fixed name, so tests sharing one database would see each other's
    entries. Tests run one at a time, so emptying it first is enough."""
    url = redis_server.url.rsplit("/", 1)[0] + "/1"
    client = aioredis.Redis.from_url(url)
    await client.flushdb()
    await client.aclose()
    return url


@pytest.fixture(params=sorted(queues.ADAPTERS))
async def open_queue(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens the same queue again on each call, as a restarted server would."""
    if request.param == "redis_cluster":
        # A cluster has database 0 only: empty all of it instead.
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        cluster.flush()
        settings = Settings(
            data_dir=tmp_path, redis_url=cluster.url, redis_cluster=True, instance_id="replica-1"
        )
    else:
        url = await own_redis_database(request.getfixturevalue("redis_server"))
        settings = Settings(data_dir=tmp_path, redis_url=url, instance_id="replica-1")
    opened: list[WriteBehindQueue] = []

    async def open_() -> WriteBehindQueue:
        opened.append(queues.ADAPTERS[request.param](settings))
        return opened[-1]

    yield open_
    for queue in opened:
        await queue.close()


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


async def test_the_oldest_pending_entry_tells_when_it_was_put(open_queue: Opener) -> None:
    queue = await open_queue()
    assert await queue.oldest_put_at() is None
    before = time.time()
    await queue.put({"n": 1})
    await queue.put({"n": 2})
    after = time.time()
    oldest = await queue.oldest_put_at()
    # Redis stamps ids in whole milliseconds.
    assert oldest is not None and before - 0.001 <= oldest <= after
    taken = await queue.take(1, wait_s=0.1)
    assert await queue.oldest_put_at() == oldest  # taken is not done
    await queue.ack([e.id for e in taken])
    second = await queue.oldest_put_at()
    assert second is not None and oldest <= second <= after
    await queue.close()
    reopened = await open_queue()  # the put time survives a restart
    assert await reopened.oldest_put_at() == second
    await reopened.ack([e.id for e in await reopened.take(10, wait_s=0.1)])
    assert await reopened.oldest_put_at() is None


async def test_a_mark_counts_only_the_entries_put_up_to_it(open_queue: Opener) -> None:
    """What an erasure waits for: the entries put before it began, taken or not, and not
    those other users keep putting meanwhile."""
    queue = await open_queue()
    assert await queue.newest_id() is None
    for n in range(2):
        await queue.put({"n": n})
    mark = await queue.newest_id()
    assert mark is not None
    await queue.put({"n": 2})  # after the mark
    taken = await queue.take(2, wait_s=0.1)
    assert [e.body["n"] for e in taken] == [0, 1]
    assert await queue.pending_through(mark)  # taken is not done
    await queue.ack([taken[0].id])
    assert await queue.pending_through(mark)
    await queue.ack([taken[1].id])
    assert not await queue.pending_through(mark)
    assert await queue.pending() == 1  # n=2 still waits, and is not waited for

    await queue.close()
    reopened = await open_queue()  # a mark outlives a restart; ids go on growing
    assert not await reopened.pending_through(mark)
    later = await reopened.newest_id()
    assert later is not None and await reopened.pending_through(later)
    await reopened.put({"n": 3})
    await reopened.ack([e.id for e in await reopened.take(10, wait_s=0.1)])
    assert await reopened.newest_id() is None
    await reopened.put({"n": 4})
    newest = await reopened.newest_id()
    assert newest is not None and not await reopened.pending_through(later)
    assert await reopened.pending_through(newest)


async def test_a_redis_that_is_down_is_reported(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path)
    client = aioredis.Redis.from_url(redis.url, socket_connect_timeout=0.5)
    queue = RedisStreamQueue(client, consumer="c", stream="s")
    redis.stop()
    with pytest.raises(QueueDown):
        await queue.put({"n": 1})
    await client.aclose()


async def test_the_redis_queue_works_again_after_redis_restarts_empty(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    redis = RedisServer(tmp_path / "a")
    client = aioredis.Redis.from_url(redis.url, socket_connect_timeout=0.5)
    queue = RedisStreamQueue(client, consumer="c", stream="s")
    await queue.put({"n": 1})
    await queue.ack([e.id for e in await queue.take(10, wait_s=0.1)])
    redis.stop()
    redis = RedisServer(tmp_path / "b", port=redis.port)  # no data: the group is gone

    async def soon(op: Callable[[], Awaitable[T]]) -> T:
        """The first calls after the restart may still report the outage, as QueueDown."""
        for _ in range(3):
            try:
                return await op()
            except QueueDown:
                continue
        raise AssertionError("the queue did not recover")

    try:
        await soon(lambda: queue.put({"n": 2}))
        taken = await soon(lambda: queue.take(10, wait_s=0.1))
        assert [e.body for e in taken] == [{"n": 2}]
    finally:
        await client.aclose()
        redis.stop()


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


async def test_compact_keeps_every_pending_entry_taken_or_not(open_queue: Opener) -> None:
    queue = await open_queue()
    for n in range(4):
        await queue.put({"n": n})
    taken = await queue.take(2, wait_s=0.1)
    await queue.ack([taken[0].id])  # n=0 done, n=1 taken, n=2..3 waiting

    await queue.compact()
    await queue.put({"n": 4})  # and the queue goes on after it

    assert await queue.pending() == 4
    await queue.close()
    reopened = await open_queue()
    seen: list[int] = []
    while batch := await reopened.take(10, wait_s=0.1):
        seen += [e.body["n"] for e in batch]
        await reopened.ack([e.id for e in batch])
    assert sorted(seen) == [1, 2, 3, 4]


async def test_the_journal_keeps_no_acked_entry_on_disk(tmp_path: Path) -> None:
    """What an erasure relies on: an acked message's text leaves the journal file, when
    everything is acked and, with other entries still pending, on `compact`."""
    queue = FileQueue(tmp_path)
    journal = tmp_path / "messages.jsonl"
    await queue.put({"text": "first secret"})
    await queue.ack([e.id for e in await queue.take(10, wait_s=0.05)])
    assert journal.read_bytes() == b""

    await queue.put({"text": "second secret"})
    await queue.put({"text": "still pending"})
    [done, _] = await queue.take(10, wait_s=0.05)
    await queue.ack([done.id])
    assert b"second secret" in journal.read_bytes()
    await queue.compact()
    assert b"second secret" not in journal.read_bytes()
    assert b"still pending" in journal.read_bytes()
    await queue.close()
