"""Write-behind queue on a Redis stream with a consumer group.

Each replica reads as its own consumer (a stable name, so after a restart it first gets
back what it had taken and not acked); entries a dead replica left pending for long are
claimed by the others.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import ResponseError

from memoryd.stores.queue.port import QueueDown, QueueEntry
from memoryd.stores.redis_clients import (
    DEFAULT_TIMEOUT_S,
    DOWN,
    AsyncClient,
    FirstUse,
    open_async,
    rewrite_persistence,
    run,
)

T = TypeVar("T")
_GROUP = "memoryd"
STREAM = "memoryd:wb:messages"
# On a Redis Cluster the stream is named with a hash tag, so that its slot (and the node
# holding it) is chosen deliberately and any key added beside it later shares the slot.
# One Redis keeps the old name: entries pending at an upgrade stay where they were.
CLUSTER_STREAM = "memoryd:{wb}:messages"

_NO_GROUP = "NOGROUP"
# KEYS: stream. ARGV: group, then entry ids. Acked and deleted in one step, so the stream
# holds exactly what is still to be copied (see `pending`).
_ACK = """
redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 2))
return redis.call('XDEL', KEYS[1], unpack(ARGV, 2))
"""

log = logging.getLogger(__name__)
_FAILURES: tuple[type[BaseException], ...] = (*DOWN, ResponseError)


class _GroupLost(Exception):
    """The stream or its consumer group is gone (see `_grouped`)."""


class RedisStreamQueue:
    def __init__(
        self,
        client: AsyncClient,
        consumer: str,
        stream: str = STREAM,
        claim_idle_ms: int = 60_000,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        """`timeout_s`: the client's command timeout; a blocking read waits less."""
        self._redis = client
        self._longest_block_ms = max(1, int(timeout_s * 500))
        self._first_use = FirstUse(client)
        self._stream = stream
        self._consumer = consumer
        self._claim_idle_ms = claim_idle_ms
        self._group_ready = False
        self._backlog_done = False
        self._owns_client = False
        self._ack = client.register_script(_ACK)

    @classmethod
    def from_url(
        cls,
        url: str,
        consumer: str,
        *,
        cluster: bool = False,
        stream: str = STREAM,
        claim_idle_s: float = 60.0,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> RedisStreamQueue:
        """A queue on its own client, closed with the queue."""
        queue = cls(
            open_async(url, cluster=cluster, timeout_s=timeout_s),
            consumer,
            stream,
            claim_idle_ms=max(1, int(claim_idle_s * 1000)),
            timeout_s=timeout_s,
        )
        queue._owns_client = True
        return queue

    async def _call(self, op: Callable[[], Awaitable[T]], *, retry: bool) -> T:
        """`retry`: see redis_clients.run; every call decides."""
        try:
            await self._first_use()
            return await run(op, retry=retry)
        except DOWN as exc:
            raise QueueDown(f"redis stream {self._stream}: {exc}") from exc
        except ResponseError as exc:
            if _NO_GROUP in str(exc):
                raise _GroupLost from exc
            # READONLY (a replica), MISCONF, OOM, WRONGTYPE...: the queue cannot work now.
            raise QueueDown(f"redis stream {self._stream}: {exc}") from exc

    async def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            # Idempotent: a second create answers BUSYGROUP.
            await run(
                lambda: self._redis.xgroup_create(self._stream, _GROUP, id="0", mkstream=True),
                retry=True,
            )
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise QueueDown(f"redis stream {self._stream}: {exc}") from exc
        except DOWN as exc:
            raise QueueDown(f"redis stream {self._stream}: {exc}") from exc
        self._group_ready = True

    async def _grouped(self, op: Callable[[], Awaitable[T]], *, retry: bool) -> T:
        """Run a command of the consumer group. A Redis that restarted without its data (no
        persistence, a fail-over to a fresh node, FLUSHALL) no longer has the group: it is
        created again, from the start of whatever the stream holds now, and the command
        retried, so the copier resumes without a restart of memoryd."""
        await self._ensure_group()
        try:
            return await self._call(op, retry=retry)
        except _GroupLost:
            log.warning(
                "redis stream %s lost its consumer group (Redis restarted without its data?): "
                "creating it again",
                self._stream,
            )
            self._group_ready = False
            self._backlog_done = False
            await self._ensure_group()
            try:
                return await self._call(op, retry=retry)
            except _GroupLost as exc:
                raise QueueDown(f"redis stream {self._stream}: the group keeps vanishing") from exc

    async def put(self, body: dict[str, Any]) -> str:
        doc = json.dumps(body, separators=(",", ":"))
        # Not idempotent: a replay would queue the copy twice (harmless, the copy is keyed
        # by id, but not sent blindly).
        entry_id = await self._call(
            lambda: self._redis.xadd(self._stream, {"body": doc}), retry=False
        )
        return _text(entry_id)

    async def take(self, max_items: int, wait_s: float) -> list[QueueEntry]:
        if not self._backlog_done:
            # Our own entries taken before a restart and never acked come first.
            own = await self._read("0", max_items, None)
            if own:
                return own
            self._backlog_done = True
        claimed = await self._grouped(
            lambda: self._redis.xautoclaim(
                self._stream, _GROUP, self._consumer, self._claim_idle_ms, "0-0", count=max_items
            ),
            # A replay claims for this consumer what the first attempt claimed.
            retry=True,
        )
        entries = [_entry(i, f) for i, f in claimed[1] if f]
        if entries:
            return entries
        block_ms = min(max(1, int(wait_s * 1000)), self._longest_block_ms)
        return await self._read(">", max_items, block_ms)

    async def _read(self, start: str, count: int, block_ms: int | None) -> list[QueueEntry]:
        reply: list[Any] = await self._grouped(
            lambda: self._redis.xreadgroup(  # type: ignore[arg-type,return-value]
                _GROUP, self._consumer, {self._stream: start}, count=count, block=block_ms
            ),
            # Reading new entries (">") hands them to this consumer: a replay would skip
            # what the first attempt took (until the backlog is read again).
            retry=start != ">",
        )
        entries: list[QueueEntry] = []
        for _, items in reply or []:
            entries += [_entry(i, f) for i, f in items if f]
        return entries

    async def ack(self, ids: list[str]) -> None:
        if ids:
            await self._grouped(
                lambda: self._ack(keys=[self._stream], args=[_GROUP, *ids]), retry=True
            )

    async def release(self, ids: list[str]) -> None:
        # They stay in our pending list: the next take reads that list first again.
        self._backlog_done = False

    async def pending(self) -> int:
        # An acked entry is deleted in the same step (`ack`), so the stream holds exactly
        # the entries not yet copied, taken or not: one read, never between two states
        # (reading "taken" and "not yet taken" apart missed an entry taken in between).
        return int(await self._call(lambda: self._redis.xlen(self._stream), retry=True))

    async def oldest_put_at(self) -> float | None:
        # Acked entries are deleted, so the stream's first entry is the oldest pending one,
        # and a stream id starts with the milliseconds it was added at.
        first = await self._call(lambda: self._redis.xrange(self._stream, count=1), retry=True)
        if not first or first[0][0] is None:
            return None
        return int(_text(first[0][0]).split("-", 1)[0]) / 1000.0

    async def newest_id(self) -> str | None:
        # A stream's ids grow with each XADD; acked entries are deleted (`ack`), so the
        # last entry is the newest pending one.
        last = await self._call(lambda: self._redis.xrevrange(self._stream, count=1), retry=True)
        if not last or last[0][0] is None:
            return None
        return _text(last[0][0])

    async def pending_through(self, mark: str) -> bool:
        # The stream holds exactly the entries not yet acked: is one of them at or before
        # `mark`? (XRANGE compares ids as ids, not as text.)
        first = await self._call(
            lambda: self._redis.xrange(self._stream, min="-", max=mark, count=1), retry=True
        )
        return bool(first)

    async def compact(self) -> None:
        # Acked entries are deleted from the stream already (`ack`); what remains on disk
        # is in Redis's own files. They hold the hot tiers too (one Redis for both), so
        # this rewrites them for those as well.
        try:
            await self._first_use()
            await rewrite_persistence(self._redis)
        except NotImplementedError:
            log.warning(
                "erasure: on a Redis Cluster, rewrite each primary's files yourself "
                "(BGREWRITEAOF; BGSAVE with snapshots)"
            )
        except _FAILURES as exc:
            raise QueueDown(f"redis at the stream {self._stream}: {exc}") from exc

    async def close(self) -> None:
        if self._owns_client:
            self._owns_client = False  # closing twice is harmless
            await self._redis.aclose()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _entry(entry_id: bytes | str, fields: dict[bytes, bytes]) -> QueueEntry:
    return QueueEntry(_text(entry_id), json.loads(fields[b"body"]))
