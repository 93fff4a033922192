"""How a Retrieve ranks (docs/ranking.md): every hit says why it ranked where it did, and
the ranking's steps show in its score components."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memoryd.core.engine import MemoryEngine
from memoryd.core.memory.embedding_batcher import EmbeddingBatcher
from memoryd.core.memory.payload import to_payload
from memoryd.core.memory.vector_memory import NewPoint, VectorMemory
from memoryd.core.models import AddCommand, Lookup, MemoryRecord, RetrieveQuery, Scope, Tier
from memoryd.core.observe import NullObserver, observed
from memoryd.core.retrieval.bm25 import BM25Encoder
from memoryd.core.retrieval.candidates import CandidatePool
from memoryd.core.retrieval.conversation import Scored
from memoryd.core.retrieval.ranker import Ranker, RankQuery, relevance
from memoryd.core.retrieval.temporal import TimeWindow
from memoryd.settings import RetrievalSettings
from tests.support.vector_stores import ADAPTERS, open_store
from tests.unit.unit_kit import HashEmbedder

USER = Scope(tenant="t1", user_id="ana")


def _ranker(**settings: float) -> Ranker:
    return Ranker(RetrievalSettings(**settings), NullObserver(), BM25Encoder())  # type: ignore[arg-type]


def _pool() -> CandidatePool:
    return CandidatePool(BM25Encoder(), {}, None)


def _m(name: str, cosine: float, bm25: float = 0.0, **kw: object) -> Scored:
    return Scored(name, cosine=cosine, bm25=bm25, share=0.0, **kw)  # type: ignore[arg-type]


def test_picks_come_best_first_with_what_made_their_score() -> None:
    hits = [_m("low", 0.4), _m("high", 0.8, bm25=2.0), _m("mid", 0.6, bm25=1.0)]
    ranking = _ranker(relative_cutoff=0.0).rank(RankQuery("q", None, 0.0, 3), _pool(), hits)
    assert [i for i, _ in ranking.picks] == ["high", "mid", "low"]
    assert ranking.total == 3
    high = dict(ranking.picks)["high"]
    assert (high.dense, high.keyword, high.fused) == (0.8, 2.0, 1.0)
    assert high.rank == high.fused  # no lift applied
    assert high.relevance == relevance(0.8, 0.0, RetrievalSettings().keyword_weight)
    assert high.final == high.relevance  # not in a conversation: nothing lifts it
    assert (high.speaker_lift, high.time_lift, high.conversation_lift) == (0.0, 0.0, 0.0)


def test_the_lifts_show_in_the_components_of_the_memories_they_lifted() -> None:
    day = datetime(2025, 5, 3, tzinfo=UTC).timestamp()
    when = TimeWindow(day, day + 86_400)
    hits = [
        _m("ruth", 0.5, speaker="Ruth", session="s", position=1, occurred_at=day + 60),
        _m("ben", 0.6, speaker="Ben", session="s", position=2, occurred_at=day - 86_400),
    ]
    settings = RetrievalSettings()
    ranking = _ranker().rank(RankQuery("what did Ruth say", when, 0.0, 2), _pool(), hits)
    components = dict(ranking.picks)
    ruth, ben = components["ruth"], components["ben"]
    assert (ruth.speaker_lift, ruth.time_lift) == (settings.speaker_lift, settings.time_lift)
    assert (ben.speaker_lift, ben.time_lift) == (0.0, 0.0)
    # Neighbours in one session lift each other by the best of them.
    assert ben.conversation_lift > 0 and ruth.conversation_lift > 0
    assert ruth.rank == pytest.approx(
        ruth.fused + ruth.speaker_lift + ruth.time_lift + ruth.conversation_lift
    )
    # The lifts reorder; the score callers see stays the memory's relevance, lifted by
    # its conversation only.
    assert ruth.final >= ruth.relevance


def test_a_when_question_lifts_the_memory_that_tells_a_time() -> None:
    # Close in the fused score (scaled over the pool: the aside is its bottom).
    hits = [
        _m("story", 0.60, content="Tomás: the boat went over and I swam back to the dock"),
        _m("dated", 0.59, content="Tomás: I capsized last Sunday, first time ever"),
        _m("aside", 0.2, content="Priya: ha, of course you did"),
    ]
    ranker = _ranker(relative_cutoff=0.0)

    asked_when = ranker.rank(RankQuery("When did Tomás capsize?", None, 0.0, 2), _pool(), hits)
    assert [i for i, _ in asked_when.picks] == ["dated", "story"]
    dated = dict(asked_when.picks)["dated"]
    assert dated.when_lift == RetrievalSettings().when_lift
    assert dated.rank == pytest.approx(dated.fused + dated.when_lift)
    assert dict(asked_when.picks)["story"].when_lift == 0.0
    # It reorders only: the score callers see is the memory's relevance.
    assert dated.final == dated.relevance


def test_only_a_when_question_lifts_a_told_time_and_zero_turns_it_off() -> None:
    def order(query: str, **settings: float) -> list[str]:
        hits = [
            _m("story", 0.60, content="the boat went over"),
            _m("dated", 0.59, content="I capsized last Sunday"),
            _m("aside", 0.2, content="ha"),
        ]
        ranking = _ranker(relative_cutoff=0.0, **settings).rank(
            RankQuery(query, None, 0.0, 2), _pool(), hits
        )
        return [i for i, _ in ranking.picks]

    assert order("Why did Tomás capsize?") == ["story", "dated"]
    assert order("When did Tomás capsize?", when_lift=0.0) == ["story", "dated"]


def test_a_speaker_named_like_a_month_tells_no_time() -> None:
    hits = [
        _m("story", 0.60, speaker="Ben", content="Ben: the boat went over"),
        _m("april", 0.59, speaker="April", content="April: I saw it go over"),
        _m("aside", 0.2, speaker="Ben", content="Ben: ha"),
    ]
    ranking = _ranker(relative_cutoff=0.0).rank(
        RankQuery("When did the boat go over?", None, 0.0, 2), _pool(), hits
    )
    assert [i for i, _ in ranking.picks] == ["story", "april"]
    assert dict(ranking.picks)["april"].when_lift == 0.0


def test_a_memory_below_the_floor_is_never_picked() -> None:
    hits = [_m("good", 0.9), _m("poor", 0.1)]
    ranking = _ranker().rank(RankQuery("q", None, 0.3, 5), _pool(), hits)
    assert [i for i, _ in ranking.picks] == ["good"] and ranking.total == 1


async def test_every_hit_of_a_retrieve_carries_its_components_and_its_score_is_final(
    engine: MemoryEngine,
) -> None:
    for text in ("I love green tea", "tea with lemon in the morning", "the garden is green"):
        await engine.add(AddCommand(scope=USER, tier=Tier.LONG_TERM, content=text))
    found = await engine.retrieve(
        RetrieveQuery(scope=USER, query="green tea", tiers=[Tier.LONG_TERM], top_k=3)
    )
    assert found.items
    for hit in found.items:
        assert hit.components is not None
        assert hit.score == hit.components.final
        assert 0.0 <= hit.components.dense <= 1.0 and hit.components.keyword > 0
    ranks = [h.components.rank - h.components.mmr_penalty for h in found.items if h.components]
    assert ranks == sorted(ranks, reverse=True)  # picked by rank less the MMR penalty
    # Records compare as memories: the explanation is not part of them.
    got = await engine.get(Lookup(scope=USER, tier=Tier.LONG_TERM, ids=[found.items[0].id]))
    assert got.items[0].components is None
    assert got.items[0].content == found.items[0].content


class ThreadsSeen(NullObserver):
    """Records which thread each store call ran on."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def store_call(self, store: str, operation: str) -> AbstractContextManager[None]:
        @contextmanager
        def seen() -> Iterator[None]:
            self.calls.append((operation, threading.current_thread() is threading.main_thread()))
            yield

        return seen()


