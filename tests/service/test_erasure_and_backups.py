"""GDPR erasure (RT-005 "right to be forgotten") and backups: Prune ALL naming no tier
removes a user from every tier, the cold archive, pending conversation copies and the
backups, and writes one content-free audit line; `memoryd backup` writes one export file
per user and day (30 days kept), `memoryd restore` brings the items back by id."""

from __future__ import annotations

import asyncio
import gzip
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from memoryd.cli.backup import BackupCorrupt, backup, restore
from memoryd.cli.main import main
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.clock import MovableClock
from tests.support.redis_server import RedisServer
from tests.support.rpc import scope
from tests.unit.unit_kit import LIVENESS_S

WK, ST, LT, PE = pb.TIER_WORKING, pb.TIER_SHORT_TERM, pb.TIER_LONG_TERM, pb.TIER_PERSONA
EP, SD, EN = pb.TIER_EPISODIC, pb.TIER_STRUCTURED, pb.TIER_ENTITY
DAY = 86_400.0
START = datetime(2024, 1, 15, 9, tzinfo=UTC).timestamp()
SECRET = ["Victim enjoys skiing in the Alps", "Victim is allergic to peanuts"]


@pytest.fixture
def clock() -> MovableClock:
    return MovableClock(START)


@pytest.fixture(params=["in_process", "redis"])
async def server(
    request: pytest.FixtureRequest, start_server: ServerFactory, clock: MovableClock
) -> RunningServer:
    if request.param == "redis":
        url = request.getfixturevalue("redis_server").url
        return await start_server(clock=clock, redis_url=url)
    return await start_server(clock=clock)


async def add(
    s: RunningServer, sc: pb.Scope, tier: pb.Tier.ValueType, content: str, **kw: Any
) -> str:
    return (await s.stub.Add(pb.AddRequest(scope=sc, tier=tier, content=content, **kw))).memory_id


async def fill(s: RunningServer, clock: MovableClock, user: str, text: str = "") -> None:
    """Every kind of place a user's memories live: an archived memory, live, soft-deleted
    and expired long-term memories, a persona fact, an episode, a JSON document, a relation
    (and its two entities), two tasks, two sessions (and their durable long-term copies).
    `text`, when given, is in every one of them."""
    who = f"{user} {text}" if text else user
    await add(s, scope(user), LT, f"{who} archived: {SECRET[0]}")
    clock.advance(400 * DAY)
    await s.stub.Prune(
        pb.PruneRequest(
            scope=scope(user),
            tiers=[LT],
            strategy=pb.PRUNE_STRATEGY_ARCHIVE_OLDER_THAN,
            older_than_days=365,
        )
    )
    await add(s, scope(user), LT, f"{who}: {SECRET[1]}")
    gone = await add(s, scope(user), LT, f"{who} soft-deleted memory")
    await s.stub.Delete(pb.DeleteRequest(scope=scope(user), tier=LT, ids=[gone]))
    expiring = pb.AddRequest(scope=scope(user), tier=LT, content=f"{who} expiring memory")
    expiring.expires_at.FromSeconds(int(clock() + 60))
    await s.stub.Add(expiring)
    await add(s, scope(user), PE, f"{who} lives in Lisbon", key="city")
    await add(s, scope(user, agent_id="a"), EP, "", episode=episode(who))
    await add(s, scope(user), SD, "", document_json=json.dumps({"owner": who, "pin": "1234"}))
    await add(s, scope(user), EN, "", relation=relation(who))
    for task in ["t1", "t2"]:
        await add(s, scope(user, agent_id="a", task_id=task), WK, f"{who} {task}", key="k")
    for session in ["s1", "s2"]:
        await add(s, scope(user, session_id=session), ST, f"{who} said hi in {session}")
    await s.app.copier.drain()
    clock.advance(120)  # the expiring memory is now expired


def relation(user: str) -> pb.Relation:
    return pb.Relation(subject=f"{user} Smith", predicate="banks_with", object="Acme Bank")


def episode(user: str) -> pb.Episode:
    return pb.Episode(task=f"{user} booked a trip", steps=[pb.EpisodeStep(action="search")])


