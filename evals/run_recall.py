"""Conversation recall on both development sets, per category, per half, as the held-out
benchmark is run.

Every conversation of a set is one user; every turn is added in order through gRPC ``Add``
as a long-term memory ``"Speaker: text"`` of kind MESSAGE, with its session as
``scope.session_id`` and ``occurred_at`` its session's time (turns a second apart), exactly
as the held-out benchmark loads its conversations. Then every question is asked:

* ``Retrieve`` top_k 10 (the held-out benchmark's k): evidence R@1, R@5, R@10 from its
  first 1, 5 and 10 hits; ``Retrieve`` top_k 20 for R@20;
* ``RenderContext`` with the server's defaults (the "default block") and with each
  ``--budgets`` token budget: an evidence turn counts when its text is inside the block;
  the block's ``token_count`` is reported (p50, p95).

Recall is pooled (``harness.metrics.pooled_recall``: a question with more evidence weighs
more). Figures are given per set, per half (``tune`` / ``report``, fixed by conversation,
see evals/README.md "Two sets, two halves") and per category, and written as JSON to
``evals/reports/<label>.json`` with every question's evidence ranks, so misses can be
read without running again.

    PYTHONPATH=service .venv/bin/python evals/run_recall.py --label main-baseline
    PYTHONPATH=service .venv/bin/python evals/run_recall.py --sets synthconv --half tune

``MEMORYD_*`` variables apply to the in-process server, as for the other evals.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness.metrics import percentile, pooled_recall
from harness.server import open_target

EVALS = Path(__file__).parent
REPORTS = EVALS / "reports"
# Each set's conversations and its two halves: tune on one, report the other. longconv's
# halves are the A / B split ADR 0400 already used; synthconv's are the generator's.
SETS: dict[str, tuple[Path, dict[str, list[str]]]] = {
    "longconv": (
        EVALS / "longconv" / "data",
        {"tune": ["conv-1", "conv-2"], "report": ["conv-3", "conv-4"]},
    ),
    "synthconv": (
        EVALS / "synthconv" / "data",
        {
            "tune": ["sconv-1", "sconv-2", "sconv-3"],
            "report": ["sconv-4", "sconv-5", "sconv-6"],
        },
    ),
}
KS = (1, 5, 10, 20)
RENDER_MS: list[float] = []  # each default RenderContext call, ms
CATEGORIES = ("single-hop", "multi-hop", "temporal", "open-domain")


@dataclass
class Asked:
    """One question and what came back for it."""

    set: str
    half: str
    conversation: str
    category: str
    text: str
    evidence: list[str]
    ranks: dict[str, int | None] = field(default_factory=dict)  # evidence -> rank, top_k 10
    ranks20: dict[str, int | None] = field(default_factory=dict)  # the same, top_k 20
    blocks: dict[str, tuple[list[str], int]] = field(
        default_factory=dict
    )  # budget -> inside, tokens

    def found_at(self, k: int) -> tuple[int, int]:
        ranks = self.ranks if k <= 10 else self.ranks20
        hits = sum(1 for r in ranks.values() if r is not None and r <= k)
        return hits, len(self.evidence)

    def found_in(self, block: str) -> tuple[int, int]:
        return len(self.blocks[block][0]), len(self.evidence)


def load_set(name: str, halves: Sequence[str]) -> list[dict[str, Any]]:
    data, split = SETS[name]
    wanted = {c for h in halves for c in split[h]}
    conversations = [json.loads(p.read_text()) for p in sorted(data.glob("*.json"))]
    return [c for c in conversations if c["id"] in wanted]


def turn_content(turn: dict[str, Any]) -> str:
    """A turn as the held-out protocol adds it: ``"Speaker: text"``, no speaker metadata."""
    return f"{turn['speaker']}: {turn['text']}"


def half_of(set_name: str, conversation: str) -> str:
    return next(h for h, ids in SETS[set_name][1].items() if conversation in ids)


async def run(
    sets: dict[str, list[dict[str, Any]]],
    budgets: Sequence[int],
    target: str | None,
    render_top_k: int = 0,
    render_window: int = 0,
) -> tuple[list[Asked], list[float]]:
    from memoryd.v1 import memory_pb2 as pb

    asked: list[Asked] = []
    latencies: list[float] = []
    render_ms = RENDER_MS
    async with open_target(target) as stub:
        for set_name, conversations in sets.items():
            for c in conversations:
                user = f"recall-{set_name}-{c['id']}-{time.time_ns()}"
                ids: dict[str, str] = {}  # memory id -> turn id
                texts: dict[str, str] = {}  # turn id -> content as stored
                started = time.perf_counter()
                for session in c["sessions"]:
                    scope = pb.Scope(user_id=user, session_id=f"s{session['session']}")
                    at = datetime.strptime(session["date"], "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
                    for n, turn in enumerate(session["turns"]):
                        content = turn_content(turn)
                        request = pb.AddRequest(
                            scope=scope,
                            tier=pb.TIER_LONG_TERM,
                            kind=pb.KIND_MESSAGE,
                            content=content,
                        )
                        request.occurred_at.FromDatetime(at + timedelta(seconds=n))
                        added = await stub.Add(request)
                        ids[added.memory_id] = turn["id"]
                        texts[turn["id"]] = content
                print(
                    f"  {set_name}/{c['id']}: {len(ids)} turns in "
                    f"{time.perf_counter() - started:.0f} s",
                    flush=True,
                )
                scope = pb.Scope(user_id=user)
                for q in c["questions"]:
                    a = Asked(
                        set_name, half_of(set_name, c["id"]), c["id"], q["category"], q["q"],
                        list(q["evidence"]),
                    )  # fmt: skip
                    t0 = time.perf_counter()
                    ten = await stub.Retrieve(
                        pb.RetrieveRequest(
                            scope=scope, tiers=[pb.TIER_LONG_TERM], query=a.text, top_k=10
                        )
                    )
                    latencies.append((time.perf_counter() - t0) * 1000)
                    twenty = await stub.Retrieve(
                        pb.RetrieveRequest(
                            scope=scope, tiers=[pb.TIER_LONG_TERM], query=a.text, top_k=20
                        )
                    )
                    first = [ids.get(i.id) for i in ten.items]
                    wide = [ids.get(i.id) for i in twenty.items]
                    for e in a.evidence:
                        # R@1..10 from the top_k 10 answer (as the held-out benchmark asks);
                        # R@20 from the top_k 20 one (a larger top_k ranks a larger pool).
                        a.ranks[e] = first.index(e) + 1 if e in first else None
                        a.ranks20[e] = wide.index(e) + 1 if e in wide else None
                    for budget in [0, *budgets]:
                        render = pb.RenderContextRequest(
                            scope=scope, tiers=[pb.TIER_LONG_TERM], query=a.text
                        )
                        if budget:  # the default block is asked with no other field
                            render.top_k = render_top_k
                            render.context_window = render_window
                        if budget:
                            render.token_budget = budget
                        t0 = time.perf_counter()
                        block = await stub.RenderContext(render)
                        if not budget:
                            render_ms.append((time.perf_counter() - t0) * 1000)
                        shown = html.unescape(block.context)
                        inside = [e for e in a.evidence if texts[e] in shown]
                        a.blocks[str(budget or "default")] = (inside, block.token_count)
                    asked.append(a)
    return asked, latencies


def summarize(asked: Sequence[Asked]) -> dict[str, Any]:
    """Recall at each k and inside each block, per category and in total; block tokens."""
    blocks = sorted({b for a in asked for b in a.blocks}, key=lambda b: (b != "default", b))

    def figures(group: Sequence[Asked]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "questions": len(group),
            "evidence": sum(len(a.evidence) for a in group),
        }
        for k in KS:
            out[f"R@{k}"] = round(pooled_recall([a.found_at(k) for a in group]), 3)
        for b in blocks:
            out[f"block {b}"] = round(pooled_recall([a.found_in(b) for a in group]), 3)
        return out

    result: dict[str, Any] = {"total": figures(asked), "categories": {}}
    for category in CATEGORIES:
        group = [a for a in asked if a.category == category]
        if group:
            result["categories"][category] = figures(group)
    result["block tokens"] = {
        b: {
            "p50": percentile([float(a.blocks[b][1]) for a in asked], 50),
            "p95": percentile([float(a.blocks[b][1]) for a in asked], 95),
            "max": max((a.blocks[b][1] for a in asked), default=0),
        }
        for b in blocks
    }
    return result


def report(asked: Sequence[Asked], latencies: Sequence[float], label: str) -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=EVALS
    ).stdout.strip()
    out: dict[str, Any] = {
        "label": label,
        "commit": commit,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "settings": {k: v for k, v in sorted(os.environ.items()) if k.startswith("MEMORYD_")},
        "retrieve_ms": {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95)},
        "render_context_ms": {
            "p50": percentile(RENDER_MS, 50),
            "p95": percentile(RENDER_MS, 95),
        },
        "sets": {},
    }
    for set_name in sorted({a.set for a in asked}):
        of_set = [a for a in asked if a.set == set_name]
        out["sets"][set_name] = {"all": summarize(of_set)}
        for half in sorted({a.half for a in of_set}):
            out["sets"][set_name][half] = summarize([a for a in of_set if a.half == half])
    out["questions"] = [
        {
            "set": a.set,
            "conversation": a.conversation,
            "category": a.category,
            "q": a.text,
            "evidence": a.evidence,
            "ranks": a.ranks,
            "ranks20": a.ranks20,
            "blocks": {b: {"inside": i, "tokens": t} for b, (i, t) in a.blocks.items()},
        }
        for a in asked
    ]
    return out


def print_report(out: dict[str, Any]) -> None:
    for set_name, halves in out["sets"].items():
        for half, figures in halves.items():
            total = figures["total"]
            columns = [c for c in total if c not in ("questions", "evidence")]
            print(f"\n{set_name} / {half}: {total['questions']} questions, "
                  f"{total['evidence']} evidence turns")  # fmt: skip
            print(f"  {'':<12} " + " ".join(f"{c:>13}" for c in columns))
            rows = [*figures["categories"].items(), ("total", total)]
            for name, row in rows:
                print(f"  {name:<12} " + " ".join(f"{row[c]:>13.3f}" for c in columns))
            tokens = ", ".join(
                f"{b}: p50 {t['p50']:.0f} / p95 {t['p95']:.0f} / max {t['max']}"
                for b, t in figures["block tokens"].items()
            )
            print(f"  block tokens {tokens}")
    ms = out["retrieve_ms"]
    if ms["p50"] is not None:
        print(f"\nRetrieve top_k 10: p50 {ms['p50']:.1f} ms, p95 {ms['p95']:.1f} ms")
    ms = out["render_context_ms"]
    if ms["p50"] is not None:
        print(f"RenderContext (default): p50 {ms['p50']:.1f} ms, p95 {ms['p95']:.1f} ms")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", default="longconv,synthconv", help="comma-separated")
    parser.add_argument("--half", choices=["tune", "report", "both"], default="both")
    parser.add_argument(
        "--budgets", default="1500", help="RenderContext token budgets besides the default"
    )
    parser.add_argument(
        "--render-top-k", type=int, default=0, help="top_k sent with the --budgets blocks"
    )
    parser.add_argument(
        "--render-window",
        type=int,
        default=0,
        help="context_window sent with the --budgets blocks",
    )
    parser.add_argument("--label", default="run", help="report name: evals/reports/LABEL.json")
    parser.add_argument("--json-out", type=Path, help="instead of evals/reports/LABEL.json")
    parser.add_argument("--target", help="host:port of a running server (default in-process)")
    args = parser.parse_args(argv)
    halves = ["tune", "report"] if args.half == "both" else [args.half]
    sets = {name: load_set(name, halves) for name in args.sets.split(",")}
    budgets = [int(b) for b in args.budgets.split(",") if b]
    for name, conversations in sets.items():
        turns = sum(len(s["turns"]) for c in conversations for s in c["sessions"])
        questions = sum(len(c["questions"]) for c in conversations)
        print(f"{name}: {len(conversations)} conversations, {turns} turns, {questions} questions")
    asked, latencies = asyncio.run(
        run(sets, budgets, args.target, args.render_top_k, args.render_window)
    )
    out = report(asked, latencies, args.label)
    print_report(out)
    path = args.json_out or REPORTS / f"{args.label}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
