"""Time expressions in a query ("last week", "in May 2023", "before she moved") resolved
to a window of `occurred_at` times, which retrieval uses as a soft filter (ADR 0401).

Dates are found and resolved by dateparser (its search finds the expression, its parser
gives the period it names: day, week, month or year), relative to the time of the query.
An expression like "before she moved" names no date: it becomes an `Anchor`, an event the
caller finds among its candidates and whose time bounds the window.

dateparser's search costs milliseconds, so it only runs when a query holds a word that can
start a time expression (`_TIME_WORDS`, a digit): most questions hold none.
"""

from __future__ import annotations

import calendar
import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

Direction = Literal["before", "after"]

_WORD = re.compile(r"[^\W\d_]+|\d+", re.UNICODE)
_DIRECTIONS: dict[str, Direction] = {
    "before": "before",
    "until": "before",
    "till": "before",
    "prior": "before",
    "after": "after",
    "since": "after",
}
# Words that can start or make up a time expression dateparser resolves.
_TIME_WORDS = frozenset(
    [m.casefold() for m in calendar.month_name[1:]]
    + [m.casefold() for m in calendar.month_abbr[1:]]
    + [d.casefold() for d in calendar.day_name]
    + [
        "yesterday",
        "today",
        "tonight",
        "tomorrow",
        "ago",
        "last",
        "past",
        "previous",
        "week",
        "weeks",
        "weekend",
        "month",
        "months",
        "year",
        "years",
        "day",
        "days",
        "fortnight",
    ]
)
# Words making an expression relative to now ("last May" is one May, "in May" any).
_RELATIVE_WORDS = frozenset(
    ["yesterday", "today", "tonight", "tomorrow", "ago", "last", "past", "previous", "this", "next"]
)
# A question asking when something happened ("When did she adopt Biscuit?", "What year
# did he move?", "How long ago was the race?").
_ASKS_WHEN = re.compile(r"\s*(when|what (day|date|year|month)|how long ago)\b", re.IGNORECASE)
_DAYS = "|".join(d.casefold() for d in calendar.day_name)
# "May" only where it is the month ("in May", "May 3rd"), not the verb.
_MONTHS = "|".join(m.casefold() for m in calendar.month_name[1:] if m != "May")
# A time a turn tells what it says by: deictic ("yesterday", "last Sunday", "three days
# ago"), a weekday or month by its full name, a day of the month or a year. Stricter than
# `_TIME_WORDS` (no "may", "last", "past" alone), which only gates a query's parse.
# Matched against the casefolded text: IGNORECASE makes this alternation 3x slower.
_TELLS_A_TIME = re.compile(
    rf"\b(yesterday|today|tonight|tomorrow|ago|{_DAYS}|{_MONTHS}"
    r"|(this|last|next) (morning|afternoon|evening|night|week|weekend|month|year|spring"
    r"|summer|autumn|fall|winter)"
    r"|(in|since|early|late|mid|last|next|this) may|may \d"
    r"|the other day|\d{1,2}(st|nd|rd|th)|(19|20)\d\d)\b",
)
# Clause words that end an event ("before she moved to Lisbon, what ...").
_CLAUSE_END = re.compile(r"[,;?.!]")


@dataclass(frozen=True)
class TimeWindow:
    """Epoch seconds: `start` inclusive, `end` exclusive; None is open. With `every_year`
    ("in November", no year named) the same days of any year match."""

    start: float | None
    end: float | None
    every_year: bool = False

    def contains(self, when: float) -> bool:
        if self.every_year and self.start is not None and self.end is not None:
            first = datetime.fromtimestamp(self.start, tz=UTC)
            day = datetime.fromtimestamp(when, tz=UTC)
            moved = _same_day_in(day, first.year)
            if moved is None:
                return False
            when = moved.timestamp()
        return (self.start is None or when >= self.start) and (self.end is None or when < self.end)


@dataclass(frozen=True)
class Anchor:
    """A window bounded by an event the query names rather than a date."""

    direction: Direction
    event: str

    def window(self, when: float) -> TimeWindow:
        return TimeWindow(None, when) if self.direction == "before" else TimeWindow(when, None)


