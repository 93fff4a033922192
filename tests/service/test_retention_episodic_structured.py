"""Retention of the episodic and structured tiers (issue 5, RT-005): structured documents
older than 180 days and episodes older than 90 move to the cold archive (gzip JSONL,
partitioned tenant/user/tier/month) and leave search, by the server's maintenance run and
by `memoryd maintain`; younger ones stay. An episode past its 90-day TTL is archived,
not lost; one that asked to expire sooner is purged."""

from __future__ import annotations

import asyncio
import gzip
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memoryd.cli.main import main
from memoryd.core.models import Tier
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.clock import MovableClock
from tests.support.rpc import scope

EP, SD = pb.TIER_EPISODIC, pb.TIER_STRUCTURED
DAY = 86_400
START = datetime(2024, 1, 15, 9, tzinfo=UTC).timestamp()

OLD_DOC = {"type": "invoice", "number": "INV-001", "status": "paid"}
NEW_DOC = {"type": "invoice", "number": "INV-002", "status": "due"}
OLD_EPISODE = pb.Episode(
    task="Book a hotel in Lisbon",
    steps=[pb.EpisodeStep(action="search hotels near Alfama", observation="5 found")],
    outcome="Booked Hotel Alfama",
    success=True,
)
NEW_EPISODE = pb.Episode(
    task="Book a hotel in Porto",
    steps=[pb.EpisodeStep(action="search hotels near Ribeira", observation="4 found")],
    outcome="Booked Hotel Ribeira",
    success=True,
)
BRIEF_EPISODE = pb.Episode(task="Check the weather in Lisbon", steps=[pb.EpisodeStep(action="x")])


async def add_doc(s: RunningServer, user: str, document: dict[str, str]) -> str:
    request = pb.AddRequest(scope=scope(user), tier=SD, document_json=json.dumps(document))
    return (await s.stub.Add(request)).memory_id


async def add_episode(s: RunningServer, user: str, episode: pb.Episode, **fields: Any) -> str:
    request = pb.AddRequest(
        scope=scope(user, agent_id="travel"), tier=EP, episode=episode, **fields
    )
    return (await s.stub.Add(request)).memory_id


async def found(s: RunningServer, user: str, tier: pb.Tier.ValueType, query: str = "") -> set[str]:
    """Ids Retrieve returns: listed with no query, else searched."""
    reply = await s.stub.Retrieve(
        pb.RetrieveRequest(scope=scope(user), tiers=[tier], query=query, top_k=50, min_score=0.0)
    )
    return {i.id for i in reply.items}


def partition(data_dir: Path, user: str, tier: str, created: float) -> list[dict[str, Any]]:
    month = datetime.fromtimestamp(created, tz=UTC).strftime("%Y-%m")
    path = data_dir / "archive" / "default" / user / tier / f"{month}.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


async def seed(s: RunningServer, clock: MovableClock, user: str) -> dict[str, str]:
    """Documents created on START and START + 2 days; episodes on START + 90 days (and one
    asked to expire 5 days later) and START + 92 days. The clock is left at START + 181
    days: the documents are 181 and 179 days old, the episodes 91 and 89."""
    ids = {"old_doc": await add_doc(s, user, OLD_DOC)}
    clock.advance(2 * DAY)
    ids["new_doc"] = await add_doc(s, user, NEW_DOC)
    clock.advance(88 * DAY)
    ids["old_episode"] = await add_episode(s, user, OLD_EPISODE)
    soon = pb.AddRequest().expires_at
    soon.FromSeconds(int(clock() + 5 * DAY))
    ids["brief_episode"] = await add_episode(s, user, BRIEF_EPISODE, expires_at=soon)
    clock.advance(2 * DAY)
    ids["new_episode"] = await add_episode(s, user, NEW_EPISODE)
    clock.advance(89 * DAY)
    return ids


@pytest.fixture
def clock() -> MovableClock:
    return MovableClock(START)


async def test_maintenance_archives_documents_past_180_days_and_episodes_past_90(
    start_server: ServerFactory, clock: MovableClock, user_id: str, tmp_path: Path
) -> None:
    s = await start_server(clock=clock)
    ids = await seed(s, clock, user_id)
    assert await found(s, user_id, SD) == {ids["old_doc"], ids["new_doc"]}
    assert await found(s, user_id, EP) == {ids["new_episode"]}  # the old one's TTL lapsed

    report = await s.app.maintenance.run_once()

    assert report.users == 1 and report.archived == 2 and report.purged == 1
    assert report.archived_by_tier == {Tier.STRUCTURED: 1, Tier.EPISODIC: 1}
    assert report.purged_by_tier == {Tier.EPISODIC: 1}  # the episode that asked to go
    # The old ones left search; the young ones stay.
    assert await found(s, user_id, SD) == {ids["new_doc"]}
    assert await found(s, user_id, SD, "invoice INV-001 paid") == {ids["new_doc"]}
    assert await found(s, user_id, EP) == {ids["new_episode"]}
    assert await found(s, user_id, EP, "hotel in Lisbon") == {ids["new_episode"]}
    got = await s.stub.Get(pb.GetRequest(scope=scope(user_id), tier=SD, ids=[ids["old_doc"]]))
    assert list(got.missing) == [ids["old_doc"]]
    # Each sits whole in its tier's partition of the month it was created in.
    data = tmp_path / "data"
    [doc] = partition(data, user_id, "structured", START)
    assert doc["id"] == ids["old_doc"] and json.loads(doc["document_json"]) == OLD_DOC
    [episode] = partition(data, user_id, "episodic", START + 90 * DAY)
    assert episode["id"] == ids["old_episode"] and episode["episode"]["task"] == OLD_EPISODE.task
    assert episode["agent_id"] == "travel"
    # They come back, structure included, in an Export that asks for archived items.
    request = pb.ExportRequest(scope=scope(user_id), tiers=[EP, SD], include_archived=True)
    items = {
        r.item.id: r.item async for r in s.stub.Export(request) if r.WhichOneof("payload") == "item"
    }
    assert set(items) == {ids["old_doc"], ids["new_doc"], ids["old_episode"], ids["new_episode"]}
    assert items[ids["old_episode"]].archived and items[ids["old_episode"]].episode == OLD_EPISODE
    assert items[ids["old_doc"]].archived and json.loads(items[ids["old_doc"]].document_json) == (
        OLD_DOC
    )
    # Two days on, the young ones follow.
    clock.advance(2 * DAY)
    again = await s.app.maintenance.run_once()
    assert again.archived == 2 and await found(s, user_id, SD) == set()
    assert await found(s, user_id, EP) == set()


