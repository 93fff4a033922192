"""Long-term memory over gRPC: semantic search per user, filters, compression, dedup,
expiry, soft delete, quotas and restarts, on the embedded qdrant-edge store."""

from __future__ import annotations

import base64
import zlib
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from memoryd.settings import RetrievalSettings
from memoryd.stores.vectors.port import Filter, MatchValue
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.clock import MovableClock
from tests.support.rpc import quota_failure, rpc_error, scope
from tests.support.vector_stores import QDRANT_LOCAL

LT = pb.TIER_LONG_TERM

SKI_MEMORIES = [
    "User enjoys skiing",
    "User avoids advanced slopes",
    "User likes coffee with mountain view",
]


async def remember(s: RunningServer, user: str, content: str, **fields: Any) -> pb.AddResponse:
    return await s.stub.Add(pb.AddRequest(scope=scope(user), tier=LT, content=content, **fields))


async def recall(s: RunningServer, user: str, query: str, **fields: Any) -> pb.RetrieveResponse:
    return await s.stub.Retrieve(
        pb.RetrieveRequest(scope=scope(user), tiers=[LT], query=query, **fields)
    )


@pytest.fixture(params=["edge", "qdrant_client_local"])
async def lt(request: pytest.FixtureRequest, start_server: ServerFactory) -> RunningServer:
    """A server on each vector adapter: embedded qdrant-edge, and qdrant-client (local mode
    stands in for a Qdrant server here)."""
    if request.param == "edge":
        return await start_server()
    return await start_server(**QDRANT_LOCAL)


