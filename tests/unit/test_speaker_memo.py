"""The speakers each user's searches met (ADR 0408): a bounded guess, never shared."""

from __future__ import annotations

from memoryd.core.retrieval.speakers import SpeakerMemo


def test_a_users_searches_add_up_the_speakers_they_met() -> None:
    memo = SpeakerMemo()
    memo.met(("t1", "u1"), {"Priya", "Tomas", ""})
    memo.met(("t1", "u1"), {"Wren"})
    assert memo.of(("t1", "u1")) == {"Priya", "Tomas", "Wren"}


def test_speakers_stay_with_their_tenant_and_user() -> None:
    memo = SpeakerMemo()
    memo.met(("t1", "u1"), {"Priya"})
    assert memo.of(("t2", "u1")) == set()
    assert memo.of(("t1", "u2")) == set()
    assert memo.of(None) == set()
    memo.met(None, {"Priya"})  # a search of no single user is remembered for no one
    assert memo.of(None) == set()


def test_the_least_recently_searched_user_is_forgotten_first() -> None:
    memo = SpeakerMemo(max_users=2)
    memo.met(("t", "a"), {"Ana"})
    memo.met(("t", "b"), {"Ben"})
    memo.met(("t", "a"), {"Ana"})  # a searched again
    memo.met(("t", "c"), {"Cy"})
    assert memo.of(("t", "b")) == set()
    assert memo.of(("t", "a")) == {"Ana"}
    assert memo.of(("t", "c")) == {"Cy"}


def test_too_many_names_start_again_from_the_last_search() -> None:
    memo = SpeakerMemo(max_names=3)
    memo.met(("t", "u"), {"A", "B", "C"})
    memo.met(("t", "u"), {"D"})
    assert memo.of(("t", "u")) == {"D"}
