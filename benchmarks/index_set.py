"""Issue 28: every production payload index (A) against a reduced set (B), on the edge engine.

    PYTHONPATH=service:benchmarks python benchmarks/index_set.py --users 20 --per-user 10000 \
        --data-dir /tmp/h-bench/20x10k --json 20x10k.json
    PYTHONPATH=service:benchmarks python benchmarks/index_set.py --users 20 --per-user 10000 \
        --data-dir /tmp/h-bench/20x10k --steps open,time --json 20x10k-again.json

Two stores of the same memories, written by the production write path (`VectorMemory.insert`,
scale_1m's long-term points, hash vectors), one with the adapter's `PAYLOAD_INDEXES` (A), one
without the `--drop` ones (B). By default B keeps only `KEPT`: the tenant and user indexes
(`is_tenant`), the turn keys, the term ids (per-user IDF counts) and the float fields
ordered by (`order_by`: created_at, position, expires_at) or ranged (occurred_at,
created_at, expires_at, position). `DROPPED` says what each droppable index served. The
service's `PAYLOAD_INDEXES` are not changed: B opens its store with the module's tuple
replaced for that open only (the adapter creates the missing ones at open).

Every user's memories are long-term notes except some rows (the same for every user): 1 in
50 soft-deleted, 1 in 20 expired, 1 in 20 expiring in 30 days, 1 in 10 episodic (an agent
of three), 1 in 100 persona facts (a key each). `--users` x `--per-user` memories, the heavy
timed user being user 0, plus a light user (`--light` memories).

Steps (`--steps`, comma-separated; default build,open,time):

* `build`: writes A then B, each in a fresh process (`--data-dir`/A, /B);
* `derive` (instead of building B): B as a copy of A whose dropped indexes are deleted;
* `open`: `--open-rounds` rounds, each opening A then B (B then A every other round), each
  in a fresh process: open time, VmRSS / RssAnon / RssFile before and after;
* `time`: both stores open in one process; for the heavy and the light user, `--queries`
  questions, each store call once on A and once on B (A first on even questions, B first on
  odd ones): p50 / p99 per call and store, and whether the answers are equal (searches: the
  dense and the sparse search of the same filter, untimed, give the same hits with the
  same scores to 4 decimals, ties in any order: the order of a source's ties moves the
  fused scores, so the fused rankings are only reported as `fused_rankings_differing`;
  scrolls: the same points in the same order; counts: the same number). Calls: `CALLS`
  (user-less ones timed with the heavy user only).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import qdrant_edge as qe

import memoryd.stores.vectors.edge_store as edge_store
from memoryd.core.memory.embedding_batcher import EmbeddingBatcher
from memoryd.core.memory.payload import TURN_FIELD, turn_key
from memoryd.core.memory.term_counts import EXPIRES_FIELD
from memoryd.core.memory.vector_memory import PAGE_SIZE, NewPoint, VectorMemory
from memoryd.core.models import Scope, Tier
from memoryd.settings import RetrievalSettings
from memoryd.stores.embeddings.minilm import MINILM_DIM
from memoryd.stores.vectors.edge_store import EdgeVectorStore
from memoryd.stores.vectors.port import (
    PAYLOAD_INDEXES,
    TERMS_FIELD,
    Filter,
    IndexKind,
    MatchAny,
    MatchValue,
    Range,
    RrfParams,
    ScoredPoint,
    VectorStore,
)
from scale_1m import TENANT, GivenVectors, embedded, new_point, user_name, user_vectors
from scale_kit import Matrix, eval_corpus
from scope_filter import lifecycle, ranking, summary, table

ROOT = Path(__file__).resolve().parent.parent
DAY = 86_400.0
KEPT = frozenset(
    {
        "tenant",
        "user_id",
        TURN_FIELD,
        TERMS_FIELD,
        "created_at",
        "expires_at",
        "occurred_at",
        "position",
    }
)
# What each dropped index served (the service's filters on it; all but the survey's under
# a user's tenant + user_id filter).
DROPPED = {
    "tier": "every tier filter (scope_filter); the storage survey and owners() scan by tier alone",
    "kind": "kinds= of a Retrieve; long-term copies (kind == message)",
    "content_hash": "dedup at Add (long-term MatchAny, persona MatchValue)",
    "session_id": "the last turn of a session (long-term Add); turns without an owner",
    "agent_id": "episodic per-agent queries and usage counts",
    "task_id": "nothing here (the scope field of the working tier, which is in the hot store)",
    "key": "persona / working lookups by key",
    "deleted": "must_not deleted of every live filter; purge of soft-deleted",
    "updated_at": "nothing (no filter, no order_by)",
}
# The dropped indexes by default; `--drop` names another set (of DROPPED's).
DROP = ",".join(name for name, _ in PAYLOAD_INDEXES if name not in KEPT)
VARIANTS = ("A", "B")
CALLS = (
    "search",
    "count",
    "count_each_5",
    "turns",
    "last_turn",
    "dedup",
    "persona_keys",
    "episodic_agent_search",
    "purge_expired_count",
    "expired_all_users_count",
    "survey_page",
)
# Compared by their sources' rankings; how often the fused ranking differs is reported.
SEARCHES = ("search", "episodic_agent_search")
# Calls with no user in their filter: timed once (with the heavy user).
GLOBAL_CALLS = frozenset({"expired_all_users_count", "survey_page"})


def rounded(hits: list[ScoredPoint]) -> list[tuple[float, frozenset[str]]]:
    """`ranking` of scores rounded to 4 decimals: a sparse search scored without a payload
    index for its filter sums the same products in another order (same scores to ~1e-6)."""
    return ranking([dataclasses.replace(h, score=round(h.score, 4)) for h in hits])


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def status_mib() -> dict[str, float]:
    """VmRSS, RssAnon and RssFile of this process, MiB."""
    out: dict[str, float] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile"):
            out[name] = int(value.split()[0]) / 1024
    return out


def reduced(drop: str) -> tuple[tuple[str, IndexKind], ...]:
    """The production indexes less those named in `drop` (comma-separated)."""
    dropped = set(drop.split(","))
    if not dropped <= set(DROPPED):
        raise SystemExit(f"--drop: only {sorted(DROPPED)} may be dropped")
    return tuple((name, kind) for name, kind in PAYLOAD_INDEXES if name not in dropped)


def open_variant(data_dir: Path, variant: str, drop: str = DROP) -> EdgeVectorStore:
    """The store of `variant`; B's adapter creates only the reduced set of indexes."""
    path = data_dir / variant
    if variant == "A":
        return EdgeVectorStore(path, dim=MINILM_DIM)
    kept = vars(edge_store)["PAYLOAD_INDEXES"]
    vars(edge_store)["PAYLOAD_INDEXES"] = reduced(drop)
    try:
        return EdgeVectorStore(path, dim=MINILM_DIM)
    finally:
        vars(edge_store)["PAYLOAD_INDEXES"] = kept