async def everything(s: RunningServer, user: str) -> list[pb.MemoryItem]:
    request = pb.ExportRequest(scope=scope(user), include_archived=True)
    return [r.item async for r in s.stub.Export(request) if r.WhichOneof("payload") == "item"]


async def retrieved(
    s: RunningServer, sc: pb.Scope, tier: pb.Tier.ValueType, query: str = ""
) -> list[str]:
    reply = await s.stub.Retrieve(
        pb.RetrieveRequest(scope=sc, tiers=[tier], query=query, top_k=50, min_score=0.0)
    )
    return [i.content for i in reply.items]


async def erase(s: RunningServer, user: str, dry_run: bool = False) -> pb.PruneResponse:
    return await s.stub.Prune(
        pb.PruneRequest(scope=scope(user), strategy=pb.PRUNE_STRATEGY_ALL, dry_run=dry_run)
    )


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []


async def test_erasure_removes_the_user_everywhere_and_leaves_others_alone(
    server: RunningServer, clock: MovableClock, user_id: str, tmp_path: Path
) -> None:
    s, data = server, tmp_path / "data"
    other = f"{user_id}-other"
    await fill(s, clock, user_id)
    await fill(s, clock, other)
    await backup(s.app.engine, s.app.memory, s.app.backups, clock(), 30)
    others_before = sorted(i.id for i in await everything(s, other))
    day = datetime.fromtimestamp(clock(), tz=UTC).strftime("%Y-%m-%d")
    backups = data / "backups" / day / "default"
    assert (backups / f"{user_id}.jsonl.gz").exists()

    # Dry run: counts only.
    dry = await erase(s, user_id, dry_run=True)
    # long-term: archived + live + soft-deleted + expired + 2 message copies.
    expected = {WK: 2, ST: 2, LT: 6, PE: 1, EP: 1, EN: 3, SD: 1}
    assert dry.dry_run and {c.tier: c.count for c in dry.per_tier} == expected
    assert len(await everything(s, user_id)) == 16
    assert not (data / "audit" / "erasures.jsonl").exists()

    reply = await erase(s, user_id)

    assert not reply.dry_run and {c.tier: c.count for c in reply.per_tier} == expected
    assert reply.deleted_count == 16
    assert await everything(s, user_id) == []
    for task in ["t1", "t2"]:
        assert await retrieved(s, scope(user_id, agent_id="a", task_id=task), WK) == []
    for session in ["s1", "s2"]:
        assert await retrieved(s, scope(user_id, session_id=session), ST) == []
    assert await retrieved(s, scope(user_id), LT) == []
    assert await retrieved(s, scope(user_id), LT, "skiing peanuts allergy") == []
    assert await retrieved(s, scope(user_id), PE) == []
    assert await retrieved(s, scope(user_id), EP, "booked a trip") == []
    assert await retrieved(s, scope(user_id), SD) == []
    assert await retrieved(s, scope(user_id), EN, "Acme Bank") == []
    assert files_under(data / "archive" / "default" / user_id) == []
    assert not (backups / f"{user_id}.jsonl.gz").exists()
    # The other user keeps everything, archive and backup included.
    assert sorted(i.id for i in await everything(s, other)) == others_before
    assert files_under(data / "archive" / "default" / other) != []
    assert (backups / f"{other}.jsonl.gz").exists()

    audit = (data / "audit" / "erasures.jsonl").read_text(encoding="utf-8")
    [line] = [json.loads(x) for x in audit.splitlines()]
    assert line["tenant"] == "default" and line["user_id"] == user_id
    assert line["requested_by"] and line["time"].startswith(day)
    assert line["per_tier"] == {
        "working": 2,
        "short_term": 2,
        "long_term": 6,
        "persona": 1,
        "episodic": 1,
        "entity": 3,
        "structured": 1,
    }
    assert line["backup_files"] == 1
    secrets = [*SECRET, "Lisbon", "said hi", "soft-deleted", "expiring", "trip", "1234", "Acme"]
    for content in secrets:
        assert content not in audit