class TimeResolver:
    """Finds the time a query is about. Safe to share between threads (dateparser's
    parsers are created once, under a lock, and only read afterwards)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parser: Any = None

    def warm(self) -> None:
        """Load dateparser and its English data now (about 0.4 s), so that the first
        query naming a time does not pay for it."""
        self.resolve("what happened last week", datetime.now(UTC).timestamp())

    def _date_parser(self, now: datetime) -> Any:
        from dateparser.date import DateDataParser

        settings = {"RELATIVE_BASE": now.replace(tzinfo=None), "PREFER_DATES_FROM": "past"}
        return DateDataParser(languages=["en"], settings=settings)

    def parses(self, query: str) -> bool:
        """Whether `resolve` runs dateparser for `query` (milliseconds); without a time
        word it answers in microseconds."""
        return _names_time([w.casefold() for w in _WORD.findall(query)])

    def resolve(self, query: str, now: float) -> TimeWindow | Anchor | None:
        words = [w.casefold() for w in _WORD.findall(query)]
        if not _names_time(words):
            return self._anchor(query, words)
        from dateparser.search import search_dates

        base = datetime.fromtimestamp(now, tz=UTC)
        settings = {"RELATIVE_BASE": base.replace(tzinfo=None), "PREFER_DATES_FROM": "past"}
        with self._lock:
            found = search_dates(query, languages=["en"], settings=settings) or []
            # The search also reads plain words as dates ("we" as Wednesday): only an
            # expression holding a time word counts.
            found = [f for f in found if _names_time(_WORD.findall(f[0].casefold()))]
            if not found:
                return self._anchor(query, words)
            text, _ = found[0]
            data = self._date_parser(base).get_date_data(_strip_direction(text))
        if data.date_obj is None:
            return None
        window = _period_window(data.date_obj, data.period or "day")
        found_words = _WORD.findall(text.casefold())
        if not any(w.isdigit() and len(w) == 4 for w in found_words) and not any(
            w in _RELATIVE_WORDS for w in found_words
        ):
            # A month or a day named without its year: that time of any year.
            window = TimeWindow(window.start, window.end, every_year=True)
        direction = _direction_of(query, text)
        if direction is not None and window.every_year:
            return None  # "before November" of which year: nothing to bound
        if direction == "before":
            return TimeWindow(None, window.start)
        if direction == "after":
            return TimeWindow(window.end, None)
        return window

    def _anchor(self, query: str, words: list[str]) -> Anchor | None:
        for i, w in enumerate(words):
            direction = _DIRECTIONS.get(w)
            if direction is None:
                continue
            match = re.search(rf"\b{re.escape(w)}\b(.*)", query, flags=re.IGNORECASE)
            event = _CLAUSE_END.split(match.group(1))[0].strip() if match else ""
            if len(_WORD.findall(event)) >= 1 and i + 1 < len(words):
                return Anchor(direction, event)
        return None


def _same_day_in(day: datetime, year: int) -> datetime | None:
    try:
        return day.replace(year=year)
    except ValueError:  # 29 February
        return None


def _names_time(words: list[str]) -> bool:
    return any(w in _TIME_WORDS or (w.isdigit() and len(w) == 4) for w in words)


def _strip_direction(text: str) -> str:
    words = text.split()
    while words and words[0].casefold() in (*_DIRECTIONS, "in", "on", "during", "about"):
        words = words[1:]
    return " ".join(words) or text


def _direction_of(query: str, found: str) -> Direction | None:
    """'before'/'after' when the expression starts with such a word or follows one."""
    head = found.split()[0].casefold() if found.split() else ""
    if head in _DIRECTIONS:
        return _DIRECTIONS[head]
    at = query.find(found)
    before = _WORD.findall(query[:at]) if at >= 0 else []
    return _DIRECTIONS.get(before[-1].casefold()) if before else None


def _period_window(when: datetime, period: str) -> TimeWindow:
    """The day, week (Monday to Sunday), month or year holding `when` (read as UTC)."""
    day = datetime(when.year, when.month, when.day, tzinfo=UTC)
    if period == "year":
        start = datetime(when.year, 1, 1, tzinfo=UTC)
        end = datetime(when.year + 1, 1, 1, tzinfo=UTC)
    elif period == "month":
        start = datetime(when.year, when.month, 1, tzinfo=UTC)
        days = calendar.monthrange(when.year, when.month)[1]
        end = start + timedelta(days=days)
    elif period == "week":
        start = day - timedelta(days=day.weekday())
        end = start + timedelta(days=7)
    else:
        start, end = day, day + timedelta(days=1)
    return TimeWindow(start.timestamp(), end.timestamp())


def asks_when(query: str) -> bool:
    """Whether `query` asks when something happened: its answer is the time of a memory
    that tells the event (ADR 0410)."""
    return _ASKS_WHEN.match(query) is not None


def tells_a_time(text: str) -> bool:
    """Whether `text` dates what it says ("I capsized last Sunday", "the chicks arrived
    on Thursday", "on the 25th"): with its session's time, the answer to a when-question."""
    return _TELLS_A_TIME.search(text.casefold()) is not None