def varied(point: NewPoint, row: int, loaded_at: float) -> NewPoint:
    """Some rows deleted, expired, expiring, episodic or persona (the same for every user)."""
    payload = point.payload
    lifecycle(payload, row, loaded_at)
    if row % 10 == 5:
        payload["kind"] = "episode"
        payload["agent_id"] = f"agent-{row % 3}"
    elif row % 100 == 13:
        payload["tier"] = Tier.PERSONA.value
        payload["kind"] = "fact"
        payload["key"] = f"k{row}"
    return point


async def build(args: argparse.Namespace, variant: str) -> dict[str, Any]:
    sentences, questions = eval_corpus(ROOT)
    base, _ = embedded(sentences, questions, "hash", 1)
    store = open_variant(args.data_dir, variant, args.drop)
    batcher = EmbeddingBatcher(GivenVectors())
    memory = VectorMemory(store, batcher, RetrievalSettings(), clock=time.time)
    sizes = dict.fromkeys(range(args.users), args.per_user) | {args.users: args.light}
    started = time.perf_counter()
    loaded_at = time.time()
    points: list[NewPoint] = []
    total = 0
    for n, (user, count) in enumerate(sizes.items()):
        a, b, vectors = user_vectors(base, user, count, 7)
        for row in range(count):
            text = f"{sentences[a[row]]} {sentences[b[row]]}"
            points.append(varied(new_point(text, user, row, vectors[row].tolist()), row, loaded_at))
            if len(points) == args.batch or (n + 1 == len(sizes) and row + 1 == count):
                await memory.insert(points)
                total += len(points)
                points = []
        log(f"{variant}: loaded {n + 1}/{len(sizes)} users, {total:,} memories")
    store.flush()
    elapsed = time.perf_counter() - started
    result = {
        "variant": variant,
        "indexes": sorted(store._shard.info().payload_schema),
        "count": store.count(),
        "load_s": elapsed,
        "load_per_s": total / elapsed,
        "rss_after_load_mib": status_mib(),
    }
    await batcher.close()
    store.close()
    return result


