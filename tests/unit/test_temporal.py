"""Time expressions in queries resolved against the time of the query (ADR 0401)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memoryd.core.retrieval.temporal import (
    Anchor,
    TimeResolver,
    TimeWindow,
    asks_when,
    tells_a_time,
)

NOW = datetime(2023, 9, 13, 15, 0, tzinfo=UTC).timestamp()  # a Wednesday


def _at(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()


@pytest.fixture(scope="module")
def resolver() -> TimeResolver:
    return TimeResolver()


def test_a_month_and_year_names_that_whole_month(resolver: TimeResolver) -> None:
    window = resolver.resolve("What did Priya do in May 2023?", NOW)
    assert window == TimeWindow(_at(2023, 5, 1), _at(2023, 6, 1))


def test_a_month_named_without_its_year_is_that_month_of_any_year(
    resolver: TimeResolver,
) -> None:
    window = resolver.resolve("What new role did Grace take on in November?", NOW)
    assert isinstance(window, TimeWindow) and window.every_year
    assert window.contains(_at(2019, 11, 15)) and window.contains(_at(2023, 11, 1))
    assert not window.contains(_at(2023, 10, 31)) and not window.contains(_at(2023, 12, 1))


def test_relative_expressions_count_back_from_the_query_time(resolver: TimeResolver) -> None:
    last_week = resolver.resolve("what did we decide last week", NOW)
    assert last_week == TimeWindow(_at(2023, 9, 4), _at(2023, 9, 11))  # Monday to Monday
    yesterday = resolver.resolve("Where did he go yesterday?", NOW)
    assert yesterday == TimeWindow(_at(2023, 9, 12), _at(2023, 9, 13))


def test_before_and_after_open_the_window_on_one_side(resolver: TimeResolver) -> None:
    after = resolver.resolve("What changed after March 2023?", NOW)
    assert after == TimeWindow(_at(2023, 4, 1), None)
    before = resolver.resolve("What did she do before 2023?", NOW)
    assert isinstance(before, TimeWindow) and before.end == _at(2023, 1, 1)
    assert before.start is None
    assert before.contains(_at(2022, 12, 31)) and not before.contains(_at(2023, 1, 1))


def test_an_event_instead_of_a_date_is_an_anchor(resolver: TimeResolver) -> None:
    anchor = resolver.resolve("Where did she work before she moved to Lisbon?", NOW)
    assert anchor == Anchor("before", "she moved to Lisbon")
    assert anchor.window(100.0) == TimeWindow(None, 100.0)


def test_questions_naming_no_time_resolve_to_nothing(resolver: TimeResolver) -> None:
    assert resolver.resolve("What breed is Priya's dog Biscuit?", NOW) is None
    assert resolver.resolve("When did Tomás sign the lease?", NOW) is None
    assert resolver.resolve("Did he ever say what happened before?", NOW) is None


@pytest.mark.parametrize(
    "query",
    ["When did Priya bring Biscuit home?", "when was the recital", "What year did he move?",
     "How long ago was the race?"],
)  # fmt: skip
def test_a_question_asking_when_is_recognised(query: str) -> None:
    assert asks_when(query)


@pytest.mark.parametrize(
    "query", ["Why did she start salsa?", "Whenever I cook, what do I make?", "Where was Sam?"]
)
def test_other_questions_do_not_ask_when(query: str) -> None:
    assert not asks_when(query)


@pytest.mark.parametrize(
    "text",
    [
        "I capsized last Sunday.",
        "Back from Oaxaca! Landed yesterday.",
        "I picked him up from Second Chance on the 25th.",
        "The chicks arrived on Thursday!",
        "We moved three days ago.",
        "In May we finally left.",
        "That was back in 2019.",
        "I start next week.",
    ],
)
def test_a_text_that_dates_what_it_says_tells_a_time(text: str) -> None:
    assert tells_a_time(text)


@pytest.mark.parametrize(
    "text",
    ["Ha, of course you did.", "I may go, we will see.", "That was the last thing I wanted.",
     "Past the bakery, turn left."],
)  # fmt: skip
def test_a_text_without_a_time_tells_none(text: str) -> None:
    assert not tells_a_time(text)