async def test_prune_archive_older_than_on_each_tier(
    start_server: ServerFactory, clock: MovableClock, user_id: str
) -> None:
    s = await start_server(clock=clock)
    ids = await seed(s, clock, user_id)

    async def archive(
        tier: pb.Tier.ValueType, days: int, dry_run: bool = False
    ) -> pb.PruneResponse:
        request = pb.PruneRequest(
            scope=scope(user_id),
            tiers=[tier],
            strategy=pb.PRUNE_STRATEGY_ARCHIVE_OLDER_THAN,
            older_than_days=days,
            dry_run=dry_run,
        )
        return await s.stub.Prune(request)

    assert (await archive(SD, 180, dry_run=True)).archived_count == 1
    assert (await archive(SD, 182)).archived_count == 0
    assert (await archive(SD, 180)).archived_count == 1
    assert await found(s, user_id, SD) == {ids["new_doc"]}
    # The old episode (TTL lapsed) is archived; the one that asked to expire is not.
    assert (await archive(EP, 90, dry_run=True)).archived_count == 1
    assert (await archive(EP, 90)).archived_count == 1
    assert (await archive(EP, 90)).archived_count == 0


async def test_retention_follows_the_settings(
    start_server: ServerFactory, clock: MovableClock, user_id: str
) -> None:
    s = await start_server(
        clock=clock,
        retention={"structured_archive_after_days": 200, "episodic_archive_after_days": 100},
        episodic={"ttl_days": 120},
    )
    ids = await seed(s, clock, user_id)
    report = await s.app.maintenance.run_once()
    assert report.archived == 0 and report.purged == 1  # only the brief episode went
    assert await found(s, user_id, EP) == {ids["old_episode"], ids["new_episode"]}
    clock.advance(20 * DAY)  # documents 201 and 199 days old, episodes 111 and 109
    report = await s.app.maintenance.run_once()
    assert report.archived_by_tier == {Tier.STRUCTURED: 1, Tier.EPISODIC: 2}


async def test_erasing_the_user_reaches_archived_episodes_and_documents(
    start_server: ServerFactory, clock: MovableClock, user_id: str, tmp_path: Path
) -> None:
    s = await start_server(clock=clock)
    await seed(s, clock, user_id)
    await s.app.maintenance.run_once()
    user_dir = tmp_path / "data" / "archive" / "default" / user_id
    assert (user_dir / "structured").exists() and (user_dir / "episodic").exists()

    erased = await s.stub.Prune(
        pb.PruneRequest(scope=scope(user_id), strategy=pb.PRUNE_STRATEGY_ALL)
    )

    per_tier = {c.tier: c.count for c in erased.per_tier}
    assert (per_tier[SD], per_tier[EP]) == (2, 2)  # one live and one archived of each
    assert not (user_dir / "structured").exists() and not (user_dir / "episodic").exists()
    request = pb.ExportRequest(scope=scope(user_id), include_archived=True)
    assert [r async for r in s.stub.Export(request) if r.WhichOneof("payload") == "item"] == []


async def test_memoryd_maintain_archives_old_documents_and_episodes_once(
    start_server: ServerFactory,
    user_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The CLI uses the real clock: write the items back in time.
    clock = MovableClock()
    now = clock.now
    clock.now = now - 181 * DAY
    s = await start_server(clock=clock)
    ids = {"old_doc": await add_doc(s, user_id, OLD_DOC)}
    clock.now = now - 179 * DAY
    ids["new_doc"] = await add_doc(s, user_id, NEW_DOC)
    clock.now = now - 91 * DAY
    ids["old_episode"] = await add_episode(s, user_id, OLD_EPISODE)
    clock.now = now - 89 * DAY
    ids["new_episode"] = await add_episode(s, user_id, NEW_EPISODE)
    await s.server.stop(grace_s=0)  # the CLI runs with the server stopped

    monkeypatch.setenv("MEMORYD_DATA_DIR", str(tmp_path / "data"))
    assert await asyncio.to_thread(main, ["maintain"]) == 0

    out = capsys.readouterr().out
    assert "1 users" in out and "2 memories archived" in out
    assert "structured 180" in out and "episodic 90" in out
    data = tmp_path / "data"
    assert [r["id"] for r in partition(data, user_id, "structured", now - 181 * DAY)] == [
        ids["old_doc"]
    ]
    assert [r["id"] for r in partition(data, user_id, "episodic", now - 91 * DAY)] == [
        ids["old_episode"]
    ]
    s = await start_server()  # the real clock again
    assert await found(s, user_id, SD) == {ids["new_doc"]}
    assert await found(s, user_id, EP) == {ids["new_episode"]}