async def test_a_message_queued_before_erasure_is_not_copied_back_after_it(
    start_server: ServerFactory, clock: MovableClock, user_id: str
) -> None:
    s = await start_server(clock=clock)
    await s.app.copier.stop()  # the copy stays queued
    await add(s, scope(user_id, session_id="s1"), ST, "Victim's queued message")

    await erase(s, user_id)
    await s.app.copier.drain()  # whatever was still queued is copied now

    assert await retrieved(s, scope(user_id), LT) == []
    assert await everything(s, user_id) == []


async def test_an_erasure_waits_only_for_the_copies_queued_before_it(
    server: RunningServer, user_id: str
) -> None:
    """Other users' Adds keep the queue from ever being empty: the erasure waits for the
    victim's message queued before it began (copied, then erased with the rest), not for
    an empty queue (it waited until its 30 s ran out, then answered UNAVAILABLE)."""
    s = server
    await s.app.copier.stop()  # only the erasure copies from here on
    await add(s, scope(user_id, session_id="s1"), ST, "Victim's queued message")
    queue = s.app.copier._queue
    take, others = queue.take, [f"other-{uuid.uuid4().hex}" for _ in range(2)]
    added = 0

    async def while_others_add(max_items: int, wait_s: float) -> list[Any]:
        nonlocal added
        taken = await take(max_items, wait_s)
        if taken:  # another user's message arrives while a batch is being copied
            added += 1
            await add(s, scope(others[added % 2], session_id="s"), ST, f"message {added}")
        return taken

    queue.take = while_others_add  # type: ignore[method-assign]
    try:
        await asyncio.wait_for(erase(s, user_id), LIVENESS_S)
        assert added and await queue.pending()  # it did not wait for them
    finally:
        queue.take = take  # type: ignore[method-assign]
    await s.app.copier.drain()  # the others' copies, and anything the erasure left

    assert await retrieved(s, scope(user_id), LT) == []
    assert await everything(s, user_id) == []
    assert sum([len(await retrieved(s, scope(o), LT)) for o in others]) == added


async def test_an_erasure_waits_for_a_copy_held_in_flight_when_it_began(
    server: RunningServer, user_id: str
) -> None:
    """The victim's copy was taken (by another replica, say) and not yet acked when the
    erasure began: the erasure waits for it, so it cannot land afterwards."""
    s = server
    await s.app.copier.stop()
    await add(s, scope(user_id, session_id="s1"), ST, "Victim's message in flight")
    queue = s.app.copier._queue
    held = await queue.take(10, wait_s=0.1)
    assert len(held) == 1
    pending_through, waiting = queue.pending_through, asyncio.Event()

    async def noting(mark: str) -> bool:
        still = await pending_through(mark)
        if still:
            waiting.set()
        return still

    queue.pending_through = noting  # type: ignore[method-assign]
    erasing = asyncio.ensure_future(erase(s, user_id))
    await asyncio.wait_for(waiting.wait(), LIVENESS_S)
    assert not erasing.done()
    await queue.release([e.id for e in held])  # its holder failed: copied again, now
    await asyncio.wait_for(erasing, LIVENESS_S)
    await s.app.copier.drain()

    assert await retrieved(s, scope(user_id), LT) == []
    assert await everything(s, user_id) == []


# Where the erased user's text stays after an erasure, because the engine offers no way
# to rewrite it while serving (docs/operations.md, "Erasure", says for how long): the
# embedded vector store's write-ahead log, and the payload pages of its segments (a
# deleted point's bytes stay until the page is reused or `memoryd reindex` rebuilds it).
ENGINE_KEEPS = ("vectors/memories/wal/", "/payload_storage/")


def files_holding(root: Path, text: str) -> list[str]:
    """Every file under `root` whose bytes (gzip files: decompressed) contain `text`."""
    needle = text.encode()
    found = []
    for path in files_under(root):
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        if needle in data:
            found.append(path.relative_to(root).as_posix())
    return found


async def redis_files_written(url: str) -> None:
    """Until Redis has replaced its append-only files and its snapshot (the erasure only
    starts that)."""
    busy = ["aof_rewrite_in_progress", "aof_rewrite_scheduled", "rdb_bgsave_in_progress"]
    client = aioredis.Redis.from_url(url)
    try:
        async with asyncio.timeout(60):
            while True:
                info = await client.info("persistence")
                if not any(info[field] for field in busy):
                    return
                await asyncio.sleep(0.05)
    finally:
        await client.aclose()


