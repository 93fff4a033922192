"""The second development set (evals/synthconv): generated, reproducible, and shaped like
the held-out benchmark it stands in for. No server, no model."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from synthconv import generate

DATA = Path(generate.__file__).parent / "data"
MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"


@pytest.fixture(scope="module")
def conversations() -> list[dict[str, Any]]:
    return [json.loads(text) for text in generate.generate().values()]


def test_the_committed_copy_is_what_the_generator_makes() -> None:
    committed = {p.name: p.read_text() for p in sorted(DATA.glob("*.json"))}
    assert committed == generate.generate()


def test_another_seed_makes_other_conversations() -> None:
    assert generate.generate(seed=1) != generate.generate()


def test_every_evidence_turn_exists_and_each_category_is_asked(
    conversations: list[dict[str, Any]],
) -> None:
    for c in conversations:
        turns = {t["id"] for s in c["sessions"] for t in s["turns"]}
        assert all(set(q["evidence"]) <= turns for q in c["questions"])
        assert Counter(q["category"] for q in c["questions"]) == generate.QUESTIONS_PER_CATEGORY
        assert all(len(q["evidence"]) >= 2 for q in c["questions"] if q["category"] == "multi-hop")
        assert len(c["speakers"]) == 2
        assert {t["speaker"] for s in c["sessions"] for t in s["turns"]} == set(c["speakers"])


def test_no_turn_names_a_calendar_date(conversations: list[dict[str, Any]]) -> None:
    # Temporal questions are answered by the session's time alone, as in the held-out
    # benchmark: a turn says "yesterday" or "on Sunday", never "12 May" or "2024".
    for c in conversations:
        for s in c["sessions"]:
            for t in s["turns"]:
                assert not re.search(rf"\b({MONTHS})\b|\b(19|20)\d\d\b", t["text"]), t


def test_temporal_answers_are_session_dates(conversations: list[dict[str, Any]]) -> None:
    for c in conversations:
        dates = {s["session"]: s["date"] for s in c["sessions"]}
        for q in c["questions"]:
            if q["category"] == "temporal":
                session = int(q["evidence"][0][1:].split(":")[0])
                year = dates[session][:4]
                assert q["answer"].endswith(year), q


def test_the_halves_split_the_conversations() -> None:
    ids = {f"sconv-{n}" for n in range(1, generate.CONVERSATIONS + 1)}
    tune, report = set(generate.HALVES["tune"]), set(generate.HALVES["report"])
    assert tune | report == ids and not tune & report
