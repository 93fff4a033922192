"""Bounded write load for fault tests: a few concurrent clients adding working entries,
conversation messages and long-term memories, remembering what was acknowledged.

A refused write (UNAVAILABLE while a store is down) is fine and counted; any other status
is a defect and kept in `unexpected`. Each client stops by itself after `max_ops`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

import grpc

from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc

# Under the per-task (100 keys) and per-session (100 messages) limits, so nothing
# acknowledged is evicted or trimmed by design.
_PER_SCOPE = 80


@dataclass
class Acked:
    """What the server acknowledged, to be found again after the fault."""

    working: dict[tuple[str, str], str] = field(default_factory=dict)  # (task, key) -> content
    messages: dict[str, str] = field(default_factory=dict)  # id -> session
    long_term: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.working) + len(self.messages) + len(self.long_term)


class WriteLoad:
    def __init__(
        self,
        stub: memory_pb2_grpc.MemoryServiceAsyncStub,
        user_id: str,
        *,
        clients: int = 4,
        max_ops: int = 400,
        hot: bool = True,
        timeout_s: float = 30.0,
    ) -> None:
        self._stub = stub
        self._user = user_id
        self._clients = clients
        self._max_ops = max_ops
        self._hot = hot
        self._timeout = timeout_s
        self.acked = Acked()
        self.refused: Counter[grpc.StatusCode] = Counter()
        self.unexpected: list[str] = []
        self._stop = asyncio.Event()
        self._changed = asyncio.Condition()  # notified after every answer
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._client(n)) for n in range(self._clients)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    def _done(self) -> bool:
        return all(t.done() for t in self._tasks)

    async def acked_at_least(self, n: int, timeout_s: float = 120.0) -> None:
        """Wait until `n` writes in all have been acknowledged (or every client is done)."""
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: self.acked.total >= n or self._done())

    async def refused_at_least(self, n: int, timeout_s: float = 60.0) -> None:
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: sum(self.refused.values()) >= n or self._done())

    async def _client(self, n: int) -> None:
        ops = ("working", "message", "long_term") if self._hot else ("message", "long_term")
        for i in range(self._max_ops):
            if self._stop.is_set():
                return
            op = ops[i % len(ops)]
            batch = i // (_PER_SCOPE * len(ops))
            task, session = f"t{n}-{batch}", f"s{n}-{batch}"
            sc = pb.Scope(user_id=self._user, task_id=task, session_id=session)
            text = f"client {n} write {i}: note about topic {n * 1000 + i}"
            try:
                if op == "working":
                    key = f"k{i}"
                    request = pb.AddRequest(scope=sc, tier=pb.TIER_WORKING, key=key, content=text)
                    await self._stub.Add(request, timeout=self._timeout)
                    self.acked.working[(task, key)] = text
                elif op == "message":
                    request = pb.AddRequest(scope=sc, tier=pb.TIER_SHORT_TERM, content=text)
                    reply = await self._stub.Add(request, timeout=self._timeout)
                    self.acked.messages[reply.memory_id] = session
                else:
                    user = pb.Scope(user_id=self._user)
                    request = pb.AddRequest(scope=user, tier=pb.TIER_LONG_TERM, content=text)
                    reply = await self._stub.Add(request, timeout=self._timeout)
                    self.acked.long_term.append(reply.memory_id)
            except grpc.aio.AioRpcError as err:
                if err.code() == grpc.StatusCode.UNAVAILABLE:
                    self.refused[err.code()] += 1
                    await asyncio.sleep(0.02)
                else:
                    self.unexpected.append(f"{op}: {err.code().name}: {err.details()}")
            async with self._changed:
                self._changed.notify_all()
        async with self._changed:
            self._changed.notify_all()  # this client is done


async def missing_long_term(
    stub: memory_pb2_grpc.MemoryServiceAsyncStub, user_id: str, ids: list[str]
) -> list[str]:
    """The ids among `ids` the user's long-term memory does not hold."""
    missing: list[str] = []
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        reply = await stub.Get(
            pb.GetRequest(scope=pb.Scope(user_id=user_id), tier=pb.TIER_LONG_TERM, ids=chunk)
        )
        missing += list(reply.missing)
    return missing
