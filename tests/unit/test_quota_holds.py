"""The one quota rule of the vector tiers (`Ledger.hold`, `Hold`, `Holds`): room reserved
for a write is kept only if the write lands, and every counted tier follows the same rule."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from memoryd.app import App, build_app
from memoryd.core.errors import QuotaExceeded, StoreUnavailable
from memoryd.core.lifecycle.ledger import Holds, Ledger
from memoryd.core.lifecycle.quotas import quota_full
from memoryd.core.models import AddCommand, Entity, Operation, Scope, Tier
from memoryd.settings import Settings
from memoryd.stores.embeddings.port import EmbedderUnavailable
from memoryd.stores.usage.memory_counters import InProcessCounters
from memoryd.stores.usage.port import Counted
from tests.support.clock import MovableClock
from tests.unit.unit_kit import HashEmbedder

ME = Scope(tenant="t1", user_id="alice")


@dataclass(frozen=True)
class _Limits:
    max_count: int
    max_bytes: int = 0
    bytes_full: Callable[[int, int], QuotaExceeded] | None = None

    @property
    def count_full(self) -> Callable[[], QuotaExceeded]:
        return lambda: quota_full("test", "test.max", self.max_count, "full")


async def _nothing(scope: Scope) -> tuple[int, int]:
    return 0, 0


def _ledger(counters: InProcessCounters, counter: str = "") -> Ledger:
    return Ledger(counters, Tier.STRUCTURED, _nothing, counter=counter)


async def test_a_write_that_fails_gives_its_room_back() -> None:
    ledger = _ledger(InProcessCounters())
    hold = await ledger.hold(ME, 1, 10, _Limits(max_count=1))

    async def fails() -> None:
        raise RuntimeError("the store refused the write")

    with pytest.raises(RuntimeError):
        await hold.write(["id-1"], fails)
    assert await ledger.held(ME) == Counted(0, 0)
    # The room is free again: the one item the quota allows fits.
    again = await ledger.hold(ME, 1, 10, _Limits(max_count=1))

    async def lands() -> None:
        return None

    await again.write(["id-2"], lands)
    assert await ledger.held(ME) == Counted(1, 10)


async def test_a_cancelled_write_gives_its_room_back() -> None:
    ledger = _ledger(InProcessCounters())
    hold = await ledger.hold(ME, 2, 0, _Limits(max_count=5))
    forever = asyncio.Event()
    task = asyncio.ensure_future(hold.write(["a", "b"], forever.wait))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await ledger.held(ME) == Counted(0, 0)


async def test_a_refused_hold_releases_the_holds_taken_before_it() -> None:
    counters = InProcessCounters()
    entities, relations = _ledger(counters, "entities"), _ledger(counters, "relations")
    full = await relations.hold(ME, 1, 0, _Limits(max_count=1))
    await full.settle(["r-1"])
    with pytest.raises(QuotaExceeded):
        async with Holds() as holds:
            holds.add(await entities.hold(ME, 2, 0, _Limits(max_count=5)))
            holds.add(await relations.hold(ME, 1, 0, _Limits(max_count=1)))
    assert await entities.held(ME) == Counted(0, 0)
    assert await relations.held(ME) == Counted(1, 0)


async def test_a_full_quota_prunes_once_then_refuses() -> None:
    ledger = _ledger(InProcessCounters())
    first = await ledger.hold(ME, 3, 0, _Limits(max_count=3))
    await first.settle(["a", "b", "c"])
    rounds: list[int] = []

    async def prune_nothing_useful(held: Counted, needed: int) -> int:
        rounds.append(held.count)
        return 1  # says it freed one, but the counter still reads full

    with pytest.raises(QuotaExceeded):
        await ledger.hold(ME, 1, 0, _Limits(max_count=3), prune=prune_nothing_useful)
    assert rounds == [3]


# ---------------------------------------------------------------- through the tiers


class _Failing(HashEmbedder):
    """Embeds, except while `down` (the model is unreachable)."""

    down = False

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.down:
            raise EmbedderUnavailable("model down", embedder=self.name)
        return super().embed(texts)


@pytest.fixture
async def app_and_model(tmp_path: Path, clock: MovableClock) -> AsyncIterator[tuple[App, _Failing]]:
    model = _Failing()
    settings = Settings(
        data_dir=tmp_path / "data",
        structured={"max_documents": 1},
        quotas={"profiles": {"default": {"entity_max_entities": 1}}},
    )
    app = await build_app(settings, clock=clock, embedder=model)
    yield app, model
    await app.close()


_ADDS: dict[Tier, Callable[[str], AddCommand]] = {
    Tier.STRUCTURED: lambda n: AddCommand(ME, Tier.STRUCTURED, "", document_json=f'{{"n": "{n}"}}'),
    Tier.ENTITY: lambda n: AddCommand(ME, Tier.ENTITY, "", entity=Entity(name=f"Thing {n}")),
}


@pytest.mark.parametrize("tier", [Tier.STRUCTURED, Tier.ENTITY])
async def test_counted_tiers_share_one_rule_for_failed_writes_and_auto_prune(
    app_and_model: tuple[App, _Failing], tier: Tier
) -> None:
    app, model = app_and_model
    model.down = True
    with pytest.raises(StoreUnavailable):
        await app.engine.add(_ADDS[tier]("first"))
    model.down = False
    usage = {t.tier: t for t in (await app.engine.usage(ME)).tiers}
    assert usage[tier].count == 0
    # The quota allows one item: the failed write took none of it.
    added = await app.engine.add(_ADDS[tier]("second"))
    assert added.operation is Operation.ADD
    with pytest.raises(QuotaExceeded):
        await app.engine.add(_ADDS[tier]("third"))
    pruned = await app.engine.add(dataclasses.replace(_ADDS[tier]("fourth"), auto_prune=True))
    assert pruned.operation is Operation.ADD_WITH_PRUNE