def derive(args: argparse.Namespace) -> dict[str, Any]:
    """B as a copy of A less the dropped indexes (quicker than writing B at 1M)."""
    started = time.perf_counter()
    target = args.data_dir / "B"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(args.data_dir / "A", target)
    store = open_variant(args.data_dir, "B", args.drop)
    for name in args.drop.split(","):
        store._shard.update(qe.UpdateOperation.delete_field_index(name))
    store.flush()
    indexes = sorted(store._shard.info().payload_schema)
    store.close()
    return {"derive_s": time.perf_counter() - started, "indexes": indexes}


def open_once(args: argparse.Namespace, variant: str) -> dict[str, Any]:
    before = status_mib()
    t0 = time.perf_counter()
    store = open_variant(args.data_dir, variant, args.drop)
    open_s = time.perf_counter() - t0
    after = status_mib()
    count = store.count()
    result: dict[str, Any] = {
        "variant": variant,
        "open_s": open_s,
        "before_mib": before,
        "after_mib": after,
        "count": count,
        "indexes": len(store._shard.info().payload_schema),
        # As the start-up page counts it: the process's RSS after open over the memories.
        "rss_per_memory_kib": after["VmRSS"] * 1024 / count,
        "anon_per_memory_kib": after["RssAnon"] * 1024 / count,
        "open_growth_per_memory_kib": (after["VmRSS"] - before["VmRSS"]) * 1024 / count,
    }
    store.close()
    return result


