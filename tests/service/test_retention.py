"""Retention (RT-005): long-term memories past their retention move to the cold archive,
by Prune ARCHIVE_OLDER_THAN and by the maintenance run; archived memories leave search,
sit in their month's archive partition, come back only in an Export that asks for them,
and are erased with the user."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from memoryd.cli.main import main
from memoryd.core.lifecycle.maintenance import MaintenanceLoop
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.clock import MovableClock
from tests.support.rpc import bad_request_fields, rpc_error, scope

LT = pb.TIER_LONG_TERM
DAY = 86_400.0
START = datetime(2024, 1, 15, 9, tzinfo=UTC).timestamp()
OLD = ["User enjoys skiing in the Alps", "User is allergic to peanuts"]
NEW = "User moved to Lisbon"
LONG = "User keeps a travel diary. " * 80  # over 1 KB: stored compressed


async def remember(s: RunningServer, user: str, content: str, **fields: Any) -> str:
    reply = await s.stub.Add(pb.AddRequest(scope=scope(user), tier=LT, content=content, **fields))
    return reply.memory_id


async def seed(s: RunningServer, clock: MovableClock, user: str) -> dict[str, str]:
    """Two memories (and a long one) created on START, one 400 days later; the clock is
    left at START + 400 days."""
    ids = {c: await remember(s, user, c, metadata={"topic": "life"}) for c in OLD}
    ids[LONG] = await remember(s, user, LONG, kind=pb.KIND_NOTE, importance=0.9)
    clock.advance(400 * DAY)
    ids[NEW] = await remember(s, user, NEW)
    return ids


async def found(s: RunningServer, user: str, query: str = "what about the user") -> set[str]:
    reply = await s.stub.Retrieve(
        pb.RetrieveRequest(scope=scope(user), tiers=[LT], query=query, min_score=0.0, top_k=50)
    )
    return {i.content for i in reply.items}


async def listed(s: RunningServer, user: str) -> set[str]:
    reply = await s.stub.Retrieve(pb.RetrieveRequest(scope=scope(user), tiers=[LT], top_k=50))
    return {i.content for i in reply.items}


async def archive_older_than(
    s: RunningServer, user: str, days: int, dry_run: bool = False
) -> pb.PruneResponse:
    return await s.stub.Prune(
        pb.PruneRequest(
            scope=scope(user),
            tiers=[LT],
            strategy=pb.PRUNE_STRATEGY_ARCHIVE_OLDER_THAN,
            older_than_days=days,
            dry_run=dry_run,
        )
    )


async def export(
    s: RunningServer, user: str, include_archived: bool, tiers: Iterable[pb.Tier.ValueType] = (LT,)
) -> tuple[pb.ExportHeader, list[pb.MemoryItem], pb.ExportTrailer]:
    header, items, trailer = pb.ExportHeader(), [], pb.ExportTrailer()
    request = pb.ExportRequest(
        scope=scope(user), tiers=list(tiers), include_archived=include_archived
    )
    async for reply in s.stub.Export(request):
        kind = reply.WhichOneof("payload")
        if kind == "header":
            header = reply.header
        elif kind == "item":
            items.append(reply.item)
        else:
            trailer = reply.trailer
    return header, items, trailer


def archive_partition(data_dir: Path, user: str, month: str) -> list[dict[str, Any]]:
    path = data_dir / "archive" / "default" / user / "long_term" / f"{month}.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture
def clock() -> MovableClock:
    return MovableClock(START)


async def test_prune_archives_memories_older_than_the_days_given(
    start_server: ServerFactory, clock: MovableClock, user_id: str, tmp_path: Path
) -> None:
    s = await start_server(clock=clock)
    ids = await seed(s, clock, user_id)

    reply = await archive_older_than(s, user_id, 365)

    assert reply.archived_count == 3 and reply.deleted_count == 0 and not reply.dry_run
    assert [(c.tier, c.count) for c in reply.per_tier] == [(LT, 3)]
    assert await found(s, user_id, "skiing allergies diary") == {NEW}
    assert await listed(s, user_id) == {NEW}
    got = await s.stub.Get(pb.GetRequest(scope=scope(user_id), tier=LT, ids=[ids[OLD[0]]]))
    assert list(got.missing) == [ids[OLD[0]]]
    # The archive partition of their month holds them whole, content decompressed.
    archived = {r["id"]: r for r in archive_partition(tmp_path / "data", user_id, "2024-01")}
    assert set(archived) == {ids[c] for c in [*OLD, LONG]}
    assert archived[ids[LONG]]["content"] == LONG
    assert archived[ids[LONG]]["kind"] == "note" and archived[ids[LONG]][
        "importance"
    ] == pytest.approx(0.9)
    assert archived[ids[OLD[0]]]["metadata"] == {"topic": "life"}
    assert archived[ids[OLD[0]]]["created_at"] == START
    # Nothing is left to archive.
    assert (await archive_older_than(s, user_id, 365)).archived_count == 0


async def test_only_memories_past_the_cutoff_are_archived(
    start_server: ServerFactory, clock: MovableClock, user_id: str
) -> None:
    s = await start_server(clock=clock)
    await seed(s, clock, user_id)
    assert (await archive_older_than(s, user_id, 401)).archived_count == 0
    assert (await archive_older_than(s, user_id, 399)).archived_count == 3
    assert await listed(s, user_id) == {NEW}


async def test_dry_run_counts_and_changes_nothing(
    start_server: ServerFactory, clock: MovableClock, user_id: str, tmp_path: Path
) -> None:
    s = await start_server(clock=clock)
    await seed(s, clock, user_id)
    reply = await archive_older_than(s, user_id, 365, dry_run=True)
    assert reply.dry_run and reply.archived_count == 3 and reply.deleted_count == 0
    assert await listed(s, user_id) == {*OLD, LONG, NEW}
    assert not (tmp_path / "data" / "archive" / "default" / user_id).exists()


async def test_export_streams_archived_memories_only_when_asked(
    start_server: ServerFactory, clock: MovableClock, user_id: str
) -> None:
    s = await start_server(clock=clock)
    ids = await seed(s, clock, user_id)
    await archive_older_than(s, user_id, 365)

    header, items, trailer = await export(s, user_id, include_archived=False)
    assert [i.content for i in items] == [NEW] and not items[0].archived
    assert header.total == 1 and trailer.item_count == 1

    header, items, trailer = await export(s, user_id, include_archived=True)
    by_id = {i.id: i for i in items}
    assert set(by_id) == set(ids.values())
    assert header.total == 4 and trailer.item_count == 4
    assert [c.count for c in header.counts if c.tier == LT] == [4]
    assert not by_id[ids[NEW]].archived
    old = by_id[ids[LONG]]
    assert old.archived and old.content == LONG and old.kind == pb.KIND_NOTE
    assert old.importance == pytest.approx(0.9)
    assert old.created_at.ToSeconds() == int(START)
    assert by_id[ids[OLD[1]]].metadata["topic"] == "life"
    # Tiers without an archive add nothing.
    _, items, _ = await export(s, user_id, include_archived=True, tiers=[pb.TIER_PERSONA])
    assert items == []


async def test_maintenance_archives_past_retention_and_purges_dead_memories(
    start_server: ServerFactory, clock: MovableClock, user_id: str, tmp_path: Path
) -> None:
    s = await start_server(clock=clock)
    other = f"{user_id}-other"
    ids = await seed(s, clock, user_id)
    await remember(s, other, "Other user likes tea")  # created 400 days after START
    gone = await remember(s, user_id, "User once rented a boat")
    await s.stub.Delete(pb.DeleteRequest(scope=scope(user_id), tier=LT, ids=[gone]))

    report = await s.app.maintenance.run_once()

    assert report.users == 2 and report.archived == 3 and report.purged == 1
    assert await listed(s, user_id) == {NEW}
    assert await listed(s, other) == {"Other user likes tea"}
    archived = archive_partition(tmp_path / "data", user_id, "2024-01")
    assert {r["id"] for r in archived} == {ids[c] for c in [*OLD, LONG]}
    _, items, _ = await export(s, user_id, include_archived=True)
    assert gone not in {i.id for i in items}  # purged, not archived
    # A year on, the rest follows.
    clock.advance(366 * DAY)
    report = await s.app.maintenance.run_once()
    assert report.archived == 2 and report.purged == 0
    assert await listed(s, user_id) == set() and await listed(s, other) == set()


async def test_retention_follows_the_settings(
    start_server: ServerFactory, clock: MovableClock, user_id: str
) -> None:
    s = await start_server(clock=clock, retention={"long_term_archive_after_days": 500})
    await seed(s, clock, user_id)
    assert (await s.app.maintenance.run_once()).archived == 0
    clock.advance(101 * DAY)
    assert (await s.app.maintenance.run_once()).archived == 3


async def test_erasing_the_user_reaches_the_archive(
    start_server: ServerFactory, clock: MovableClock, user_id: str, tmp_path: Path
) -> None:
    s = await start_server(clock=clock)
    await seed(s, clock, user_id)
    await archive_older_than(s, user_id, 365)
    erase = pb.PruneRequest(scope=scope(user_id), tiers=[LT], strategy=pb.PRUNE_STRATEGY_ALL)

    dry = await s.stub.Prune(pb.PruneRequest(**{**_fields(erase), "dry_run": True}))
    assert dry.deleted_count == 4
    assert len((await export(s, user_id, include_archived=True))[1]) == 4

    reply = await s.stub.Prune(erase)
    assert reply.deleted_count == 4  # one live, three archived
    _, items, trailer = await export(s, user_id, include_archived=True)
    assert items == [] and trailer.item_count == 0
    assert not (tmp_path / "data" / "archive" / "default" / user_id / "long_term").exists()


def _fields(request: pb.PruneRequest) -> dict[str, Any]:
    return {f.name: v for f, v in request.ListFields()}


@pytest.mark.parametrize("days", [0, -5])
async def test_bad_older_than_days_is_invalid_argument(
    start_server: ServerFactory, clock: MovableClock, user_id: str, days: int
) -> None:
    s = await start_server(clock=clock)
    await seed(s, clock, user_id)
    err = await rpc_error(archive_older_than(s, user_id, days))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["older_than_days"]
    assert await listed(s, user_id) == {*OLD, LONG, NEW}


async def test_maintenance_loop_runs_every_interval_until_stopped() -> None:
    ticks: asyncio.Queue[float] = asyncio.Queue()
    runs: list[int] = []
    ran = asyncio.Event()

    async def sleep(seconds: float) -> None:
        await ticks.put(seconds)
        if len(runs) >= 2:
            await asyncio.Event().wait()  # parked after the second run until stopped

    async def run() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise RuntimeError("a failed run does not stop the loop")
        ran.set()

    loop = MaintenanceLoop(run, 3600.0, sleep=sleep)
    loop.start()
    await ran.wait()
    assert runs == [0, 1]
    assert [await ticks.get() for _ in range(3)] == [3600.0] * 3
    await loop.stop()


async def test_an_interval_of_zero_disables_the_loop() -> None:
    calls: list[float] = []

    async def sleep(seconds: float) -> None:
        calls.append(seconds)

    async def run() -> None:
        calls.append(-1)

    loop = MaintenanceLoop(run, 0.0, sleep=sleep)
    loop.start()
    await asyncio.sleep(0)
    await loop.stop()
    assert calls == []


async def test_memoryd_maintain_runs_once_on_the_data_directory(
    start_server: ServerFactory,
    user_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Written two years ago (the CLI uses the real clock).
    clock = MovableClock()
    clock.advance(-730 * DAY)
    s = await start_server(clock=clock)
    old = await remember(s, user_id, "User enjoys skiing in the Alps")
    clock.advance(730 * DAY)
    await remember(s, user_id, NEW)
    await s.server.stop(grace_s=0)  # the CLI runs with the server stopped

    monkeypatch.setenv("MEMORYD_DATA_DIR", str(tmp_path / "data"))
    assert await asyncio.to_thread(main, ["maintain"]) == 0

    out = capsys.readouterr().out
    assert "1 users" in out and "1 memories archived" in out
    month = datetime.fromtimestamp(clock.now - 730 * DAY, tz=UTC).strftime("%Y-%m")
    assert [r["id"] for r in archive_partition(tmp_path / "data", user_id, month)] == [old]
