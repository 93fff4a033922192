"""Ranking for conversations (ADR 0400): the pure steps on hand-made pools."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from memoryd.core.retrieval.conversation import (
    Scored,
    bm25_of,
    conversation_lift,
    fuse,
    named_speakers,
    speaker_of,
    spread,
    without_names,
)
from memoryd.core.retrieval.mmr import Candidate, diversify


def _m(name: str, cosine: float = 0.0, bm25: float = 0.0, **kw: object) -> Scored:
    return Scored(name, cosine=cosine, bm25=bm25, share=0.0, **kw)  # type: ignore[arg-type]


def test_fusion_normalises_each_signal_over_the_pool_and_leans_on_keywords() -> None:
    keyword_match = _m("keyword", cosine=0.30, bm25=9.0)
    dense_match = _m("dense", cosine=0.60, bm25=0.0)
    middle = _m("middle", cosine=0.45, bm25=4.5)
    fuse([keyword_match, dense_match, middle], keyword_weight=0.6)
    assert keyword_match.base == 0.6  # best keyword score, worst cosine
    assert dense_match.base == 0.4
    assert abs(middle.base - 0.5) < 1e-9
    fuse([keyword_match, dense_match, middle], keyword_weight=1.0)  # BM25 alone
    assert [m.id for m in sorted((keyword_match, dense_match, middle), key=lambda m: -m.base)] == [
        "keyword",
        "middle",
        "dense",
    ]


def test_a_flat_signal_adds_nothing_and_late_members_are_scored_on_the_pool_range() -> None:
    a, b = _m("a", cosine=0.5, bm25=2.0), _m("b", cosine=0.5, bm25=4.0)
    late = _m("late", cosine=0.9, bm25=1.0)
    fuse([a, b], keyword_weight=0.5, others=[late])
    assert (a.base, b.base) == (0.0, 0.5)
    assert late.base == 0.0  # below the pool's keyword range, clipped, and cosine is flat


def test_a_whole_pool_scales_each_signal_by_its_best_not_its_range() -> None:
    # RF-003's three memories for "skiing preferences" (int8 cosines). Over the pool's
    # range the coffee memory's 0.031 lead over the slopes one becomes 0.1 of the cosine
    # scale; scaled by the best it stays 0.048, and likeness to the first pick decides.
    skiing = _m("skiing", cosine=0.645, bm25=2.0)
    slopes = _m("slopes", cosine=0.332)
    coffee = _m("coffee", cosine=0.363)
    fuse([skiing, slopes, coffee], keyword_weight=0.6)
    assert slopes.base == 0.0 and abs(coffee.base - 0.4 * 0.031 / 0.313) < 1e-9
    fuse([skiing, slopes, coffee], keyword_weight=0.6, whole=True)
    assert skiing.base == 1.0
    assert abs(slopes.base - 0.4 * 0.332 / 0.645) < 1e-9
    assert abs(coffee.base - 0.4 * 0.363 / 0.645) < 1e-9
    # Then MMR (diversity 0.3; likeness to "skiing": slopes 0.379, coffee 0.478).
    vectors = {
        "skiing": [1.0, 0.0, 0.0],
        "slopes": [0.379, 0.925, 0.0],
        "coffee": [0.478, 0.0, 0.878],
    }
    picked = diversify(
        [Candidate(m.id, m.base, np.array(vectors[m.id]), False) for m in (skiing, coffee, slopes)],
        2,
        0.3,
    )
    assert [("skiing", "coffee", "slopes")[i] for i, _ in picked] == ["skiing", "slopes"]


def test_bm25_of_a_short_text_saturates_with_length() -> None:
    matched = 3.0  # the summed IDF of the query terms the text holds
    short = bm25_of(matched, 3, k1=1.2, b=0.75, avg_len=40)
    long = bm25_of(matched, 82, k1=1.2, b=0.75, avg_len=40)
    assert short > long > 0
    assert bm25_of(0.0, 1, k1=1.2, b=0.75, avg_len=40) == 0.0


def test_a_speaker_is_named_by_every_word_of_the_name_in_any_case() -> None:
    speakers = {"Priya", "Tomás", "Mary Ann"}
    assert named_speakers("What breed is priya's dog?", speakers) == {"Priya"}
    assert named_speakers("Did Tomás and Mary Ann meet?", speakers) == {"Tomás", "Mary Ann"}
    assert named_speakers("Did Mary call?", speakers) == set()


@pytest.mark.parametrize(
    ("query", "speakers", "unnamed"),
    [
        ("Which places has Thandiwe travelled to?", ["Thandiwe"], "Which places has travelled to?"),
        ("What breed is Priya's dog?", ["Priya"], "What breed is dog?"),
        ("How is Priya\u2019s mum?", ["Priya"], "How is mum?"),
        ("What did Caroline and Melanie paint?", ["Caroline", "Melanie"], "What did and paint?"),
        ("What did May say in may?", ["May"], "What did say in may?"),  # the word stays
        ("Did Mary Ann call Tomas?", ["Mary Ann"], "Did call Tomas?"),
        (
            "Where does Priyanka live?",
            ["Priya"],
            "Where does Priyanka live?",
        ),  # words, not prefixes
        ("What did Tomas say?", [], "What did Tomas say?"),
        ("Which dog is owned by Priya?", ["Priya"], "Which dog is owned by?"),  # still asks
        ("Priya, where do you work?", ["Priya"], "where do you work?"),
    ],
)
def test_a_query_without_names_drops_every_word_of_each_and_its_possessive_not_its_mark(
    query: str, speakers: list[str], unnamed: str
) -> None:
    assert without_names(query, speakers) == unnamed


def test_the_fusion_ranks_by_the_cosine_without_names_when_there_is_one() -> None:
    chatter = _m("chatter", cosine=0.60, unnamed_cosine=0.10)
    trip = _m("trip", cosine=0.50, unnamed_cosine=0.40)
    plain = _m("plain", cosine=0.20)  # no query without names: its own cosine
    fuse([chatter, trip, plain], keyword_weight=0.0)
    assert [m.id for m in sorted((chatter, trip, plain), key=lambda m: -m.base)] == [
        "trip",
        "plain",
        "chatter",
    ]


def test_a_turn_is_said_by_its_metadatas_speaker_else_by_the_name_its_line_begins_with() -> None:
    assert speaker_of({"speaker": "Priya"}, "Tomás: no, I did", said=True) == "Priya"
    assert speaker_of({"author": "Ruth"}, "a note", said=False) == "Ruth"
    assert speaker_of({}, "Tomás: I signed the lease", said=True) == "Tomás"
    assert speaker_of({}, "Mary Ann O'Neil: hello", said=True) == "Mary Ann O'Neil"
    assert speaker_of({}, "José María: hola", said=True) == "José María"
    assert speaker_of({}, "Émile: salut", said=True) == "Émile"
    # Only a transcript line: a capitalised name of at most three words, then ": ".
    assert speaker_of({}, "Note: buy milk", said=False) == ""  # a fact, not a turn
    assert speaker_of({}, "the plan: fly Monday", said=True) == ""
    assert speaker_of({}, "Plan for today: fly", said=True) == ""
    assert speaker_of({}, "ésta: no", said=True) == ""
    assert speaker_of({}, "At the meeting we agreed on it: ship", said=True) == ""
    assert speaker_of({}, "Priya:no space", said=True) == ""


def test_a_turn_is_lifted_by_its_best_neighbour_in_the_same_session_only() -> None:
    matching = _m("match", session="s1", position=4)
    reply = _m("reply", session="s1", position=5)
    other_session = _m("x", session="s2", position=6)
    loose_note = _m("note")  # no session: never lifted, never lifts
    pool = [matching, reply, other_session, loose_note]
    values = {"match": 0.9, "reply": 0.1, "x": 0.5, "note": 0.4}
    lifted = conversation_lift(pool, values, adjacency=0.5, question_handoff=0.0)
    assert lifted["reply"] == pytest.approx(0.1 + 0.5 * 0.9)
    assert lifted["match"] == pytest.approx(0.9 + 0.5 * 0.1)
    assert lifted["x"] == 0.5 and lifted["note"] == 0.4


def test_a_question_hands_part_of_its_score_to_the_reply_after_it() -> None:
    before = _m("before", session="s", position=1)
    question = _m("question", session="s", position=2, asks=True)
    reply = _m("reply", session="s", position=3)
    values = {"before": 0.2, "question": 0.8, "reply": 0.3}
    lifted = conversation_lift([before, question, reply], values, 0.0, question_handoff=0.5)
    assert lifted["question"] == pytest.approx(0.4)
    assert lifted["reply"] == pytest.approx(0.3 + 0.4)  # the reply now ranks first
    assert lifted["before"] == 0.2  # only the turn after a question gains


def test_with_a_context_window_hits_inside_a_taken_hits_window_are_skipped() -> None:
    ranked = [
        _m("a", session="s", position=10),
        _m("b", session="s", position=11),  # comes as a's context
        _m("c", session="t", position=11),
        _m("d", session="s", position=13),
        _m("e"),
    ]
    assert [m.id for m in spread(ranked, 3, window=1)] == ["a", "c", "d"]
    assert [m.id for m in spread(ranked, 3, window=0)] == ["a", "b", "c"]
    assert [m.id for m in spread(ranked, 3, window=3)] == ["a", "c", "e"]


def _unit(*xs: float) -> np.ndarray[Any, np.dtype[np.float32]]:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def _picked(pool: list[Candidate], top_k: int, penalty: float) -> list[str]:
    return [pool[i].id for i, _ in diversify(pool, top_k, penalty)]


def test_mmr_takes_the_best_then_whatever_adds_most_beside_what_it_took() -> None:
    best = Candidate("best", 1.0, _unit(1, 0, 0))
    repeat = Candidate("repeat", 0.95, _unit(1, 0.05, 0))  # near-repeat of "best"
    other = Candidate("other", 0.8, _unit(0, 1, 0))
    third = Candidate("third", 0.7, _unit(0, 0, 1))
    pool = [best, repeat, other, third]
    assert _picked(pool, 3, penalty=0.3) == ["best", "other", "third"]
    assert _picked(pool, 4, penalty=0.3) == ["best", "other", "third", "repeat"]
    assert _picked(pool, 2, penalty=0.0) == ["best", "repeat"]  # no penalty: by score
    assert _picked([third], 5, penalty=0.3) == ["third"]


def test_mmr_reports_what_a_picks_likeness_to_earlier_picks_took_off_it() -> None:
    best = Candidate("best", 1.0, _unit(1, 0, 0))
    repeat = Candidate("repeat", 0.95, _unit(1, 0.05, 0))
    other = Candidate("other", 0.8, _unit(0, 1, 0))
    taken = diversify([best, repeat, other], 3, penalty=0.3)
    penalties = {[best, repeat, other][i].id: p for i, p in taken}
    assert penalties["best"] == 0.0  # the first pick is like nothing taken
    assert penalties["other"] == pytest.approx(0.0, abs=1e-9)  # orthogonal to "best"
    assert penalties["repeat"] == pytest.approx(0.3 * float(_unit(1, 0, 0) @ _unit(1, 0.05, 0)))
    assert diversify([best, repeat], 2, penalty=0.0) == [(0, 0.0), (1, 0.0)]


def test_mmr_never_counts_a_turn_of_a_conversation_as_a_repeat_of_another() -> None:
    # Two turns on one topic (each said once, both needed), then a fact repeating the first.
    said = Candidate("said", 1.0, _unit(1, 0, 0), said=True)
    reply = Candidate("reply", 0.95, _unit(1, 0.05, 0), said=True)
    fact = Candidate("fact", 0.9, _unit(1, 0.02, 0))
    other = Candidate("other", 0.8, _unit(0, 1, 0))
    assert _picked([said, reply, fact, other], 3, penalty=0.3) == ["said", "reply", "other"]
