"""The second hop (ADR 0404): a term the user said in very few memories links them, so a
question that finds one turn also finds the turn that shares its name, place or thing,
below the first hits and never above them."""

from __future__ import annotations

import math

import pytest

from memoryd.core.engine import MemoryEngine
from memoryd.core.memory.term_counts import Counts
from memoryd.core.models import (
    AddCommand,
    MemoryRecord,
    RetrieveQuery,
    Scope,
    ScoreComponents,
    Tier,
)
from memoryd.core.observe import NullObserver
from memoryd.core.retrieval.bm25 import BM25Encoder
from memoryd.core.retrieval.candidates import CandidatePool
from memoryd.core.retrieval.conversation import Scored
from memoryd.core.retrieval.links import Links, idf_floor, lift, linked_to, rare_terms
from memoryd.core.retrieval.ranker import Ranker, RankQuery
from memoryd.settings import RetrievalSettings
from memoryd.transport.convert import explain_scores
from memoryd.v1 import memory_pb2 as pb
from tests.unit.unit_kit import AppFactory

USER = Scope(tenant="t1", user_id="leo")


def test_the_floor_is_the_idf_of_a_term_held_by_the_most_memories_a_link_allows() -> None:
    counts = Counts(0.0, math.inf, 280)
    held_by = {1: 3, 2: 4, 3: 1}
    idf = counts.idf([1, 2, 3], held_by)
    assert idf is not None
    floor = idf_floor(280, 3)
    assert idf[1] == pytest.approx(floor)
    assert idf[3] > floor > idf[2]


def test_rare_terms_are_the_first_hits_few_held_terms_the_query_lacks() -> None:
    idf = {1: 5.0, 2: 5.0, 3: 0.7, 4: 4.0}
    first = [{1, 2, 3}, {4}]
    # 2 is a query term (every candidate was found for it), 3 is common, 4 under the floor.
    assert rare_terms(first, query_terms=[2], idf=idf, floor=4.5) == {1}


def test_the_candidates_holding_a_rare_term_are_linked_but_not_the_first_hits() -> None:
    terms = {"first": {1, 2}, "same-name": {1, 9}, "unrelated": {7}, "also-first": {1}}
    assert linked_to(terms, {1}, ["first", "also-first"]) == {"same-name"}
    assert linked_to(terms, set(), ["first"]) == frozenset()


def test_a_link_lifts_up_to_just_under_the_last_first_hit_and_never_above_it() -> None:
    ranks = {"a": 1.0, "b": 0.8, "near": 0.75, "far": 0.3, "above": 0.9}
    links = Links(first=("a", "b"), linked=frozenset({"near", "far", "above"}), weight=0.2)
    lifted = lift(ranks, links)
    assert lifted["far"] == pytest.approx(0.2)
    assert ranks["near"] + lifted["near"] < ranks["b"]  # capped under the first hits
    assert ranks["near"] + lifted["near"] == pytest.approx(0.8)
    assert "above" not in lifted  # already ranked among the first hits: nothing to add
    assert lift(ranks, Links(("gone",), frozenset({"far"}), 0.2)) == {}


def _m(name: str, cosine: float, bm25: float = 0.0) -> Scored:
    return Scored(name, cosine=cosine, bm25=bm25, share=0.0)


def test_a_linked_candidate_rises_above_the_rest_and_says_so_in_its_components() -> None:
    ranker = Ranker(RetrievalSettings(), NullObserver(), BM25Encoder())
    pool = CandidatePool(BM25Encoder(), {}, None)
    hits = [_m("first", 0.9, 2.0), _m("second", 0.7, 1.0), _m("other", 0.5), _m("linked", 0.4)]
    query = RankQuery("q", None, 0.0, 4)
    plain = ranker.rank(query, pool, hits)
    assert [i for i, _ in plain.picks] == ["first", "second", "other", "linked"]
    links = Links(first=("first", "second"), linked=frozenset({"linked"}), weight=0.3)
    ranking = ranker.rank(query, pool, hits, links=links)
    assert [i for i, _ in ranking.picks] == ["first", "second", "linked", "other"]
    components = dict(ranking.picks)
    assert components["linked"].link_lift > 0
    assert components["other"].link_lift == 0.0
    assert components["linked"].conversation_lift == 0.0  # the link is not a conversation's
    assert components["linked"].rank == pytest.approx(
        components["linked"].fused + components["linked"].link_lift
    )
    # The score callers see is the memory's own relevance: a link only reorders.
    assert components["linked"].final == dict(plain.picks)["linked"].final


def test_explain_names_the_link_lift_of_a_hit_it_moved() -> None:
    parts = ScoreComponents(
        dense=0.4, keyword=1.0, keyword_share=0.0, fused=0.3, speaker_lift=0.0,
        time_lift=0.0, conversation_lift=0.0, rank=0.5, mmr_penalty=0.0, relevance=0.4,
        final=0.4, link_lift=0.2,
    )  # fmt: skip
    record = MemoryRecord(id="m", tier=Tier.LONG_TERM, content="x", score=0.4)
    record.components = parts
    response = pb.RetrieveResponse(items=[pb.MemoryItem(id="m", score=0.4)])
    explain_scores(response, [record])
    lifts = response.items[0].explain.lifts
    assert lifts["link (rank)"] == pytest.approx(0.2)
    assert lifts["conversation"] == pytest.approx(0.0)  # the score is not moved


async def _say(engine: MemoryEngine, text: str) -> str:
    added = await engine.add(AddCommand(scope=USER, tier=Tier.LONG_TERM, content=text))
    return added.memory_id


async def _ids(engine: MemoryEngine, query: str, top_k: int) -> list[str]:
    found = await engine.retrieve(
        RetrieveQuery(scope=USER, query=query, tiers=[Tier.LONG_TERM], top_k=top_k, min_score=0.0)
    )
    return [h.id for h in found.items]


async def _chess_club(engine: MemoryEngine) -> str:
    """Turns about chess that share the question's words, and one, about the tournament,
    that shares none of them but the opening's rare name with the turn that answers."""
    await _say(engine, "My coach gave me a new opening for black: the Caro-Kann.")
    for n in range(60):
        await _say(engine, f"Chess club night {n}: my coach and I played blitz for black.")
    return await _say(engine, "Round one I won with the Caro-Kann, round two I lost.")


async def test_a_turn_sharing_a_rare_name_with_a_first_hit_is_found_beyond_the_pool(
    make_app: AppFactory,
) -> None:
    question = "Which opening did my coach give me for black?"
    found = {}
    for name, retrieval in (
        ("linked", {"link_weight": 0.2}),
        ("candidates only", {"link_weight": 0.2, "link_search": 0}),
        ("off", {}),  # the default (ADR 0404)
    ):
        engine = (await make_app(retrieval=retrieval)).engine
        tournament = await _chess_club(engine)
        found[name] = tournament in await _ids(engine, question, 8)
    # Sixty turns hold the question's words and fill the candidates (32 of each search at
    # top_k 8); the tournament turn holds none of them: only the rare name's search reads it.
    assert found == {"linked": True, "candidates only": False, "off": False}


async def test_no_second_hop_when_the_answer_has_no_room_below_the_first_hits(
    make_app: AppFactory,
) -> None:
    engine = (await make_app(retrieval={"link_weight": 0.2})).engine
    tournament = await _chess_club(engine)
    # top_k 5 = link_hits: every pick is a first hit, nothing is linked.
    found = await _ids(engine, "Which opening did my coach give me for black?", 5)
    assert tournament not in found
