"""Long-conversation retrieval benchmark (development set).

Each conversation of ``evals/longconv/data`` is stored through gRPC ``Add`` as one user's
long-term memories, one memory per dialogue turn, and every question is run through gRPC
``Retrieve`` (long-term tier, ``top_k`` 5, server defaults otherwise). A question's
evidence turn counts as found when it is among the results; the report gives the share
of evidence found (evidence recall@k) per question category and in total.

This mirrors how a held-out public benchmark of multi-session conversations is run
against memoryd; the conversations here are our own (see evals/README.md), written to
develop retrieval without tuning to that benchmark.

    PYTHONPATH=service .venv/bin/python evals/run_longconv.py [--layout metadata|prefixed]

``--layout metadata`` (default) stores the turn text as content with the speaker and the
session date as metadata; ``prefixed`` stores "Speaker: text" as content. ``MEMORYD_*``
variables apply to the in-process server (e.g. ``MEMORYD_RETRIEVAL__MODE=keyword``).
``--min-recall`` makes it a gate (exit 1 below it). Each session is stored as a memoryd
session (``scope.session_id``) with the turns' ``occurred_at`` (the session's date, turns a
second apart); ``--context-window N`` also asks every question again with that context
window and reports the evidence found among those hits and their context turns
(``--min-context-recall``); recall@k and ``--min-recall`` stay on the plain hits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness.metrics import percentile, pooled_recall
from harness.server import open_target

DATA = Path(__file__).parent / "longconv" / "data"
Found = dict[str, list[tuple[int, int]]]


@dataclass
class Question:
    conversation: str
    text: str
    evidence: list[str]
    category: str


def load(path: Path) -> tuple[list[dict[str, Any]], list[Question]]:
    conversations = [json.loads(p.read_text()) for p in sorted(path.glob("*.json"))]
    questions = [
        Question(c["id"], q["q"], list(q["evidence"]), q["category"])
        for c in conversations
        for q in c["questions"]
    ]
    return conversations, questions


async def run(
    conversations: Sequence[dict[str, Any]],
    questions: Sequence[Question],
    layout: str,
    top_k: int,
    target: str | None,
    min_score: float | None = None,
    context_window: int = 0,
) -> tuple[Found, Found, list[float]]:
    """Per category, (evidence found, evidence total) of each question among the hits,
    and among the hits and their context turns; Retrieve ms."""
    from memoryd.v1 import memory_pb2 as pb

    found: Found = defaultdict(list)
    with_context: Found = defaultdict(list)
    latencies: list[float] = []
    returned: list[int] = []
    async with open_target(target) as stub:
        ids: dict[tuple[str, str], str] = {}  # (conversation, memory id) -> turn id
        scopes: dict[str, pb.Scope] = {}
        for c in conversations:
            user = scopes[c["id"]] = pb.Scope(user_id=f"longconv-{c['id']}-{time.time_ns()}")
            for session in c["sessions"]:
                # Each session of the conversation is a session of memoryd, imported with
                # the time it happened (turns a second apart, in order).
                scope = pb.Scope(user_id=user.user_id, session_id=f"s{session['session']}")
                started_at = datetime.strptime(session["date"], "%Y-%m-%d %H:%M")
                for n, turn in enumerate(session["turns"]):
                    if layout == "prefixed":
                        request = pb.AddRequest(
                            scope=scope,
                            tier=pb.TIER_LONG_TERM,
                            content=f"{turn['speaker']}: {turn['text']}",
                        )
                    else:
                        request = pb.AddRequest(
                            scope=scope,
                            tier=pb.TIER_LONG_TERM,
                            content=turn["text"],
                            metadata={"speaker": turn["speaker"], "date": session["date"]},
                        )
                    when = started_at.replace(tzinfo=UTC) + timedelta(seconds=n)
                    request.occurred_at.FromDatetime(when)
                    added = await stub.Add(request)
                    ids[(c["id"], added.memory_id)] = turn["id"]
        for q in questions:
            # Plain (the hits are what R@k measures), then with the context window asked:
            # evidence among a hit's neighbouring turns counts there too.
            for window in sorted({0, context_window}):
                started = time.perf_counter()
                reply = await stub.Retrieve(
                    pb.RetrieveRequest(
                        scope=scopes[q.conversation],
                        tiers=[pb.TIER_LONG_TERM],
                        query=q.text,
                        top_k=top_k,
                        min_score=min_score,
                        context_window=window,
                    )
                )
                got = {ids.get((q.conversation, item.id)) for item in reply.items}
                if window == 0:
                    latencies.append((time.perf_counter() - started) * 1000)
                    found[q.category].append((sum(e in got for e in q.evidence), len(q.evidence)))
                    returned.append(len(reply.items))
                if window == context_window:
                    around = [c.id for item in reply.items for c in item.context]
                    shown = got | {ids.get((q.conversation, i)) for i in around}
                    hits = sum(e in shown for e in q.evidence)
                    with_context[q.category].append((hits, len(q.evidence)))
    print(f"mean items returned: {sum(returned) / max(1, len(returned)):.2f}")
    return found, with_context, latencies


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--layout", choices=["metadata", "prefixed"], default="metadata")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--target", help="host:port of a running server (default in-process)")
    parser.add_argument("--min-score", type=float, help="sent with every Retrieve")
    parser.add_argument(
        "--context-window",
        type=int,
        default=0,
        help="each question is also asked with this context window; evidence among those "
        "hits and their context turns is reported apart (--min-context-recall)",
    )
    parser.add_argument(
        "--min-recall", type=float, default=0.0, help="gate on the hits (no context window)"
    )
    parser.add_argument(
        "--min-context-recall",
        type=float,
        default=0.0,
        help="gate on the hits and their context turns (with --context-window)",
    )
    args = parser.parse_args(argv)
    conversations, questions = load(args.data)
    turns = sum(len(s["turns"]) for c in conversations for s in c["sessions"])
    print(f"{len(conversations)} conversations, {turns} turns, {len(questions)} questions")
    found, with_context, latencies = asyncio.run(
        run(
            conversations,
            questions,
            args.layout,
            args.top_k,
            args.target,
            args.min_score,
            args.context_window,
        )
    )
    for category in sorted(found):
        pairs = found[category]
        line = f"  {category:<12} {pooled_recall(pairs):.3f}  ({len(pairs)} questions)"
        if args.context_window:
            line += f"  with context {pooled_recall(with_context[category]):.3f}"
        print(line)
    total = pooled_recall([p for pairs in found.values() for p in pairs])
    p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
    print(f"evidence recall@{args.top_k}: {total:.3f} (layout {args.layout})")
    shown = pooled_recall([p for pairs in with_context.values() for p in pairs])
    if args.context_window:
        print(f"with context window {args.context_window}: {shown:.3f}")
    print(f"Retrieve p50 {p50:.1f} ms, p95 {p95:.1f} ms" if p50 and p95 else "")
    return 0 if total >= args.min_recall and shown >= args.min_context_recall else 1


if __name__ == "__main__":
    sys.exit(main())