@pytest.mark.parametrize("hot", ["in_process", "redis_with_aof_and_snapshots"])
async def test_after_erasure_no_file_holds_the_users_text_but_what_the_engine_keeps(
    start_server: ServerFactory, clock: MovableClock, user_id: str, tmp_path: Path, hot: str
) -> None:
    """Byte for byte, under the data directory and Redis's: every tier, a message whose
    durable copy is still queued, the cold archive, a backup."""
    redis = RedisServer(tmp_path / "redis", appendonly=True) if hot != "in_process" else None
    try:
        extra = {} if redis is None else {"redis_url": redis.url}
        s = await start_server(clock=clock, **extra)
        data = tmp_path / "data"
        # Nothing in common with the user id: a compressing store would keep only a
        # reference to a repeated part.
        text = f"Quixotic{uuid.uuid4().hex}"
        await fill(s, clock, user_id, text)
        await fill(s, clock, f"{user_id}-other", "someone else")
        await backup(s.app.engine, s.app.memory, s.app.backups, clock(), 30)
        await s.app.copier.stop()  # the next message's durable copy stays queued
        await add(s, scope(user_id, session_id="s3"), ST, f"{text} queued message")
        await s.stub.Add(pb.AddRequest(scope=scope(user_id), tier=LT, content=f"{text} last"))
        # As a server that ran a while: the engine's segments hold the text too.
        await asyncio.to_thread(s.app.vectors.flush)
        assert files_holding(data, text) != []
        if redis is not None:
            client = aioredis.Redis.from_url(redis.url)
            await client.config_set("save", "3600 1")
            await client.bgsave()
            await client.aclose()
            await redis_files_written(redis.url)
            assert "dump.rdb" in files_holding(tmp_path / "redis", text)

        await erase(s, user_id)

        if redis is not None:
            await redis_files_written(redis.url)
            assert files_holding(tmp_path / "redis", text) == []
        left = files_holding(data, text)
        assert [f for f in left if not any(k in f for k in ENGINE_KEEPS)] == []
    finally:
        if redis is not None:
            redis.stop()


