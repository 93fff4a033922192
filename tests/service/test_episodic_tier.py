"""Episodic memory over gRPC: an agent records what it tried (task, steps, outcome) and
finds similar episodes again; episodes are per agent (quota 1,000 each), expire after
90 days, and leave and come back whole through Export/Import."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.clock import MovableClock
from tests.support.rpc import bad_request_fields, quota_failure, rpc_error, scope
from tests.support.vector_stores import QDRANT_LOCAL

EP = pb.TIER_EPISODIC
DAY = 86_400

FLIGHT = pb.Episode(
    task="Book a flight from Paris to Rome for next Friday",
    steps=[
        pb.EpisodeStep(action="search_flights(CDG, FCO, friday)", observation="3 options"),
        pb.EpisodeStep(action="pick the cheapest direct flight", observation="AF1404, 89 EUR"),
        pb.EpisodeStep(action="book_flight(AF1404)", observation="confirmation XK3P9"),
    ],
    outcome="Booked AF1404 for 89 EUR",
    success=True,
)
DEBUG = pb.Episode(
    task="Fix the failing unit test in the billing module",
    steps=[
        pb.EpisodeStep(action="run pytest tests/billing", observation="1 failure: rounding"),
        pb.EpisodeStep(action="round invoice totals half-up", observation="all tests pass"),
    ],
    outcome="Test fixed by rounding half-up",
    success=True,
)
REPORT = pb.Episode(
    task="Write the quarterly sales report",
    steps=[pb.EpisodeStep(action="query sales database for Q3")],
    outcome="Report drafted, waiting for figures from finance",
)


@pytest.fixture(params=["edge", "qdrant_client_local"])
async def vec(request: pytest.FixtureRequest, start_server: ServerFactory) -> RunningServer:
    """A server on each vector adapter (the hot store plays no part in this tier)."""
    if request.param == "edge":
        return await start_server()
    return await start_server(**QDRANT_LOCAL)


@pytest.fixture
async def server(start_server: ServerFactory) -> RunningServer:
    return await start_server()


def agent(user: str, name: str = "planner", **kw: str) -> pb.Scope:
    return scope(user, agent_id=name, **kw)


async def record(
    s: RunningServer, sc: pb.Scope, episode: pb.Episode, **fields: Any
) -> pb.AddResponse:
    return await s.stub.Add(pb.AddRequest(scope=sc, tier=EP, episode=episode, **fields))


async def recall(
    s: RunningServer, sc: pb.Scope, query: str = "", **fields: Any
) -> list[pb.MemoryItem]:
    reply = await s.stub.Retrieve(
        pb.RetrieveRequest(scope=sc, tiers=[EP], query=query, top_k=50, **fields)
    )
    return list(reply.items)


async def get(s: RunningServer, user: str, ids: Sequence[str]) -> pb.GetResponse:
    return await s.stub.Get(pb.GetRequest(scope=scope(user), tier=EP, ids=list(ids)))


def steps(n: int) -> list[pb.EpisodeStep]:
    return [pb.EpisodeStep(action=f"step {i}") for i in range(n)]


async def test_a_similar_task_finds_the_episode_with_its_steps_and_outcome(
    vec: RunningServer, user_id: str
) -> None:
    for episode in (FLIGHT, DEBUG, REPORT):
        reply = await record(vec, agent(user_id), episode)
        assert reply.operation == pb.OPERATION_ADD and reply.tier == EP
        assert reply.quota_remaining == 1000 - 1 - [FLIGHT, DEBUG, REPORT].index(episode)

    found = await recall(vec, agent(user_id), "reserve a plane ticket to Rome")

    best = found[0]
    assert best.episode == FLIGHT  # task, every step, outcome, success
    assert (best.tier, best.kind, best.agent_id) == (EP, pb.KIND_EPISODE, "planner")
    assert 0 < best.score <= 1
    # The content is the episode as text: what was embedded and what a prompt shows.
    assert best.content.splitlines() == [
        "Task: Book a flight from Paris to Rome for next Friday",
        "Step 1: search_flights(CDG, FCO, friday)",
        "  Observation: 3 options",
        "Step 2: pick the cheapest direct flight",
        "  Observation: AF1404, 89 EUR",
        "Step 3: book_flight(AF1404)",
        "  Observation: confirmation XK3P9",
        "Outcome (success): Booked AF1404 for 89 EUR",
    ]
    # 90 days to live by default.
    assert best.expires_at.seconds - best.created_at.seconds == 90 * DAY
    debugging = await recall(vec, agent(user_id), "a unit test fails after a rounding change")
    assert debugging[0].episode.task == DEBUG.task


async def test_retrieve_without_a_query_lists_episodes_newest_first(
    start_server: ServerFactory, user_id: str
) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock)
    for episode in (FLIGHT, DEBUG, REPORT):
        await record(s, agent(user_id), episode)
        clock.advance(60)
    listed = await recall(s, agent(user_id))
    assert [i.episode.task for i in listed] == [REPORT.task, DEBUG.task, FLIGHT.task]
    assert all(i.score == 0 for i in listed)


async def test_an_agent_id_narrows_retrieval_to_that_agents_episodes(
    vec: RunningServer, user_id: str
) -> None:
    await record(vec, agent(user_id, "travel"), FLIGHT)
    await record(vec, agent(user_id, "coder"), DEBUG)
    assert [i.episode.task for i in await recall(vec, agent(user_id, "coder"))] == [DEBUG.task]
    everyone = await recall(vec, scope(user_id))  # no agent: every agent's episodes
    assert {i.agent_id for i in everyone} == {"travel", "coder"}
    assert await recall(vec, agent(user_id, "coder"), "book a flight to Rome") == []
    assert await recall(vec, scope(f"{user_id}-b"), "book a flight to Rome") == []


async def test_get_and_delete_by_id(vec: RunningServer, user_id: str) -> None:
    kept = (await record(vec, agent(user_id), DEBUG)).memory_id
    gone = (await record(vec, agent(user_id), FLIGHT, metadata={"trip": "rome"})).memory_id
    got = await get(vec, user_id, [gone, kept])
    assert {i.id: i.episode.task for i in got.items} == {gone: FLIGHT.task, kept: DEBUG.task}
    assert [dict(i.metadata) for i in got.items if i.id == gone] == [{"trip": "rome"}]

    deleted = await vec.stub.Delete(pb.DeleteRequest(scope=scope(user_id), tier=EP, ids=[gone]))

    assert deleted.deleted_count == 1
    assert list((await get(vec, user_id, [gone])).missing) == [gone]
    assert [i.id for i in await recall(vec, agent(user_id), "flight to Rome")] != [gone]
    assert vec.app.vectors.retrieve([gone]) == []  # deleted for good, no tombstone
    other = await vec.stub.Delete(
        pb.DeleteRequest(scope=scope(f"{user_id}-b"), tier=EP, ids=[kept])
    )
    assert other.deleted_count == 0 and (await get(vec, user_id, [kept])).items


def _past() -> Timestamp:
    ts = Timestamp()
    ts.FromSeconds(1_000)
    return ts


BAD_ADDS: list[tuple[str, dict[str, Any], list[str]]] = [
    ("no agent", {"scope": scope("u"), "episode": FLIGHT}, ["scope.agent_id"]),
    ("no episode", {}, ["episode"]),
    ("no task", {"episode": pb.Episode(steps=steps(1))}, ["episode.task"]),
    ("blank task", {"episode": pb.Episode(task="  ", steps=steps(1))}, ["episode.task"]),
    ("no steps", {"episode": pb.Episode(task="t")}, ["episode.steps"]),
    ("51 steps", {"episode": pb.Episode(task="t", steps=steps(51))}, ["episode.steps"]),
    (
        "a step without action",
        {"episode": pb.Episode(task="t", steps=[*steps(1), pb.EpisodeStep(observation="o")])},
        ["episode.steps[1].action"],
    ),
    ("content beside the episode", {"content": "also this"}, ["content"]),
    ("a foreign kind", {"kind": pb.KIND_FACT}, ["kind"]),
    ("an expiry in the past", {"expires_at": _past()}, ["expires_at"]),
    ("a document", {"document_json": '{"a": 1}'}, ["document_json"]),
    ("bad metadata", {"metadata": {"": "x"}}, ["metadata['']"]),
    (
        "everything at once",
        {"scope": scope("u"), "episode": pb.Episode(), "content": "x"},
        ["scope.agent_id", "episode.task", "episode.steps", "content"],
    ),
]


@pytest.mark.parametrize(("case", "fields", "bad"), BAD_ADDS, ids=[c[0] for c in BAD_ADDS])
async def test_a_malformed_episode_is_refused_naming_the_field_and_nothing_is_written(
    server: RunningServer, case: str, fields: dict[str, Any], bad: list[str]
) -> None:
    request: dict[str, Any] = {"scope": agent("u"), "episode": FLIGHT, **fields}
    if case == "no episode":
        del request["episode"]
    err = await rpc_error(server.stub.Add(pb.AddRequest(tier=EP, **request)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == bad
    assert await recall(server, scope("u")) == []


async def test_an_episode_given_to_another_tier_is_refused(
    server: RunningServer, user_id: str
) -> None:
    request = pb.AddRequest(
        scope=agent(user_id), tier=pb.TIER_LONG_TERM, content="note", episode=FLIGHT
    )
    err = await rpc_error(server.stub.Add(request))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["episode"]


async def test_the_step_limit_follows_the_settings(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(episodic={"max_steps": 2})
    err = await rpc_error(record(s, agent(user_id), FLIGHT))  # three steps
    assert bad_request_fields(err) == ["episode.steps"]
    assert "1..2 steps" in (err.details() or "")
    assert (await record(s, agent(user_id), DEBUG)).operation == pb.OPERATION_ADD


async def test_a_full_agent_is_refused_with_the_limit_unless_auto_prune(
    start_server: ServerFactory, user_id: str
) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock, episodic={"max_episodes_per_agent": 3})
    ids = []
    for n in range(3):
        clock.advance(1)
        task = pb.Episode(task=f"task number {n}", steps=steps(1))
        ids.append((await record(s, agent(user_id), task)).memory_id)

    err = await rpc_error(record(s, agent(user_id), REPORT))

    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max: 3 episodes per agent" in (err.details() or "")
    assert "delete old episodes or upgrade" in (err.details() or "")
    assert quota_failure(err).violations[0].subject == f"episodic:{user_id}/planner"
    # The quota is per agent: another agent of the same user still has room.
    assert (await record(s, agent(user_id, "other"), REPORT)).operation == pb.OPERATION_ADD

    clock.advance(1)
    pruned = await record(s, agent(user_id), REPORT, auto_prune=True)

    assert pruned.operation == pb.OPERATION_ADD_WITH_PRUNE and pruned.quota_remaining == 0
    assert list((await get(s, user_id, ids)).missing) == ids[:1]  # 10% of 3: the oldest
    assert len(await recall(s, agent(user_id))) == 3


async def test_an_episode_expires_after_its_ttl(start_server: ServerFactory, user_id: str) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock)
    added = (await record(s, agent(user_id), FLIGHT)).memory_id
    clock.advance(89 * DAY)
    assert [i.id for i in await recall(s, agent(user_id), "flight to Rome")] == [added]
    clock.advance(2 * DAY)
    assert await recall(s, agent(user_id), "flight to Rome") == []
    assert await recall(s, agent(user_id)) == []
    assert list((await get(s, user_id, [added])).missing) == [added]


async def test_an_earlier_expiry_is_kept_and_a_later_one_is_capped_at_the_ttl(
    start_server: ServerFactory, user_id: str
) -> None:
    clock = MovableClock(1_700_000_000.0)
    s = await start_server(clock=clock, episodic={"ttl_days": 30})
    soon, late = Timestamp(), Timestamp()
    soon.FromSeconds(int(clock.now) + 2 * DAY)
    late.FromSeconds(int(clock.now) + 365 * DAY)
    short = (await record(s, agent(user_id), FLIGHT, expires_at=soon)).memory_id
    capped = (await record(s, agent(user_id), DEBUG, expires_at=late)).memory_id
    items = {i.id: i for i in (await get(s, user_id, [short, capped])).items}
    assert items[short].expires_at.seconds == int(clock.now) + 2 * DAY
    assert items[capped].expires_at.seconds == int(clock.now) + 30 * DAY
    clock.advance(3 * DAY)
    assert [i.id for i in await recall(s, agent(user_id))] == [capped]


async def test_prune_strategies(start_server: ServerFactory, user_id: str) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock)
    ids = []
    for n in range(4):
        clock.advance(1)
        task = pb.Episode(task=f"task number {n}", steps=steps(1))
        ids.append((await record(s, agent(user_id), task, metadata={"n": str(n % 2)})).memory_id)

    async def prune(strategy: pb.PruneStrategy.ValueType, **kw: Any) -> pb.PruneResponse:
        request = pb.PruneRequest(scope=scope(user_id), tiers=[EP], strategy=strategy, **kw)
        return await s.stub.Prune(request)

    dry = await prune(pb.PRUNE_STRATEGY_OLDEST_PERCENT, percent=50, dry_run=True)
    assert dry.deleted_count == 2 and len(await recall(s, scope(user_id))) == 4
    assert (await prune(pb.PRUNE_STRATEGY_OLDEST_PERCENT, percent=25)).deleted_count == 1
    assert (await prune(pb.PRUNE_STRATEGY_BY_FILTER, filters={"n": "1"})).deleted_count == 2
    assert [i.id for i in await recall(s, scope(user_id))] == [ids[2]]
    clock.advance(91 * DAY)
    assert (await prune(pb.PRUNE_STRATEGY_EXPIRED, dry_run=True)).deleted_count == 1
    assert (await prune(pb.PRUNE_STRATEGY_EXPIRED)).deleted_count == 1
    assert s.app.vectors.retrieve([ids[2]]) == []
    await record(s, agent(user_id), FLIGHT)
    assert (await prune(pb.PRUNE_STRATEGY_ALL)).deleted_count == 1
    assert await recall(s, scope(user_id)) == []


async def export_episodes(s: RunningServer, user: str) -> tuple[list[pb.MemoryItem], str, int]:
    items, checksum, count = [], "", -1
    async for reply in s.stub.Export(pb.ExportRequest(scope=scope(user), tiers=[EP])):
        if reply.WhichOneof("payload") == "item":
            items.append(reply.item)
        elif reply.WhichOneof("payload") == "trailer":
            checksum, count = reply.trailer.checksum_sha256, reply.trailer.item_count
    return items, checksum, count


async def test_export_erase_import_gives_back_the_same_episodes(
    vec: RunningServer, user_id: str
) -> None:
    await record(vec, agent(user_id, "travel"), FLIGHT, metadata={"trip": "rome"})
    await record(vec, agent(user_id, "coder", task_id="t-9"), DEBUG, importance=0.9)
    before, checksum, count = await export_episodes(vec, user_id)
    assert count == 2 and {i.episode.task for i in before} == {FLIGHT.task, DEBUG.task}

    erased = await vec.stub.Prune(
        pb.PruneRequest(scope=scope(user_id), strategy=pb.PRUNE_STRATEGY_ALL)
    )
    assert [c.count for c in erased.per_tier if c.tier == EP] == [2]
    assert (await export_episodes(vec, user_id))[2] == 0

    def stream() -> Any:
        yield pb.ImportRequest(scope=scope(user_id))
        for item in before:
            yield pb.ImportRequest(item=item)
        trailer = pb.ExportTrailer(
            item_count=2, checksum_sha256=checksum, checksum_format="item-jcs-v1"
        )
        yield pb.ImportRequest(trailer=trailer)

    reply = await vec.stub.Import(stream())
    assert (reply.imported_count, reply.skipped_count) == (2, 0) and reply.checksum_verified

    after, again, _ = await export_episodes(vec, user_id)
    assert {i.id: i for i in after} == {i.id: i for i in before}  # episode, times, agent...
    assert again == checksum
    found = await recall(vec, agent(user_id, "travel"), "plane ticket to Rome")
    assert found[0].episode == FLIGHT
    assert (await vec.stub.Import(stream())).skipped_count == 2


async def test_an_imported_episodic_item_without_its_episode_is_refused(
    server: RunningServer, user_id: str
) -> None:
    item = pb.MemoryItem(
        id="1f0e6a3c-0000-4000-8000-000000000001", tier=EP, kind=pb.KIND_EPISODE, content="x"
    )
    requests = [
        pb.ImportRequest(scope=scope(user_id)),
        pb.ImportRequest(item=item),
        pb.ImportRequest(trailer=pb.ExportTrailer(item_count=1)),
    ]
    err = await rpc_error(server.stub.Import(iter(requests)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["item.episode"]


async def test_usage_counts_episodes_against_the_fullest_agent(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(episodic={"max_episodes_per_agent": 5})
    for episode in (FLIGHT, DEBUG, REPORT, FLIGHT):
        await record(s, agent(user_id, "busy"), episode)
    await record(s, agent(user_id, "idle"), FLIGHT)
    usage = await s.stub.Usage(pb.UsageRequest(scope=scope(user_id)))
    [episodic] = [t for t in usage.tiers if t.tier == EP]
    assert (episodic.count, episodic.max_count, episodic.max_bytes) == (5, 5, 0)
    assert episodic.percent == 80  # the busy agent holds 4 of its 5
    assert episodic.bytes > len(FLIGHT.task) + len(DEBUG.task) + len(REPORT.task)
    [warning] = usage.alerts
    assert warning.tier == EP and warning.level == "warning"


async def test_an_imported_episodes_content_is_its_rendering(
    server: RunningServer, user_id: str
) -> None:
    item = pb.MemoryItem(
        id="1f0e6a3c-0000-4000-8000-000000000002",
        tier=EP,
        kind=pb.KIND_EPISODE,
        content="",  # derived from the episode, as on Add
        episode=DEBUG,
        agent_id="coder",
    )
    requests = [
        pb.ImportRequest(scope=scope(user_id)),
        pb.ImportRequest(item=item),
        pb.ImportRequest(trailer=pb.ExportTrailer(item_count=1)),
    ]
    assert (await server.stub.Import(iter(requests))).imported_count == 1
    [got] = (await get(server, user_id, [item.id])).items
    assert got.episode == DEBUG and got.content.startswith(f"Task: {DEBUG.task}\nStep 1:")