async def test_without_diversity_results_are_in_score_order(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(retrieval={"diversity": 0.0})
    for content in SKI_MEMORIES:
        await remember(s, user_id, content)
    found = await recall(s, user_id, "skiing preferences", top_k=3)
    scores = [i.score for i in found.items]
    assert scores == sorted(scores, reverse=True)
    assert found.items[0].content == "User enjoys skiing"


async def test_a_rare_shared_keyword_outweighs_a_common_one(
    lt: RunningServer, user_id: str
) -> None:
    # Keyword evidence is weighted by how rare a word is among this user's memories:
    # "Biscuit" (in one memory) says more than "dog" (in all of them).
    memories = [
        "The dog park near work closed for repairs",
        "My dog hates the rain and refuses to go outside",
        "Biscuit swallowed a sock and needed a vet visit",
        "Walking the dog before my shift is my favourite part of the day",
    ]
    for content in memories:
        await remember(lt, user_id, content)
    found = await recall(lt, user_id, "What happened to the dog Biscuit?", top_k=1)
    assert found.items[0].content == memories[2]


async def test_speaker_and_date_metadata_are_searchable(lt: RunningServer, user_id: str) -> None:
    # A conversation turn is stored as its text, with who said it and when as metadata;
    # questions name the speaker, so the speaker is indexed with the text.
    turns = [
        ("Priya", "I finally adopted a dog last week, a beagle mix!"),
        ("Tomas", "I adopted a dog too, a greyhound called Pepper."),
    ]
    for speaker, text in turns:
        await remember(lt, user_id, text, metadata={"speaker": speaker, "date": "2023-03-04"})
    found = await recall(lt, user_id, "What dog did Tomas adopt?", top_k=1)
    assert found.items[0].content == turns[1][1]
    assert dict(found.items[0].metadata) == {"speaker": "Tomas", "date": "2023-03-04"}


async def test_a_transcript_line_names_its_speaker_as_metadata_would(
    lt: RunningServer, user_id: str
) -> None:
    # Conversations are often stored as "Name: text" messages with no speaker metadata; a
    # question naming the person then prefers that person's turns all the same.
    turns = ["Priya: I adopted a beagle mix last week!", "Tomas: I adopted a greyhound too."]
    in_session = scope(user_id, session_id="s1")
    for text in turns:
        await lt.stub.Add(
            pb.AddRequest(scope=in_session, tier=LT, content=text, kind=pb.KIND_MESSAGE)
        )
    found = await recall(lt, user_id, "What dog did Tomas adopt?", top_k=2, explain=True)
    lifted = {i.content: i.explain.lifts.get("speaker (rank)", 0.0) for i in found.items}
    assert lifted == {turns[1]: pytest.approx(RetrievalSettings().speaker_lift), turns[0]: 0.0}
    assert found.items[0].content == turns[1]


TRAVEL_TURNS = [
    "Thandiwe: Ha, of course you did.",
    "Thandiwe: Right, back to it. Speak soon.",
    "Thandiwe: Back from Marrakech! Landed three days ago and I'm still unpacking.",
    "Wren: Someone at work is going to Reykjavik next month.",
]


CAMPER_TURNS = [
    "Mia: Did you see the match last night? The referee ruined the whole second half, "
    "three penalties and a red card, and I was shouting at the screen until midnight.",
    "Yusra: I finally caved and bought a used camper van today.",
    "Mia: No way! Where will you take it first?",
]


async def add_turns(s: RunningServer, user: str, turns: list[str]) -> None:
    in_session = scope(user, session_id="s1")
    for text in turns:
        await s.stub.Add(
            pb.AddRequest(scope=in_session, tier=LT, content=text, kind=pb.KIND_MESSAGE)
        )


async def test_a_named_speaker_counts_once_and_the_rest_of_the_question_ranks(
    lt: RunningServer, user_id: str
) -> None:
    # "Thandiwe: Ha, of course you did." is mostly its speaker's name, and so is close to any
    # question naming her; the speaker lift counts the name, and the dense side ranks by
    # the question without it (ADR 0408).
    await add_turns(lt, user_id, TRAVEL_TURNS)
    found = await recall(lt, user_id, "Which places has Thandiwe travelled to?", explain=True)
    assert found.items[0].content == TRAVEL_TURNS[2]
    hers = [i for i in found.items if i.content.startswith("Thandiwe:")]
    dense = {i.content: i.explain.dense for i in hers}
    unnamed = {i.content: i.explain.unnamed_dense for i in hers}
    # Of her turns, with the name one saying nothing is closer to the question than the
    # trip; without it, the trip is the closest.
    assert max(dense, key=dense.__getitem__) != TRAVEL_TURNS[2]
    assert max(unnamed, key=unnamed.__getitem__) == TRAVEL_TURNS[2]
    # A question naming no speaker ranks by its own cosine.
    plain = await recall(lt, user_id, "Which places has she travelled to?", explain=True)
    assert not any(i.explain.HasField("unnamed_dense") for i in plain.items)


async def test_a_speaker_met_before_is_dropped_from_the_question_only_while_still_found(
    start_server: ServerFactory, user_id: str
) -> None:
    # The server remembers the speakers a user's searches met and embeds the next question
    # naming one without the name beside the search; the candidates have the last word.
    s = await start_server()
    await add_turns(s, user_id, TRAVEL_TURNS)
    question = "Which places has Thandiwe travelled to?"
    assert (await recall(s, user_id, question, explain=True)).items[0].content == TRAVEL_TURNS[2]
    again = await recall(s, user_id, question, explain=True)
    assert again.items[0].content == TRAVEL_TURNS[2]
    assert again.items[0].explain.HasField("unnamed_dense")
    hers = [i.id for i in again.items if i.content.startswith("Thandiwe:")]
    await s.stub.Delete(pb.DeleteRequest(scope=scope(user_id), tier=LT, ids=hers))
    left = await recall(s, user_id, question, explain=True)
    assert [i.content for i in left.items] == [TRAVEL_TURNS[3]]
    assert not left.items[0].explain.HasField("unnamed_dense")


async def test_ranking_by_the_whole_question_can_be_chosen(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(retrieval={"dense_without_names": False})
    await add_turns(s, user_id, TRAVEL_TURNS)
    found = await recall(s, user_id, "Which places has Thandiwe travelled to?", explain=True)
    assert not any(i.explain.HasField("unnamed_dense") for i in found.items)
    assert found.items[0].content != TRAVEL_TURNS[2]  # the name outweighs the trip


async def test_a_turn_after_another_also_ranks_by_its_own_text(
    lt: RunningServer, user_id: str
) -> None:
    # A statement after a long turn about something else is embedded after it (ADR 0400)
    # and alone; the fusion blends the second vector's cosine in (ADR 0409), and explain
    # shows it for every turn that has one.
    await add_turns(lt, user_id, CAMPER_TURNS)
    found = await recall(lt, user_id, "What did Yusra buy?", explain=True, min_score=0.0)
    assert found.items[0].content == CAMPER_TURNS[1]
    own = {i.content: i.explain.HasField("own_dense") for i in found.items}
    assert own == {CAMPER_TURNS[0]: False, CAMPER_TURNS[1]: True, CAMPER_TURNS[2]: True}
    # Her statement alone is closer to the question (without her name, ADR 0408) than it
    # is after the match report.
    best = found.items[0].explain
    assert best.HasField("unnamed_dense") and best.own_dense > best.unnamed_dense


async def test_turns_rank_by_their_lead_alone_when_the_own_vector_is_off(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(retrieval={"own_weight": 0.0})
    await add_turns(s, user_id, CAMPER_TURNS)
    found = await recall(s, user_id, "What did Yusra buy?", explain=True)
    assert found.items and not any(i.explain.HasField("own_dense") for i in found.items)


async def test_metadata_filters_exclude_other_categories(lt: RunningServer, user_id: str) -> None:
    await remember(lt, user_id, "User likes skiing", metadata={"category": "sports"})
    await remember(lt, user_id, "User likes coffee", metadata={"category": "food"})
    found = await recall(lt, user_id, "what does the user like", filters={"category": "sports"})
    assert [i.content for i in found.items] == ["User likes skiing"]
    assert found.items[0].metadata["category"] == "sports"


async def test_kinds_filter(lt: RunningServer, user_id: str) -> None:
    await remember(lt, user_id, "User prefers window seats", kind=pb.KIND_PREFERENCE)
    await remember(lt, user_id, "User decided to fly with Air France", kind=pb.KIND_DECISION)
    found = await recall(lt, user_id, "flights and seats", kinds=[pb.KIND_DECISION])
    assert [i.kind for i in found.items] == [pb.KIND_DECISION]


async def test_min_score_drops_weak_matches_and_unrelated_queries_find_nothing(
    lt: RunningServer, user_id: str
) -> None:
    for content in SKI_MEMORIES:
        await remember(lt, user_id, content)
    everything = await recall(lt, user_id, "skiing preferences", min_score=0.0)
    strict = await recall(lt, user_id, "skiing preferences", min_score=0.6)
    assert len(strict.items) < len(everything.items)
    assert all(i.score >= 0.6 for i in strict.items)
    unrelated = await recall(lt, user_id, "quarterly tax filing deadline")
    assert not unrelated.items


async def test_a_user_with_no_memories_gets_an_empty_list(lt: RunningServer, user_id: str) -> None:
    found = await recall(lt, user_id, "anything")
    assert list(found.items) == [] and found.total_count == 0


async def test_large_content_is_stored_compressed_and_returned_whole(
    lt: RunningServer, user_id: str
) -> None:
    content = " ".join(f"Line {i}: the user keeps detailed travel notes." for i in range(110))
    assert len(content.encode()) > 5000
    added = await remember(lt, user_id, content)
    got = await lt.stub.Get(pb.GetRequest(scope=scope(user_id), tier=LT, ids=[added.memory_id]))
    assert got.items[0].content == content
    [stored] = lt.app.vectors.retrieve([added.memory_id])
    assert stored.payload["compressed"] is True and "content" not in stored.payload
    packed = base64.b64decode(stored.payload["content_z"])
    assert len(packed) < len(content.encode()) and zlib.decompress(packed).decode() == content


async def test_the_same_content_twice_is_deduplicated(lt: RunningServer, user_id: str) -> None:
    first = await remember(lt, user_id, "User is vegetarian")
    again = await remember(lt, user_id, "  user is   VEGETARIAN ")
    assert again.operation == pb.OPERATION_DEDUPLICATED
    assert again.memory_id == first.memory_id
    other_user = await remember(lt, user_id + "-b", "User is vegetarian")
    assert other_user.operation == pb.OPERATION_ADD


async def test_items_carry_their_fields(lt: RunningServer, user_id: str) -> None:
    added = await remember(
        lt, user_id, "User decided on Lisbon", kind=pb.KIND_DECISION, importance=0.9
    )
    [item] = (
        await lt.stub.Get(pb.GetRequest(scope=scope(user_id), tier=LT, ids=[added.memory_id]))
    ).items
    assert item.kind == pb.KIND_DECISION and item.tier == LT
    assert item.importance == pytest.approx(0.9)
    assert item.created_at.seconds > 0 and item.updated_at.seconds > 0
    assert item.source == pb.SOURCE_EXPLICIT


async def test_expired_memories_are_never_returned(
    start_server: ServerFactory, user_id: str
) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock)
    expires = Timestamp()
    expires.FromSeconds(int(clock.now) + 60)
    added = await remember(s, user_id, "User is in Paris this week", expires_at=expires)
    assert (await recall(s, user_id, "where is the user")).items
    clock.advance(120)
    assert not (await recall(s, user_id, "where is the user")).items
    got = await s.stub.Get(pb.GetRequest(scope=scope(user_id), tier=LT, ids=[added.memory_id]))
    assert list(got.missing) == [added.memory_id]


async def test_an_expiry_in_the_past_is_refused(lt: RunningServer, user_id: str) -> None:
    past = Timestamp()
    past.FromSeconds(1_000)
    err = await rpc_error(remember(lt, user_id, "old news", expires_at=past))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_delete_hides_at_once_and_prune_purges(lt: RunningServer, user_id: str) -> None:
    added = await remember(lt, user_id, "User's passport number ends in 42")
    deleted = await lt.stub.Delete(
        pb.DeleteRequest(scope=scope(user_id), tier=LT, ids=[added.memory_id])
    )
    assert deleted.deleted_count == 1
    assert not (await recall(lt, user_id, "passport number")).items
    assert lt.app.vectors.retrieve([added.memory_id])  # still stored, hidden
    pruned = await lt.stub.Prune(
        pb.PruneRequest(scope=scope(user_id), tiers=[LT], strategy=pb.PRUNE_STRATEGY_EXPIRED)
    )
    assert pruned.deleted_count == 1
    assert lt.app.vectors.retrieve([added.memory_id]) == []


async def test_user_b_never_sees_user_a(lt: RunningServer) -> None:
    mine = await remember(lt, "alice", "Alice's bank PIN hint is her cat's name")
    assert not (await recall(lt, "bob", "bank PIN hint")).items
    got = await lt.stub.Get(pb.GetRequest(scope=scope("bob"), tier=LT, ids=[mine.memory_id]))
    assert not got.items and list(got.missing) == [mine.memory_id]
    gone = await lt.stub.Delete(pb.DeleteRequest(scope=scope("bob"), tier=LT, ids=[mine.memory_id]))
    assert gone.deleted_count == 0
    pruned = await lt.stub.Prune(
        pb.PruneRequest(scope=scope("bob"), tiers=[LT], strategy=pb.PRUNE_STRATEGY_ALL)
    )
    assert pruned.deleted_count == 0
    assert (await recall(lt, "alice", "bank PIN hint")).items


async def test_a_full_tier_is_refused_with_the_limit_unless_auto_prune(
    start_server: ServerFactory, user_id: str
) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock, long_term={"max_memories": 10})
    ids = []
    for i in range(10):
        clock.advance(1)
        ids.append((await remember(s, user_id, f"Memory number {i} about topic {i * 7}")).memory_id)
    err = await rpc_error(remember(s, user_id, "One more memory"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max: 10" in (err.details() or "") and "delete old memories or upgrade" in (
        err.details() or ""
    )
    assert quota_failure(err).violations[0].subject.startswith("long_term:")
    clock.advance(1)
    pruned = await remember(s, user_id, "New memory", auto_prune=True)
    assert pruned.operation == pb.OPERATION_ADD_WITH_PRUNE
    flt = Filter(must=[MatchValue("user_id", user_id), MatchValue("tier", "long_term")])
    assert s.app.vectors.count(flt) == 10
    oldest = await s.stub.Get(pb.GetRequest(scope=scope(user_id), tier=LT, ids=ids[:2]))
    assert list(oldest.missing) == ids[:1]  # 10% of 10: the single oldest went


async def test_memories_survive_a_restart(
    start_server: ServerFactory, user_id: str, tmp_path: Path
) -> None:
    data = tmp_path / "restart"
    first = await start_server(data_dir=data)
    for content in SKI_MEMORIES:
        await remember(first, user_id, content)
    await first.server.stop(grace_s=0)
    second = await start_server(data_dir=data)
    found = await recall(second, user_id, "skiing preferences", top_k=2)
    assert "skiing" in found.items[0].content


async def test_conversation_messages_become_durable_long_term_memories(
    lt: RunningServer, user_id: str
) -> None:
    sc = scope(user_id, session_id="sess-1")
    said = await lt.stub.Add(
        pb.AddRequest(scope=sc, tier=pb.TIER_SHORT_TERM, content="I am allergic to peanuts")
    )
    await lt.app.copier.drain()
    found = await recall(lt, user_id, "food allergies", kinds=[pb.KIND_MESSAGE])
    [item] = found.items
    assert item.id == said.memory_id and item.session_id == "sess-1"
    assert item.role == pb.ROLE_USER


async def test_queued_messages_written_before_a_restart_are_searchable_after(
    start_server: ServerFactory, user_id: str, tmp_path: Path
) -> None:
    data = tmp_path / "queue-restart"
    first = await start_server(data_dir=data)
    await first.app.copier.stop()  # the worker is not running: messages stay queued
    sc = scope(user_id, session_id="s")
    for text in ("My daughter's name is Ana", "I work as a nurse at night"):
        await first.stub.Add(pb.AddRequest(scope=sc, tier=pb.TIER_SHORT_TERM, content=text))
    assert not (await recall(first, user_id, "where does the user work")).items
    await first.server.stop(grace_s=0)
    second = await start_server(data_dir=data)
    await second.app.copier.drain()
    found = await recall(second, user_id, "where does the user work", kinds=[pb.KIND_MESSAGE])
    assert [i.content for i in found.items][:1] == ["I work as a nurse at night"]


async def test_a_relative_cutoff_drops_hits_far_below_the_best(
    start_server: ServerFactory, user_id: str, tmp_path: Path
) -> None:
    plain = await start_server()
    strict = await start_server(data_dir=tmp_path / "strict", retrieval={"relative_cutoff": 0.6})
    for s in (plain, strict):
        for content in SKI_MEMORIES:
            await remember(s, user_id, content)
    everything = await recall(plain, user_id, "skiing preferences")
    best_only = await recall(strict, user_id, "skiing preferences")
    assert len(everything.items) == 3
    top = best_only.items[0].score
    assert best_only.items[0].content == "User enjoys skiing"
    assert all(i.score >= 0.6 * top for i in best_only.items)
    assert len(best_only.items) < len(everything.items)