def backup_lines(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


async def test_backup_then_restore_brings_erased_memories_back_with_their_ids(
    start_server: ServerFactory, clock: MovableClock, user_id: str, tmp_path: Path
) -> None:
    s = await start_server(clock=clock)
    await add(s, scope(user_id), LT, "User prefers window seats", metadata={"src": "chat"})
    gone = await add(s, scope(user_id), LT, "User is vegetarian")
    await s.stub.Delete(pb.DeleteRequest(scope=scope(user_id), tier=LT, ids=[gone]))
    await add(s, scope(user_id), PE, "Ana", key="name")
    await add(s, scope(user_id, agent_id="a"), EP, "", episode=episode(user_id))
    await add(s, scope(user_id), SD, "", document_json='{"order": "A-1", "total": 42}')
    await add(s, scope(user_id), EN, "", relation=relation(user_id))
    before = {i.id: i for i in await everything(s, user_id)}

    report = await backup(s.app.engine, s.app.memory, s.app.backups, clock(), 30)

    assert report.users == 1 and report.items == 8
    path = tmp_path / "data" / "backups" / "2024-01-15" / "default" / f"{user_id}.jsonl.gz"
    lines = backup_lines(path)
    assert lines[0]["memorydBackup"]["userId"] == user_id
    assert "header" in lines[1] and "trailer" in lines[-1]
    assert int(lines[-1]["trailer"]["itemCount"]) == 8 and lines[-1]["trailer"]["checksumSha256"]
    assert lines[-1]["trailer"]["checksumFormat"] == "item-jcs-v1"
    assert {x["item"]["id"] for x in lines[2:-1]} == set(before)

    for tier in [LT, PE, EP, SD, EN]:  # an ordinary prune of each tier, not an erasure
        await s.stub.Prune(
            pb.PruneRequest(scope=scope(user_id), tiers=[tier], strategy=pb.PRUNE_STRATEGY_ALL)
        )
    assert await everything(s, user_id) == []

    restored = await restore(s.app.engine, s.app.backups, user_id=user_id)

    assert (restored.day, restored.users, restored.imported) == ("2024-01-15", 1, 8)
    after = {i.id: i for i in await everything(s, user_id)}
    assert set(after) == set(before)
    for item_id, item in before.items():
        got = after[item_id]
        assert got == item  # content, episode, document, metadata, times, flags
    again = await restore(s.app.engine, s.app.backups, day="2024-01-15")
    assert (again.imported, again.skipped) == (0, 8)


def rewrite_backup(path: Path, lines: list[dict[str, Any]]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)


async def backed_up_then_pruned(
    s: RunningServer, clock: MovableClock, user_id: str, tmp_path: Path
) -> tuple[Path, dict[str, pb.MemoryItem]]:
    """A backup of a long-term memory and a persona fact, both then pruned."""
    await add(s, scope(user_id), LT, "User prefers window seats", metadata={"src": "chat"})
    await add(s, scope(user_id), PE, "Ana", key="name")
    before = {i.id: i for i in await everything(s, user_id)}
    await backup(s.app.engine, s.app.memory, s.app.backups, clock(), 30)
    for tier in [LT, PE]:
        await s.stub.Prune(
            pb.PruneRequest(scope=scope(user_id), tiers=[tier], strategy=pb.PRUNE_STRATEGY_ALL)
        )
    path = tmp_path / "data" / "backups" / "2024-01-15" / "default" / f"{user_id}.jsonl.gz"
    return path, before


async def test_a_damaged_backup_is_refused_and_nothing_is_restored(
    start_server: ServerFactory, clock: MovableClock, user_id: str, tmp_path: Path
) -> None:
    s = await start_server(clock=clock)
    path, _ = await backed_up_then_pruned(s, clock, user_id, tmp_path)
    lines = backup_lines(path)
    lines[2]["item"]["content"] = "User prefers aisle seats"
    rewrite_backup(path, lines)
    with pytest.raises(BackupCorrupt, match=r"trailer\.checksum_sha256"):
        await restore(s.app.engine, s.app.backups, user_id=user_id)
    assert await everything(s, user_id) == []


async def test_backup_days_older_than_the_retention_are_deleted(
    start_server: ServerFactory, clock: MovableClock, user_id: str, tmp_path: Path
) -> None:
    s = await start_server(clock=clock)
    await add(s, scope(user_id), LT, "User prefers window seats")
    days = []
    for _ in range(3):  # 2024-01-15, then 20 and 40 days later
        await backup(s.app.engine, s.app.memory, s.app.backups, clock(), 30)
        days.append(datetime.fromtimestamp(clock(), tz=UTC).strftime("%Y-%m-%d"))
        clock.advance(20 * DAY)
    kept = sorted(p.name for p in (tmp_path / "data" / "backups").iterdir())
    # The last run (day 40) deletes day 0, older than 30 days; day 20 is kept.
    assert kept == days[1:]


async def test_backup_and_restore_commands_from_the_command_line(
    start_server: ServerFactory,
    user_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    s = await start_server()
    memory_id = await add(s, scope(user_id), LT, "User prefers aisle seats")
    await s.server.stop(grace_s=0)
    monkeypatch.setenv("MEMORYD_DATA_DIR", str(tmp_path / "data"))

    assert await asyncio.to_thread(main, ["backup"]) == 0
    assert "backed up 1 of 1 users" in capsys.readouterr().err

    s = await start_server()
    await s.stub.Prune(
        pb.PruneRequest(scope=scope(user_id), tiers=[LT], strategy=pb.PRUNE_STRATEGY_ALL)
    )
    await s.server.stop(grace_s=0)
    assert await asyncio.to_thread(main, ["restore", "--user", user_id]) == 0
    assert "1 memories imported" in capsys.readouterr().err

    s = await start_server()
    got = await s.stub.Get(pb.GetRequest(scope=scope(user_id), tier=LT, ids=[memory_id]))
    assert [i.content for i in got.items] == ["User prefers aisle seats"]
    audit = (tmp_path / "data" / "audit" / "access.jsonl").read_text().splitlines()
    # The Prune ALL of an archived tier is an erasure, audited like the commands.
    assert [json.loads(line)["event"] for line in audit] == ["backup", "admin_operation", "restore"]