def in_fresh_process(args: argparse.Namespace, step: str, variant: str) -> dict[str, Any]:
    """Runs `--step-one step --variant variant` of this script; its JSON answer."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--users",
        str(args.users),
        "--per-user",
        str(args.per_user),
        "--light",
        str(args.light),
        "--batch",
        str(args.batch),
        "--drop",
        args.drop,
        "--data-dir",
        str(args.data_dir),
        "--step-one",
        step,
        "--variant",
        variant,
    ]
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=os.environ)
    sys.stderr.write(done.stderr)
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


class Caller:
    """The store calls of one user's questions, as the tiers make them."""

    def __init__(self, memory: VectorMemory, user: int, per_user: int) -> None:
        self.memory = memory
        self.name = user_name(user)
        self.per_user = per_user
        self.scope = Scope(TENANT, self.name)
        retrieval = RetrievalSettings()
        self.per_source = max(4 * 10, retrieval.candidates)
        self.fusion = RrfParams(
            k=retrieval.rrf_k,
            dense_weight=retrieval.dense_weight,
            sparse_weight=retrieval.sparse_weight,
            prefetch_limit=self.per_source,
        )

    def long_term(self, **kw: Any) -> Filter:
        return self.memory.scope_filter(self.scope, Tier.LONG_TERM, **kw)

    def digests(self, store: VectorStore, rng: random.Random) -> list[str]:
        """Three content hashes the user has and two it has not (an Add's dedup lookup)."""
        points, _ = store.scroll(self.long_term(), limit=50)
        have = [str(p.payload["content_hash"]) for p in rng.sample(points, min(3, len(points)))]
        return sorted([*have, f"{rng.getrandbits(128):032x}", f"{rng.getrandbits(128):032x}"])

    def question(
        self, store: VectorStore, text: str, dense: list[float], rng: random.Random
    ) -> dict[str, Callable[[VectorStore], Any]]:
        """Each call of `CALLS` for one question, as a function of the store."""
        memory = self.memory
        sparse = memory._encoder.encode_query(text)
        terms = list(sparse.indices)[:5] or [0]
        now = time.time()
        session_no = rng.randrange(max(1, self.per_user // 100))
        session = f"s{session_no}"
        position = rng.randrange(1, min(100, self.per_user - 100 * session_no) + 1)
        keys = [
            turn_key(TENANT, self.name, session, p)
            for p in range(max(1, position - 2), position + 3)
        ]
        digests = self.digests(store, rng)
        persona_keys = [f"k{100 * rng.randrange(max(1, self.per_user // 100)) + 13}", "k-none"]
        agent = f"agent-{rng.randrange(3)}"
        live = self.long_term()

        def search(store: VectorStore, flt: Filter) -> Any:
            return ranking(
                store.search(
                    flt,
                    dense=dense,
                    sparse=sparse if sparse.indices else None,
                    limit=2 * self.per_source,
                    fusion=self.fusion,
                    with_vectors=True,
                )
            )

        def sources(store: VectorStore, flt: Filter) -> Any:
            """Each source's hits by score (the search's answer up to the order of ties
            within a source, which moves the fused scores of the tied points)."""
            dense_hits = store.search(flt, dense=dense, limit=self.per_source)
            sparse_hits = store.search(flt, sparse=sparse, limit=self.per_source)
            return rounded(dense_hits), rounded(sparse_hits) if sparse.indices else []

        def ids(points: list[Any]) -> list[str]:
            return [p.id for p in points]

        episodic = memory.scope_filter(self.scope, Tier.EPISODIC).and_(
            MatchValue("agent_id", agent)
        )
        persona = memory.scope_filter(self.scope, Tier.PERSONA).and_(MatchAny("key", persona_keys))
        turns = live.and_(MatchAny(TURN_FIELD, keys))
        last = self.long_term(live_only=False, extra=[MatchValue("session_id", session)])
        dead = self.long_term(live_only=False).and_(Range(EXPIRES_FIELD, lte=now))
        return {
            "search": lambda s: search(s, live),
            "search_sources": lambda s: sources(s, live),
            "episodic_agent_search_sources": lambda s: sources(s, episodic),
            "count": lambda s: s.count(live),
            "count_each_5": lambda s: s.count_each(live, TERMS_FIELD, terms),
            "turns": lambda s: sorted(ids(s.scroll(turns, limit=len(keys), with_vectors=True)[0])),
            "last_turn": lambda s: ids(
                s.scroll(last, limit=1, order_by="position", descending=True)[0]
            ),
            "dedup": lambda s: ids(
                s.scroll(live.and_(MatchAny("content_hash", digests)), limit=PAGE_SIZE)[0]
            ),
            "persona_keys": lambda s: ids(
                s.scroll(persona, limit=1000, order_by="created_at", descending=True)[0]
            ),
            "episodic_agent_search": lambda s: search(s, episodic),
            "purge_expired_count": lambda s: s.count(dead),
            "expired_all_users_count": lambda s: s.count(
                Filter(must=[Range(EXPIRES_FIELD, lte=now)])
            ),
        }


def time_user(
    stores: dict[str, VectorStore],
    caller: Caller,
    questions: list[str],
    qvecs: Matrix,
    queries: int,
    rng: random.Random,
    with_global: bool,
) -> dict[str, Any]:
    calls = [c for c in CALLS if with_global or c not in GLOBAL_CALLS]
    samples: dict[str, dict[str, list[float]]] = {c: {v: [] for v in VARIANTS} for c in calls}
    differ = dict.fromkeys(calls, 0)
    fused = dict.fromkeys(SEARCHES, 0)
    survey = Filter(must=[MatchValue("tier", Tier.LONG_TERM.value)])
    cursor: dict[str, str | None] = dict.fromkeys(VARIANTS)
    for i in range(queries):
        qi = rng.randrange(len(questions))
        seed = rng.getrandbits(32)
        # The same question's arguments for both stores (the digests read from A).
        asked = caller.question(stores["A"], questions[qi], qvecs[qi].tolist(), random.Random(seed))
        order = VARIANTS if i % 2 == 0 else VARIANTS[::-1]
        for call in calls:
            answers: dict[str, Any] = {}
            for variant in order:
                store = stores[variant]
                t0 = time.perf_counter()
                if call == "survey_page":
                    points, cursor[variant] = store.scroll(
                        survey, limit=PAGE_SIZE, offset=cursor[variant]
                    )
                    answer: Any = [p.id for p in points]
                else:
                    answer = asked[call](store)
                samples[call][variant].append((time.perf_counter() - t0) * 1000)
                answers[variant] = answer
            if call in SEARCHES:
                fused[call] += answers["A"] != answers["B"]
                check = asked[f"{call}_sources"]
                answers = {v: check(stores[v]) for v in VARIANTS}
            differ[call] += answers["A"] != answers["B"]
    report = {}
    for call in calls:
        a, b = summary(samples[call]["A"]), summary(samples[call]["B"])
        report[call] = {"A": a, "B": b, "b_over_a_p50": b["p50_ms"] / a["p50_ms"]}
    return {
        "user": caller.name,
        "memories": stores["A"].count(Filter(must=[MatchValue("user_id", caller.name)])),
        "queries": queries,
        "answers_differing": differ,
        "fused_rankings_differing": fused,
        "calls": report,
    }


async def time_both(args: argparse.Namespace) -> dict[str, Any]:
    sentences, questions = eval_corpus(ROOT)
    _, qvecs = embedded(sentences, questions, "hash", 1)
    stores: dict[str, VectorStore] = {
        v: open_variant(args.data_dir, v, args.drop) for v in VARIANTS
    }
    batcher = EmbeddingBatcher(GivenVectors())
    memories = {
        v: VectorMemory(stores[v], batcher, RetrievalSettings(), clock=time.time) for v in VARIANTS
    }
    result: dict[str, Any] = {"loadavg_before": loadavg()}
    result["same_count"] = stores["A"].count() == stores["B"].count()
    users = {"heavy": (0, args.per_user), "light": (args.users, args.light)}
    # Warm-up (page cache, the engine's first reads), not counted.
    for user, size in users.values():
        time_user(
            stores, Caller(memories["A"], user, size), questions, qvecs, 3, random.Random(0), True
        )
    rng = random.Random(args.seed)
    result["timed"] = {}
    for label, (user, size) in users.items():
        caller = Caller(memories["A"], user, size)
        timed = time_user(stores, caller, questions, qvecs, args.queries, rng, label == "heavy")
        result["timed"][label] = timed
        log(f"{label}: {json.dumps(timed['answers_differing'])}")
    result["loadavg_after"] = loadavg()
    await batcher.close()
    for store in stores.values():
        store.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=20, help="users of --per-user memories")
    parser.add_argument("--per-user", type=int, default=10_000)
    parser.add_argument("--light", type=int, default=300, help="the light timed user's")
    parser.add_argument("--queries", type=int, default=200, help="per timed user")
    parser.add_argument("--open-rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000, help="memories per upsert")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--steps", default="build,open,time")
    parser.add_argument("--drop", default=DROP, help="B's dropped indexes, comma-separated")
    parser.add_argument("--build", default="A,B", help="the stores to write (A,B)")
    parser.add_argument("--step-one", choices=("build", "open"), help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.step_one:  # one step of one store, in this (fresh) process
        variant = str(args.variant)
        one = asyncio.run(build(args, variant)) if args.step_one == "build" else None
        print(json.dumps(one if one is not None else open_once(args, variant)))
        return
    steps = set(args.steps.split(","))
    result: dict[str, Any] = {
        "users": args.users,
        "per_user": args.per_user,
        "light": args.light,
        "kept": [name for name, _ in reduced(args.drop)],
        "dropped": {name: DROPPED[name] for name in args.drop.split(",")},
        "data_dir": str(args.data_dir),
    }
    if "derive" in steps:
        result["derive"] = {"loadavg_before": loadavg()} | derive(args)
    if "build" in steps:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        result["build"] = {
            v: {"loadavg_before": loadavg()} | in_fresh_process(args, "build", v)
            for v in args.build.split(",")
        }
        result["build_loadavg_after"] = loadavg()
    if "open" in steps:
        rounds = []
        for r in range(args.open_rounds):
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
            row: dict[str, Any] = {"loadavg_before": loadavg()}
            for v in order:
                row[v] = in_fresh_process(args, "open", v)
                log(f"open round {r} {v}: {row[v]['open_s']:.2f} s, {row[v]['after_mib']}")
            row["loadavg_after"] = loadavg()
            rounds.append(row)
        result["open"] = rounds
    ok = True
    if "time" in steps:
        result["time"] = asyncio.run(time_both(args))
        ok = result["time"]["same_count"] and not any(
            n for t in result["time"]["timed"].values() for n in t["answers_differing"].values()
        )
        log("\n" + table(result["time"]))
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
