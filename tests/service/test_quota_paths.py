"""Every path that writes a tier goes through its quota: Add, the durable copies of
conversation messages, and Import (this version has no AddBatch)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from memoryd.core.models import MemoryRecord, Role, Scope, Tier
from memoryd.core.ratelimit_log import EveryFewSeconds
from memoryd.core.tiers import long_term as long_term_tier
from memoryd.transport.export_stream import Checksum
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.rpc import quota_failure, rpc_error, scope

ST, LT, EP, SD = pb.TIER_SHORT_TERM, pb.TIER_LONG_TERM, pb.TIER_EPISODIC, pb.TIER_STRUCTURED
LIMIT = 3


LIMITS: dict[str, Any] = {
    "long_term": {"max_memories": LIMIT},
    "structured": {"max_documents": 2},
    "episodic": {"max_episodes_per_agent": 2},
}


@pytest.fixture
async def small(start_server: ServerFactory) -> RunningServer:
    """Long-term holds 3 memories per user, structured 2 documents, episodic 2 per agent."""
    return await start_server(**LIMITS)


@pytest.fixture(params=["file_queue", "redis_stream"])
async def small_any_queue(
    request: pytest.FixtureRequest, start_server: ServerFactory
) -> RunningServer:
    """`small`, on each write-behind queue (the copies' path)."""
    if request.param == "redis_stream":
        url = request.getfixturevalue("redis_server").url
        return await start_server(redis_url=url, **LIMITS)
    return await start_server(**LIMITS)


async def long_term(s: RunningServer, user: str) -> list[str]:
    """The user's live long-term memories, oldest first."""
    reply = await s.stub.Retrieve(pb.RetrieveRequest(scope=scope(user), tiers=[LT], top_k=100))
    return [i.content for i in sorted(reply.items, key=lambda i: i.created_at.ToNanoseconds())]


async def remember(s: RunningServer, user: str, content: str, **kw: Any) -> pb.AddResponse:
    return await s.stub.Add(pb.AddRequest(scope=scope(user), tier=LT, content=content, **kw))


async def say(s: RunningServer, user: str, content: str) -> None:
    await s.stub.Add(pb.AddRequest(scope=scope(user, session_id="chat"), tier=ST, content=content))


def item(tier: pb.Tier.ValueType, **kw: Any) -> pb.MemoryItem:
    return pb.MemoryItem(id=str(uuid.uuid4()), tier=tier, **kw)


def stream(user: str, items: list[pb.MemoryItem], auto_prune: bool = False) -> Iterator[Any]:
    checksum = Checksum()
    yield pb.ImportRequest(scope=scope(user), auto_prune=auto_prune)
    for i in items:
        checksum.add(i)
        yield pb.ImportRequest(item=i)
    yield pb.ImportRequest(trailer=checksum.trailer())


# --------------------------------------------------------------------------- Add


async def test_add_past_the_count_is_refused_or_auto_prunes(
    small: RunningServer, user_id: str
) -> None:
    for n in range(LIMIT):
        await remember(small, user_id, f"Fact number {n}")
    err = await rpc_error(remember(small, user_id, "One too many"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max: 3 memories" in (err.details() or "")
    pruned = await remember(small, user_id, "Room is made", auto_prune=True)
    assert pruned.operation == pb.OPERATION_ADD_WITH_PRUNE
    assert await long_term(small, user_id) == ["Fact number 1", "Fact number 2", "Room is made"]


# --------------------------------------------------------------------------- message copies


async def test_message_copies_make_room_from_the_oldest_copies_only(
    small_any_queue: RunningServer, user_id: str
) -> None:
    await remember(small_any_queue, user_id, "The user is a nurse")
    for n in range(10):
        await say(small_any_queue, user_id, f"Message number {n}")
    await small_any_queue.app.copier.drain()

    # The explicit memory stays; the copies are the newest messages that fit.
    assert await long_term(small_any_queue, user_id) == [
        "The user is a nurse",
        "Message number 8",
        "Message number 9",
    ]
    session = await small_any_queue.stub.Retrieve(
        pb.RetrieveRequest(scope=scope(user_id, session_id="chat"), tiers=[ST], top_k=100)
    )
    assert len(session.items) == 10  # the conversation itself is untouched


async def test_a_late_copy_of_an_older_message_pushes_out_no_newer_copy(
    small_any_queue: RunningServer, user_id: str
) -> None:
    """Workers may copy batches out of order; the copies kept are still the newest."""
    s, chat = small_any_queue, Scope("default", user_id, session_id="chat")

    def message(n: int) -> MemoryRecord:
        return MemoryRecord(
            id=str(uuid.uuid4()),
            tier=Tier.SHORT_TERM,
            content=f"Message number {n}",
            role=Role.USER,
            created_at=1_700_000_000.0 + n,
        )

    await remember(s, user_id, "The user is a nurse")
    for n in (8, 9):
        await s.app.copier.enqueue(chat, message(n))
    await s.app.copier.drain()
    await s.app.copier.enqueue(chat, message(7))  # arrives after the newer ones
    await s.app.copier.drain()
    assert await long_term(s, user_id) == [
        "Message number 8",
        "Message number 9",
        "The user is a nurse",
    ]


async def test_a_tier_full_of_explicit_memories_gets_no_copies(
    small: RunningServer,
    user_id: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fresh rate limit for the warning, whatever earlier tests logged.
    monkeypatch.setattr(long_term_tier, "_copies_log", EveryFewSeconds(long_term_tier.log))
    facts = [f"Explicit fact {n}" for n in range(LIMIT)]
    for fact in facts:
        await remember(small, user_id, fact)
    with caplog.at_level(logging.WARNING):
        for n in range(5):
            await say(small, user_id, f"Chatter {n}")
        await small.app.copier.drain()
    assert await long_term(small, user_id) == facts
    usage = await small.stub.Usage(pb.UsageRequest(scope=scope(user_id)))
    assert {t.tier: t.count for t in usage.tiers}[LT] == LIMIT
    assert any("without a durable copy" in r.getMessage() for r in caplog.records)


async def test_a_replayed_copy_needs_no_room(small_any_queue: RunningServer, user_id: str) -> None:
    """After a restart the queue hands out copies again; rewriting one is not a new
    memory, so a full tier drops nothing for it."""
    s = small_any_queue
    await say(s, user_id, "Remember the milk")
    await s.app.copier.drain()
    for n in range(LIMIT - 1):
        await remember(s, user_id, f"Fact {n}")
    before = await long_term(s, user_id)
    session = scope(user_id, session_id="chat")
    [said] = (await s.stub.Retrieve(pb.RetrieveRequest(scope=session, tiers=[ST]))).items
    replay = MemoryRecord(
        id=said.id,
        tier=Tier.SHORT_TERM,
        content=said.content,
        role=Role.USER,
        created_at=said.created_at.ToNanoseconds() / 1e9,
    )
    await s.app.copier.enqueue(Scope("default", user_id, session_id="chat"), replay)
    await s.app.copier.drain()
    assert before == ["Remember the milk", "Fact 0", "Fact 1"]
    assert await long_term(s, user_id) == before


# --------------------------------------------------------------------------- Import


async def test_an_import_past_the_quota_writes_nothing(small: RunningServer, user_id: str) -> None:
    await remember(small, user_id, "Already here")
    await remember(small, user_id, "Also here")
    doc = item(SD, kind=pb.KIND_DOCUMENT, document_json='{"ok": true}')
    notes = [item(LT, kind=pb.KIND_NOTE, content=f"Imported {n}") for n in range(2)]
    err = await rpc_error(small.stub.Import(stream(user_id, [doc, *notes])))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert quota_failure(err).violations[0].subject == f"long_term:{user_id}"
    assert await long_term(small, user_id) == ["Already here", "Also here"]
    documents = await small.stub.Retrieve(pb.RetrieveRequest(scope=scope(user_id), tiers=[SD]))
    assert list(documents.items) == []  # the document fitted, but nothing was written


async def test_an_import_with_auto_prune_drops_the_oldest_to_make_room(
    small: RunningServer, user_id: str
) -> None:
    await remember(small, user_id, "Oldest")
    await remember(small, user_id, "Newer")
    notes = [item(LT, kind=pb.KIND_NOTE, content=f"Imported {n}") for n in range(2)]
    reply = await small.stub.Import(stream(user_id, notes, auto_prune=True))
    assert reply.imported_count == 2
    assert sorted(await long_term(small, user_id)) == ["Imported 0", "Imported 1", "Newer"]


async def test_an_import_larger_than_the_quota_is_refused_even_with_auto_prune(
    small: RunningServer, user_id: str
) -> None:
    notes = [item(LT, kind=pb.KIND_NOTE, content=f"Imported {n}") for n in range(LIMIT + 1)]
    err = await rpc_error(small.stub.Import(stream(user_id, notes, auto_prune=True)))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await long_term(small, user_id) == []


async def test_items_already_there_and_dead_items_take_no_room(
    small: RunningServer, user_id: str
) -> None:
    for n in range(LIMIT):
        await remember(small, user_id, f"Fact {n}")
    dump = [r.item async for r in small.stub.Export(pb.ExportRequest(scope=scope(user_id)))]
    own = [i for i in dump if i.id]
    deleted = item(LT, kind=pb.KIND_NOTE, content="Was deleted", deleted=True)
    reply = await small.stub.Import(stream(user_id, [*own, deleted]))
    assert (reply.imported_count, reply.skipped_count) == (1, LIMIT)
    assert len(await long_term(small, user_id)) == LIMIT


async def test_structured_and_episodic_imports_meet_their_quotas(
    small: RunningServer, user_id: str
) -> None:
    docs = [item(SD, kind=pb.KIND_DOCUMENT, document_json=f'{{"n": {n}}}') for n in range(3)]
    err = await rpc_error(small.stub.Import(stream(user_id, docs)))
    assert quota_failure(err).violations[0].subject == f"structured:{user_id}"

    def episode(agent: str, n: int) -> pb.MemoryItem:
        body = pb.Episode(task=f"task {n}", steps=[pb.EpisodeStep(action="act")])
        return item(EP, kind=pb.KIND_EPISODE, agent_id=agent, episode=body)

    # Two per agent fit; a third for one agent does not.
    fits = [episode("a", 0), episode("a", 1), episode("b", 0)]
    assert (await small.stub.Import(stream(user_id, fits))).imported_count == 3
    err = await rpc_error(small.stub.Import(stream(user_id, [episode("a", 2)])))
    assert quota_failure(err).violations[0].subject == f"episodic:{user_id}/a"


async def test_a_users_quota_profile_sets_their_structured_and_episodic_limits(
    start_server: ServerFactory, user_id: str
) -> None:
    """The plan a user is on sets every per-user limit: here one document and one episode
    per agent, where the tier blocks' defaults would allow thousands."""
    s = await start_server(
        quotas={
            "profiles": {
                "tiny": {"structured_max_documents": 1, "episodic_max_episodes_per_agent": 1}
            },
            "default_profile": "tiny",
        }
    )
    me = scope(user_id)
    await s.stub.Add(pb.AddRequest(scope=me, tier=SD, document_json='{"n": 1}'))
    err = await rpc_error(s.stub.Add(pb.AddRequest(scope=me, tier=SD, document_json='{"n": 2}')))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "max: 1 " in (err.details() or "")
    episode = pb.Episode(task="book a flight", steps=[pb.EpisodeStep(action="search")])
    agent = scope(user_id, agent_id="planner")
    await s.stub.Add(pb.AddRequest(scope=agent, tier=EP, episode=episode))
    err = await rpc_error(s.stub.Add(pb.AddRequest(scope=agent, tier=EP, episode=episode)))
    assert quota_failure(err).violations[0].subject == f"episodic:{user_id}/planner"
    usage = await s.stub.Usage(pb.UsageRequest(scope=agent))
    assert {u.tier: u.max_count for u in usage.tiers if u.tier in (SD, EP)} == {SD: 1, EP: 1}
