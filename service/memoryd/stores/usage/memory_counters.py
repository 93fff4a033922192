"""Usage counters in the server's own memory: for one process without Redis.

Nothing is written to disk: after a restart each counter is missing and is rebuilt from
the vector store on its first use (the store is the record; the counter is its summary).
Every step runs without awaiting, so it is atomic on the event loop, as the Redis scripts
are on Redis.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from memoryd.stores.usage.port import (
    Correction,
    Counted,
    CounterKey,
    Outcome,
    Reservation,
    Snapshot,
)

# Removed ids remembered per counter (the oldest are forgotten first).
_GONE_KEPT = 65_536


@dataclass
class _State:
    count: int = 0
    size: int = 0
    pending_count: int = 0
    pending_size: int = 0
    version: int = 1
    corrected_at: int = 0


@dataclass
class _Counter:
    state: _State | None = None
    gone: OrderedDict[str, None] = field(default_factory=OrderedDict)


class InProcessCounters:
    def __init__(self) -> None:
        self._counters: dict[CounterKey, _Counter] = {}

    def _state(self, key: CounterKey) -> _State | None:
        counter = self._counters.get(key)
        return counter.state if counter else None

    async def get(self, key: CounterKey) -> Counted | None:
        s = self._state(key)
        return Counted(s.count, s.size) if s else None

    async def init(self, key: CounterKey, held: Counted) -> bool:
        counter = self._counters.setdefault(key, _Counter())
        if counter.state is not None:
            return False
        counter.state = _State(count=held.count, size=held.bytes)
        return True

    async def reserve(
        self, key: CounterKey, count: int, size: int, max_count: int, max_bytes: int
    ) -> Reservation:
        s = self._state(key)
        if s is None:
            return Reservation(Outcome.MISSING, Counted(0, 0))
        held = Counted(s.count, s.size)
        if max_count and s.count + count > max_count:
            return Reservation(Outcome.COUNT_FULL, held)
        if max_bytes and s.size + size > max_bytes:
            return Reservation(Outcome.BYTES_FULL, held)
        s.count += count
        s.size += size
        s.pending_count += count
        s.pending_size += size
        s.version += 1
        return Reservation(Outcome.GRANTED, held)

    async def settle(self, key: CounterKey, count: int, size: int, ids: Sequence[str]) -> None:
        counter = self._counters.get(key)
        if counter is None:
            return
        for i in ids:
            counter.gone.pop(i, None)
        if (s := counter.state) is not None:
            s.pending_count -= count
            s.pending_size -= size
            s.version += 1

    async def release(self, key: CounterKey, count: int, size: int) -> None:
        if (s := self._state(key)) is not None:
            s.count -= count
            s.size -= size
            s.pending_count -= count
            s.pending_size -= size
            s.version += 1

    async def forget(self, key: CounterKey, removed: Mapping[str, int]) -> Counted:
        counter = self._counters.setdefault(key, _Counter())
        count = size = 0
        for i, n in removed.items():
            if i in counter.gone:
                continue
            counter.gone[i] = None
            count += 1
            size += n
        while len(counter.gone) > _GONE_KEPT:
            counter.gone.popitem(last=False)
        if (s := counter.state) is not None and count:
            s.count -= count
            s.size -= size
            s.version += 1
        return Counted(count, size)

    async def snapshot(self, key: CounterKey) -> Snapshot | None:
        s = self._state(key)
        if s is None:
            return None
        return Snapshot(
            Counted(s.count, s.size), Counted(s.pending_count, s.pending_size), s.version
        )

    async def correct(self, key: CounterKey, version: int, held: Counted) -> Correction | None:
        counter = self._counters.setdefault(key, _Counter())
        s = counter.state
        if s is None:
            counter.state = _State(count=held.count, size=held.bytes, corrected_at=1)
            return Correction(Counted(0, 0), held)
        if s.version != version:
            return None
        before = Counted(s.count, s.size)
        if s.corrected_at == s.version:  # nothing moved since the last correction
            s.pending_count = s.pending_size = 0
        s.count = held.count + s.pending_count
        s.size = held.bytes + s.pending_size
        s.corrected_at = s.version
        return Correction(before, Counted(s.count, s.size))

    async def drop(self, key: CounterKey) -> None:
        if (counter := self._counters.get(key)) is not None:
            counter.state = None

    async def close(self) -> None:
        return None