@pytest.mark.parametrize("kind", ADAPTERS)
async def test_only_an_adapter_whose_searches_keep_the_gil_searches_on_the_event_loop(
    kind: str, tmp_path: Path
) -> None:
    seen = ThreadsSeen()
    store = open_store(kind, tmp_path, dim=HashEmbedder.dim)
    memory = VectorMemory(
        observed(store, kind, seen, skip=("generation",)),  # as the server wires it
        EmbeddingBatcher(HashEmbedder()),
        RetrievalSettings(),
        time.time,
        seen,
    )
    try:
        record = MemoryRecord(
            id="7f9c3c1e-7a43-4f1c-9e0b-2d8e4a1b5c6d", tier=Tier.LONG_TERM, content="green tea"
        )
        payload = to_payload(record, USER, "digest", 1024)
        await memory.insert([NewPoint(record, payload, record.content)])
        flt = memory.scope_filter(USER, Tier.LONG_TERM)
        found = await memory.search(flt, "green tea", 3, 0.0)
        assert [r.content for r in found.items] == ["green tea"]
    finally:
        store.close()
    on_loop = {op for op, main in seen.calls if main}
    assert on_loop == ({"search"} if kind == "edge" else set())
    assert {"upsert", "count_each"} <= {op for op, main in seen.calls if not main}
