"""Episode and document bodies: the text they are searched and shown as, the document
fields filters match, and the checks that name what is wrong."""

from __future__ import annotations

import json

from memoryd.core.models import Episode, EpisodeStep
from memoryd.core.tiers.bodies import (
    document_fields,
    document_problems,
    episode_problems,
    flatten_document,
    render_episode,
)


def test_an_episode_renders_as_task_numbered_steps_and_outcome() -> None:
    episode = Episode(
        task="Rename the project",
        steps=(EpisodeStep("grep old name", "12 files"), EpisodeStep("sed -i")),
        outcome="renamed",
        success=True,
    )
    assert render_episode(episode).splitlines() == [
        "Task: Rename the project",
        "Step 1: grep old name",
        "  Observation: 12 files",
        "Step 2: sed -i",
        "Outcome (success): renamed",
    ]
    unstated = Episode(task="t", steps=(EpisodeStep("a"),), outcome="gave up")
    assert render_episode(unstated).splitlines()[-1] == "Outcome: gave up"


def test_episode_problems_name_each_field() -> None:
    assert [p.field for p in episode_problems(None, 50, 1000)] == ["episode"]
    bad = Episode(task="", steps=(EpisodeStep("ok"), EpisodeStep(" ")))
    assert [p.field for p in episode_problems(bad, 50, 1000)] == [
        "episode.task",
        "episode.steps[1].action",
    ]
    too_long = Episode(task="t", steps=tuple(EpisodeStep("a") for _ in range(3)))
    assert [p.field for p in episode_problems(too_long, 2, 1000)] == ["episode.steps"]
    big = Episode(task="t" * 2000, steps=(EpisodeStep("a"),))
    assert [p.field for p in episode_problems(big, 50, 1000)] == ["episode"]


def test_a_document_flattens_to_one_line_per_leaf() -> None:
    document = {
        "id": 7,
        "customer": {"name": "Ana", "tags": ["vip", "eu"], "notes": {}},
        "lines": [{"sku": "A1", "qty": 2}, {"sku": "B2", "qty": 1}],
        "paid": None,
    }
    assert flatten_document(document).splitlines() == [
        "id: 7",
        "customer.name: Ana",
        "customer.tags: vip, eu",
        "customer.notes: {}",
        "lines[0].sku: A1",
        "lines[0].qty: 2",
        "lines[1].sku: B2",
        "lines[1].qty: 1",
        "paid: null",
    ]


def test_only_addressable_top_level_scalars_are_filter_fields() -> None:
    document = {
        "status": "open",
        "total": 42,
        "ratio": 0.5,
        "paid": False,
        "note": None,
        "customer": {"city": "Lyon"},
        "tags": ["a"],
        "with space": "x",
        'with "quotes"': "x",
        "dotted.key": "x",
        "ünïcode": "x",
    }
    # The filter key alphabet (core.validation): a filter could never name the others.
    assert document_fields(document) == {
        "status": "open",
        "total": "42",
        "ratio": "0.5",
        "paid": "false",
        "note": "null",
        "dotted.key": "x",
        "ünïcode": "x",
    }


def test_document_problems_say_what_is_wrong() -> None:
    assert document_problems('{"a": 1}', 100) == []
    assert document_problems("", 100) == ["is required for the structured tier: a JSON object"]
    assert document_problems("{", 100)[0].startswith("is not valid JSON")
    assert document_problems("[]", 100) == ["must be a JSON object, not list"]
    assert document_problems("{}", 100) == ["must hold at least one field"]
    assert document_problems(json.dumps({"a": "x" * 200}), 100)[0].startswith("is 209 bytes")
    # Flattening can outgrow the JSON (long paths repeated per leaf).
    wide = json.dumps({"k" * 30: [{"a": 1}] * 3})
    assert len(wide) < 100 and "once flattened" in document_problems(wide, 100)[0]
