"""Issue 28: one scope keyword and an expiry on every point, against the production filter.

    PYTHONPATH=service:benchmarks python benchmarks/scope_filter.py --users 30 --per-user 10000 \
        --data-dir /tmp/e-bench/30x10k --json 30x10k.json
    PYTHONPATH=service:benchmarks python benchmarks/scope_filter.py --users 1000 --per-user 300 \
        --data-dir /tmp/e-bench/1000x300 --json 1000x300.json

Measures, on the edge adapter (`EdgeVectorStore`, the production payload indexes), whether
the filter of a long-term search costs less as

* A (production): `VectorMemory.scope_filter(scope, LONG_TERM)`: tenant + user_id + tier
  equalities, `deleted` not true, and the live condition (no `expires_at`, or one after
  now: `term_counts.live_condition`); or as
* B (a layout it would need): `scope == "tenant|user|long_term"` and
  `expires_at_or_max > now`, two fields every point here also carries: `scope` (indexed
  as the tenant and user indexes are, `is_tenant`) is "tenant|user|tier", with "|deleted"
  after it once the memory is soft-deleted (so `deleted` folds into it), and
  `expires_at_or_max` (a float index, like `expires_at`) is `expires_at`, or FOREVER for a
  memory that never expires.

The store holds `--users` x `--per-user` memories written as the long-term tier writes them
(scale_1m's points: hash vectors from scale_kit, BM25 terms of real sentences), plus one
heavy user (`--heavy` memories) and one light user (`--light`), the two timed. Of every
user's memories some are other than the plain case, so that A and B must agree on what
they leave out: 1 in 50 soft-deleted, 1 in 20 expired, 1 in 20 expiring in 30 days, 1 in 10
of another tier (episodic).

Timed per user (`--queries` questions of evals, each call A then B or B then A, alternating,
in one process so that the shared machine's noise falls on both), the store calls of one
tier search: `count` (live memories), the hybrid `search` HybridSearch makes (dense +
sparse RRF, 2 x max(4 top_k, candidates) with vectors), `scroll` limit 1 (the empty-tier
check), `scroll` limit 1 ordered by the expiry (term_counts: the counts' window; B by its
own field: `scroll_by_expiry`, or both by `expires_at`, which B's layout keeps:
`scroll_by_expires_at`) and `count_each` of the question's first 5 terms (per-user IDF);
`all_five`: the five of a cold tier search together (the window's scroll: B by its own
field), per question. Every answer of B is compared with A's (same count, same hits with the
same scores: RRF's ties in any order, same first point, same end of the window, same term
counts), and once per timed user the whole set of points each selects.

The store is kept in `--data-dir` (loaded unless `--skip-load`). `--json` writes the report.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import qdrant_edge as qe

import memoryd.stores.vectors._common as common
from memoryd.core.memory.embedding_batcher import EmbeddingBatcher
from memoryd.core.memory.term_counts import EXPIRES_FIELD
from memoryd.core.memory.vector_memory import NewPoint, VectorMemory
from memoryd.core.models import Scope, Tier
from memoryd.settings import RetrievalSettings
from memoryd.stores.embeddings.minilm import MINILM_DIM
from memoryd.stores.vectors.edge_store import EdgeVectorStore, _edge_filter, _edge_schema
from memoryd.stores.vectors.port import (
    ORDERABLE_FIELDS,
    TERMS_FIELD,
    Filter,
    IndexKind,
    MatchValue,
    Range,
    RrfParams,
    ScoredPoint,
    SparseVector,
    VectorStore,
)
from scale_1m import TENANT, GivenVectors, embedded, new_point, user_name, user_vectors
from scale_kit import Matrix, eval_corpus, percentile

ROOT = Path(__file__).resolve().parent.parent
SCOPE_FIELD = "scope"
EXPIRY_FIELD = "expires_at_or_max"
# The expiry of a memory that never expires (year 9999): after every clock.
FOREVER = 253_402_300_799.0
CALLS = ("count", "search", "scroll_1", "scroll_by_expiry", "scroll_by_expires_at", "count_each_5")
# The store calls of a tier search whose counts are not kept (a cold one), together.
TIER_CALLS = frozenset(CALLS) - {"scroll_by_expires_at"}
ALL = "all_five"
DAY = 86_400.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def scope_value(tenant: str, user: str, tier: str, deleted: bool) -> str:
    return f"{tenant}|{user}|{tier}" + ("|deleted" if deleted else "")


def add_index(store: EdgeVectorStore, name: str, kind: IndexKind) -> None:
    """The index the adapter would create for `kind` (a field it does not know of yet)."""
    shard = store._shard
    if name not in set(shard.info().payload_schema):
        shard.update(qe.UpdateOperation.create_field_index(name, _edge_schema(kind)))


def lifecycle(payload: dict[str, Any], row: int, loaded_at: float) -> None:
    """Some rows deleted, expired, expiring or episodic (the same rows for every user), so
    that a tier filter has something to leave out (index_set.py varies its points so too)."""
    if row % 50 == 7:
        payload["deleted"] = True
    if row % 20 == 3:
        payload[EXPIRES_FIELD] = loaded_at - DAY
    elif row % 20 == 4:
        payload[EXPIRES_FIELD] = loaded_at + 30 * DAY + row
    if row % 10 == 5:
        payload["tier"] = Tier.EPISODIC.value


def varied(point: NewPoint, row: int, loaded_at: float) -> NewPoint:
    """The point with `lifecycle`'s variety and B's two fields."""
    payload = point.payload
    lifecycle(payload, row, loaded_at)
    payload[SCOPE_FIELD] = scope_value(
        payload["tenant"], payload["user_id"], payload["tier"], bool(payload["deleted"])
    )
    expires = payload.get(EXPIRES_FIELD)
    payload[EXPIRY_FIELD] = FOREVER if expires is None else float(expires)
    return point


async def load(
    memory: VectorMemory, sentences: list[str], base: Matrix, sizes: dict[int, int], batch: int
) -> dict[str, float]:
    started = time.perf_counter()
    loaded_at = time.time()
    points: list[NewPoint] = []
    total = 0
    for n, (user, count) in enumerate(sizes.items()):
        a, b, vectors = user_vectors(base, user, count, 7)
        for row in range(count):
            text = f"{sentences[a[row]]} {sentences[b[row]]}"
            points.append(varied(new_point(text, user, row, vectors[row].tolist()), row, loaded_at))
            if len(points) == batch:
                await memory.insert(points)
                total += len(points)
                points = []
        if (n + 1) % max(1, len(sizes) // 20) == 0 or n + 1 == len(sizes):
            if points:
                await memory.insert(points)
                total += len(points)
                points = []
            log(f"loaded {n + 1:,}/{len(sizes):,} users, {total:,} memories")
    memory.store.flush()
    elapsed = time.perf_counter() - started
    return {"load_s": elapsed, "load_per_s": total / elapsed}


def filter_b(user: str, now: float) -> Filter:
    return Filter(
        must=[
            MatchValue(SCOPE_FIELD, scope_value(TENANT, user, Tier.LONG_TERM.value, False)),
            Range(EXPIRY_FIELD, gt=now),
        ]
    )


def all_ids(store: VectorStore, flt: Filter) -> set[str]:
    ids: set[str] = set()
    offset = None
    while True:
        points, offset = store.scroll(flt, limit=1000, offset=offset)
        ids.update(p.id for p in points)
        if offset is None:
            return ids


def window_end(points: list[Any], field: str) -> float:
    """term_counts' end of the counts' window from its ordered scroll (inf: none expires)."""
    first = points[0].payload.get(field) if points else None
    if not isinstance(first, int | float) or first >= FOREVER:
        return math.inf
    return float(first)


def ranking(hits: list[ScoredPoint]) -> list[tuple[float, frozenset[str]]]:
    """The hits as (score, ids of that score), best first, the last score's left out: RRF
    gives points of equal ranks equal scores, whose order (and, at the limit, which of
    them are kept) the engine leaves open."""
    groups: dict[float, set[str]] = {}
    for hit in hits:
        groups.setdefault(hit.score, set()).add(hit.id)
    return [(score, frozenset(ids)) for score, ids in groups.items()][:-1]


@dataclass(frozen=True)
class Asked:
    """One question: its vectors, the terms counted of it, the search's fusion and limit."""

    dense: list[float]
    sparse: SparseVector
    terms: list[int]
    fusion: RrfParams
    limit: int


