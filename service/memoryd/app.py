"""The composition root: builds stores and the core from settings. Only `main` and tests
call it; every other module receives what it needs as arguments."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from memoryd.core.engine import MemoryEngine
from memoryd.core.short_term import ShortTermTier
from memoryd.core.tier import TierHandler
from memoryd.core.working import WorkingTier
from memoryd.settings import Settings
from memoryd.stores.hot.memory_store import InProcessHotStore
from memoryd.stores.hot.port import HotStore
from memoryd.stores.hot.redis_store import RedisHotStore

Probe = Callable[[], Awaitable[bool]]
Closer = Callable[[], Awaitable[None]]


@dataclass
class App:
    engine: MemoryEngine
    probes: dict[str, Probe] = field(default_factory=dict)
    closers: list[Closer] = field(default_factory=list)

    async def close(self) -> None:
        for close in reversed(self.closers):
            await close()


def build_hot_store(settings: Settings) -> HotStore:
    if settings.redis_url:
        return RedisHotStore(settings.redis_url)
    return InProcessHotStore()


async def build_app(settings: Settings, clock: Callable[[], float] = time.time) -> App:
    hot = build_hot_store(settings)
    tiers: list[TierHandler] = [
        WorkingTier(hot, settings.working, settings.limits, clock),
        ShortTermTier(hot, settings.short_term, clock),
    ]
    engine = MemoryEngine({t.tier: t for t in tiers}, settings.limits)
    return App(engine=engine, probes={"memoryd.hot_store": hot.ping}, closers=[hot.close])
