"""Retrieve latency for a user holding a full long-term tier (10,000 conversation turns).

    PYTHONPATH=service:. .venv/bin/python benchmarks/retrieve_at_scale.py [--memories 10000]
        [--top-k 5] [--rounds 1]

In-process engine on the embedded stores (no gRPC), so the numbers are the server's own
cost. Turns are written with pseudo-random unit vectors (a brute-force scan costs the same
whatever the vectors hold, and embedding 10,000 texts would take minutes); queries are
embedded by the real MiniLM model, each query text once (no embedding cache hit). Each
ranking step of ADR 0400/0401 is switched off in turn, so its added cost shows.
DESIGN.md §6 and issue 14: Retrieve p99 within 30 ms at 10,000 memories.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.conversation import SPEAKERS, utterance

from memoryd.app import build_app
from memoryd.core.models import AddCommand, RetrieveQuery, Scope, Tier
from memoryd.settings import Settings
from memoryd.stores.embeddings.minilm import MINILM_DIM, MINILM_NAME
from scale_kit import HashVectors


def _turn(rng: random.Random, n: int) -> str:
    return utterance(rng, 6, 18) + f" ({n})"


async def _fill(data_dir: Path, memories: int, user: str) -> None:
    # A byte quota far above the content skips summing every memory's size on each Add.
    limits = {"max_memories": memories + 10, "max_bytes": 10**12}
    settings = Settings(data_dir=data_dir, long_term=limits)
    app = await build_app(settings, embedder=HashVectors(MINILM_NAME, MINILM_DIM))
    rng = random.Random(7)
    started = time.perf_counter()
    day = 1_680_000_000.0
    for n in range(memories):
        session = f"s{n // 100}"
        await app.engine.add(
            AddCommand(
                scope=Scope(tenant="default", user_id=user, session_id=session),
                tier=Tier.LONG_TERM,
                content=_turn(rng, n),
                metadata={"speaker": SPEAKERS[n % 2]},
                occurred_at=day + (n // 100) * 86_400 * 3 + n % 100,
            )
        )
    print(f"wrote {memories:,} turns in {time.perf_counter() - started:.0f} s")
    await app.close()


def _pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def _measure(
    data_dir: Path, user: str, queries: int, top_k: int = 5, rounds: int = 1
) -> list[dict[str, Any]]:
    settings = Settings(data_dir=data_dir)
    app = await build_app(settings)
    engine = app.engine
    retrieval: Any = settings.retrieval  # the engine's own settings object, changed per row
    rng = random.Random(11)
    texts = [
        utterance(rng, 3, 8)
        + rng.choice(["", "?", " in May 2023?", " last week", f" said {rng.choice(SPEAKERS)}"])
        for _ in range(queries * 11)
    ]
    user_scope = Scope(tenant="default", user_id=user)
    await engine.retrieve(RetrieveQuery(scope=user_scope, query="warm up", top_k=5))
    defaults = {
        k: getattr(retrieval, k)
        for k in (
            "adjacency_weight",
            "speaker_lift",
            "time_lift",
            "when_lift",
            "diversity",
            "link_weight",
        )
    }
    # name, settings changed, context window, what each query is asked as
    rows: list[tuple[str, dict[str, float], int, str]] = [
        ("all steps (default)", {}, 0, "{}"),
        ("all steps, context_window 1", {}, 1, "{}"),
        ("no adjacency lift", {"adjacency_weight": 0.0}, 0, "{}"),
        ("no time lift", {"time_lift": 0.0}, 0, "{}"),
        ("no speaker lift", {"speaker_lift": 0.0}, 0, "{}"),
        ("MMR diversity 0.3", {"diversity": 0.3}, 0, "{}"),
        # The second hop (ADR 0404, off by default) acts only at top_k > link_hits.
        ("second hop on (links 0.2)", {"link_weight": 0.2}, 0, "{}"),
        # The when lift (ADR 0410) reads every candidate's text, for when-questions only.
        ("when-questions (default)", {}, 0, "When did {}"),
        ("when-questions, no when lift", {"when_lift": 0.0}, 0, "When did {}"),
    ]
    total: dict[str, list[float]] = {name: [] for name, *_ in rows}
    embedding: dict[str, list[float]] = {name: [] for name, *_ in rows}
    # CPU time of the whole process per Retrieve (every thread): on a loaded machine the
    # wall-clock figures are noise, the CPU spent per call is not.
    cpu: dict[str, float] = {name: 0.0 for name, *_ in rows}
    # With several rounds every row runs a share of its queries in each, in turn (the
    # order reversed every other round), so that a shared machine's drift hits all rows.
    for r in range(rounds):
        share = queries // rounds + (1 if r < queries % rounds else 0)
        for name, changes, window, asked in rows if r % 2 == 0 else rows[::-1]:
            for key, value in defaults.items():
                setattr(retrieval, key, changes.get(key, value))
            for _ in range(share):
                query = asked.format(texts.pop())
                started, cpu_started = time.perf_counter(), time.process_time()
                found = await engine.retrieve(
                    RetrieveQuery(
                        scope=user_scope,
                        query=query,
                        tiers=[Tier.LONG_TERM],
                        top_k=top_k,
                        context_window=window,
                    )
                )
                total[name].append((time.perf_counter() - started) * 1000)
                cpu[name] += (time.process_time() - cpu_started) * 1000
                embedding[name].append(found.embedding_ms)
    measured: list[dict[str, Any]] = []
    for name, *_ in rows:
        times, embedded = total[name], embedding[name]
        measured.append(
            {
                "row": name,
                "queries": len(times),
                "p50_ms": _pct(times, 50),
                "p99_ms": _pct(times, 99),
                "mean_ms": sum(times) / len(times),
                "cpu_ms_per_retrieve": cpu[name] / len(times),
                "embedding_p50_ms": _pct(embedded, 50),
            }
        )
        print(
            f"{name:30s} p50 {_pct(times, 50):6.1f} ms  p99 {_pct(times, 99):6.1f} ms  "
            f"mean {sum(times) / len(times):6.1f} ms  cpu {cpu[name] / len(times):5.1f} ms  "
            f"(of which embedding p50 {_pct(embedded, 50):5.1f} ms)"
        )
    await app.close()
    return measured


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200, help="per row")
    parser.add_argument("--data-dir", type=Path, help="reuse a directory written before")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--top-k", type=int, default=5, help="top_k of every Retrieve")
    parser.add_argument("--rounds", type=int, default=1, help="rows take turns in this many rounds")
    args = parser.parse_args()
    user = "scale"
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="memoryd-scale-"))
    if args.data_dir is None or not any(data_dir.iterdir()):
        asyncio.run(_fill(data_dir, args.memories, user))
    rows = asyncio.run(_measure(data_dir, user, args.queries, args.top_k, args.rounds))
    if args.json:
        result = {"memories": args.memories, "top_k": args.top_k, "rounds": args.rounds}
        result["rows"] = rows
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