def ask(store: VectorStore, call: str, flt: Filter, expiry: str, asked: Asked) -> Any:
    """Store call `call` of a tier search with `flt` (`expiry`: the field the window's
    scroll orders by); what it answers, to compare."""
    if call == "count":
        return store.count(flt)
    if call == "search":
        hits = store.search(
            flt,
            dense=asked.dense,
            sparse=asked.sparse if asked.sparse.indices else None,
            limit=asked.limit,
            fusion=asked.fusion,
            with_vectors=True,
        )
        return ranking(hits)
    if call == "scroll_1":
        return [p.id for p in store.scroll(flt, limit=1)[0]]
    if call == "scroll_by_expiry":
        return window_end(store.scroll(flt, limit=1, order_by=expiry)[0], expiry)
    if call == "scroll_by_expires_at":
        return window_end(store.scroll(flt, limit=1, order_by=EXPIRES_FIELD)[0], EXPIRES_FIELD)
    return store.count_each(flt, TERMS_FIELD, asked.terms)


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(samples, 50),
        "p99_ms": percentile(samples, 99),
        "mean_ms": sum(samples) / len(samples),
    }


def time_user(
    memory: VectorMemory,
    user: int,
    questions: list[str],
    qvecs: Matrix,
    queries: int,
    rng: random.Random,
) -> dict[str, Any]:
    store = memory.store
    name = user_name(user)
    scope = Scope(TENANT, name)
    retrieval = RetrievalSettings()
    per_source = max(4 * 10, retrieval.candidates)
    fusion = RrfParams(
        k=retrieval.rrf_k,
        dense_weight=retrieval.dense_weight,
        sparse_weight=retrieval.sparse_weight,
        prefetch_limit=per_source,
    )
    encoder = memory._encoder
    now = time.time()
    fa, fb = memory.scope_filter(scope, Tier.LONG_TERM), filter_b(name, now)
    selected_a, selected_b = all_ids(store, fa), all_ids(store, fb)
    samples: dict[str, dict[str, list[float]]] = {c: {"A": [], "B": []} for c in CALLS}
    differ: dict[str, int] = dict.fromkeys(CALLS, 0)
    for i in range(queries):
        qi = rng.randrange(len(questions))
        sparse = encoder.encode_query(questions[qi])
        dense = qvecs[qi].tolist()
        asked = Asked(dense, sparse, list(sparse.indices)[:5] or [0], fusion, 2 * per_source)
        now = time.time()
        filters = {"A": memory.scope_filter(scope, Tier.LONG_TERM), "B": filter_b(name, now)}
        expiry = {"A": EXPIRES_FIELD, "B": EXPIRY_FIELD}
        order = ("A", "B") if i % 2 == 0 else ("B", "A")
        for call in CALLS:
            answers = {}
            for variant in order:
                flt, field = filters[variant], expiry[variant]
                t0 = time.perf_counter()
                answers[variant] = ask(store, call, flt, field, asked)
                samples[call][variant].append((time.perf_counter() - t0) * 1000)
            differ[call] += answers["A"] != answers["B"]
    samples[ALL] = {
        v: [sum(samples[c][v][i] for c in CALLS if c in TIER_CALLS) for i in range(queries)]
        for v in ("A", "B")
    }
    calls_report = {}
    for call in (*CALLS, ALL):
        a, b = summary(samples[call]["A"]), summary(samples[call]["B"])
        calls_report[call] = {"A": a, "B": b, "b_over_a_p50": b["p50_ms"] / a["p50_ms"]}
    return {
        "user": name,
        "memories": store.count(Filter(must=[MatchValue("user_id", name)])),
        "selected": len(selected_a),
        "same_points": selected_a == selected_b,
        "queries": queries,
        "answers_differing": differ,
        "calls": calls_report,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    args.data_dir.mkdir(parents=True, exist_ok=True)
    sentences, questions = eval_corpus(ROOT)
    base, qvecs = embedded(sentences, questions, "hash", 1)
    heavy, light = args.users, args.users + 1
    sizes = dict.fromkeys(range(args.users), args.per_user) | {heavy: args.heavy, light: args.light}
    store = EdgeVectorStore(args.data_dir / "vectors", dim=MINILM_DIM)
    add_index(store, SCOPE_FIELD, IndexKind.TENANT_KEYWORD)
    add_index(store, EXPIRY_FIELD, IndexKind.FLOAT)
    # B's window scroll orders by its own expiry field, which the port does not list.
    # (check_orderable reads the set _common imported from the port.)
    vars(common)["ORDERABLE_FIELDS"] = ORDERABLE_FIELDS | {EXPIRY_FIELD}
    batcher = EmbeddingBatcher(GivenVectors())
    memory = VectorMemory(store, batcher, RetrievalSettings(), clock=time.time)
    result: dict[str, Any] = {
        "users": args.users,
        "per_user": args.per_user,
        "heavy": args.heavy,
        "light": args.light,
        "data_dir": str(args.data_dir),
    }
    if not args.skip_load:
        result |= await load(memory, sentences, base, sizes, args.batch)
    result["count"] = store.count()
    flt = memory.scope_filter(Scope(TENANT, user_name(heavy)), Tier.LONG_TERM)
    result["filter_a"] = repr(flt)
    result["filter_a_edge"] = repr(_edge_filter(flt))
    result["filter_b"] = repr(filter_b(user_name(heavy), time.time()))
    log(f"count {result['count']:,}\nA: {result['filter_a']}\nB: {result['filter_b']}")
    rng = random.Random(args.seed)
    # Warm-up (page cache, the engine's first reads), not counted.
    time_user(memory, heavy, questions, qvecs, 4, random.Random(0))
    time_user(memory, light, questions, qvecs, 4, random.Random(0))
    others = rng.sample(range(args.users), min(args.check_users, args.users))
    now = time.time()
    result["other_users_same_count"] = all(
        store.count(memory.scope_filter(Scope(TENANT, user_name(u)), Tier.LONG_TERM))
        == store.count(filter_b(user_name(u), now))
        for u in others
    )
    result["timed"] = {}
    for label, user in (("heavy", heavy), ("light", light)):
        result["timed"][label] = time_user(memory, user, questions, qvecs, args.queries, rng)
        log(f"{label}: {json.dumps(result['timed'][label])}")
    await batcher.close()
    store.close()
    return result


def table(result: dict[str, Any]) -> str:
    """The A/B rows of a run's `timed` section (index_set.py prints its own with it)."""
    lines = ["| user | call | A p50 / p99 ms | B p50 / p99 ms | B/A p50 | answers differing |"]
    lines.append("|---|---|---|---|---|---|")
    for label, timed in result["timed"].items():
        for call, row in timed["calls"].items():
            a, b = row["A"], row["B"]
            lines.append(
                f"| {label} ({timed['memories']:,}) | {call} | {a['p50_ms']:.2f} / "
                f"{a['p99_ms']:.2f} | {b['p50_ms']:.2f} / {b['p99_ms']:.2f} | "
                f"{row['b_over_a_p50']:.2f} | {timed['answers_differing'].get(call, '')} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=30, help="background users")
    parser.add_argument("--per-user", type=int, default=10_000)
    parser.add_argument("--heavy", type=int, default=10_000, help="the heavy timed user's")
    parser.add_argument("--light", type=int, default=300, help="the light timed user's")
    parser.add_argument("--queries", type=int, default=200, help="per timed user and variant")
    parser.add_argument("--check-users", type=int, default=20, help="other users whose counts")
    parser.add_argument("--batch", type=int, default=500, help="memories per upsert")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--skip-load", action="store_true", help="--data-dir already loaded")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print(json.dumps(result, indent=2))
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    ok = all(t["same_points"] for t in result["timed"].values())
    sys.exit(0 if ok and result["other_users_same_count"] else 1)


if __name__ == "__main__":
    main()
