"""Many long-term memories in one store: load time, RSS, disk, Retrieve latency, recall@10.

    PYTHONPATH=service:benchmarks python benchmarks/scale_1m.py --shape heavy   # 100 x 10,000
    PYTHONPATH=service:benchmarks python benchmarks/scale_1m.py --shape many    # 10,000 x 100
    PYTHONPATH=service:benchmarks python benchmarks/scale_1m.py --adapter qdrant --users 10

Two shapes of a 1M store (DESIGN.md §6): `heavy`, `--users` users with 10,000 memories
each (default 100), and `many`, 10,000 users with 100 each; `--users` and `--per-user`
override either. `--adapter` picks the vector store: `edge` (qdrant-edge, the default) or
`qdrant` (qdrant-client in local mode, the only Qdrant this machine can run).

Memories go into the vector store through the `VectorStore` port the way the long-term
tier writes them: `AddCommand.new_record` -> `to_payload` -> `VectorMemory.insert` (BM25
sparse vector, `term_ids`, one upsert per `--batch`), each with its vector given, since
embedding 1M texts with MiniLM takes hours on 2 cores:

* Vectors: the embeddings of ~2,700 distinct real sentences (the turns and their sentences
  of evals/longconv and the golden-set memories) combined per memory as
  ``normalise(e_a + w e_b + N(0, 0.015^2))``, w uniform in 0.2..0.6 (scale_kit), and the
  memory's text is sentence a followed by sentence b, so BM25 terms and dense vectors agree.
  `--corpus-vectors` says what embeds the sentences: `minilm` (torch, cached on disk),
  `onnx` (the server's default runtime, same vector space) or `hash` (hashed unit vectors:
  no model, for smoke runs; the service phase then embeds with them too).
* Queries: the real questions of evals (longconv questions, golden queries), embedded
  the same way; each measured query is a question drawn at random per user.

Measured per user sample (`--search-users`, `--queries`):

* store hybrid: the two store calls the tier's search makes (count of live memories, then
  hybrid dense+sparse RRF search for 2 x max(4 top_k, candidates) with vectors);
* tier search: `VectorMemory.search`, the long-term tier's whole ranking (same store
  calls, per-user IDF, neighbouring turns, fusion), with the query vector given;
* recall@10: dense-only store search (top 10) against exact cosine (numpy brute force
  over that user's vectors, regenerated from the seed);
* service Retrieve (`--service-users`): the engine built by `build_app` on the same data
  directory, `engine.retrieve` with a (new) query text embedded each time.

A store larger than one process's RAM allows to write (the writing process holds ~7 KB per
memory it wrote, a reopened store ~3.3 KiB) is filled in chunks, each in a fresh process:
`--first-user F --users U --data-dir D` adds users F..U-1 to the store in D, which holds
users 0..F-1 (`open_s` and `rss_after_open_mib` report opening it); `--search-users 0`
skips the searches.

A heavy user against the same user alone (`--pair-with-alone ROUNDS`, needs `--data-dir`):
each round runs the shared store, then each sampled user alone, one process each
(`--paired shared|alone`). Both ask the same users (`--search-users`) the same questions
in the same order (`--queries` each), the service phase included. Alone = a store of its
own under `--data-dir`/alone per sampled user holding exactly that user's memories (the
generator is seeded per user; a digest of each user's points is compared), built once and
reused. The per-call samples give each side's p50/p99 per round and pooled, and the
shared/alone ratios; child reports go next to `--json`.

Progress goes to stdout (flushed); `--json` writes the results.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memoryd.app import check_embedder_matches
from memoryd.core.memory import term_space
from memoryd.core.memory.embedding_batcher import EmbeddingBatcher
from memoryd.core.memory.payload import content_hash, embed_text_of, to_payload
from memoryd.core.memory.vector_memory import NewPoint, VectorMemory
from memoryd.core.models import AddCommand, Kind, RetrieveQuery, Scope, Tier
from memoryd.settings import RetrievalSettings, Settings
from memoryd.stores.embeddings.minilm import MINILM_DIM, MINILM_NAME
from memoryd.stores.embeddings.port import Embedder
from memoryd.stores.vectors.port import RrfParams, VectorStore
from scale_kit import (
    HashVectors,
    Matrix,
    eval_corpus,
    exact_top_k,
    memory_id,
    normalise,
    percentile,
    recall_at_k,
    synthetic_memories,
)

ROOT = Path(__file__).resolve().parent.parent
TENANT = "default"
SPEAKERS = ("Ana", "Ben")
DAY0 = 1_680_000_000.0
# Users x memories per user of each shape (DESIGN.md §6: 1M memories either way).
SHAPES = {"heavy": (100, 10_000), "many": (10_000, 100)}


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def disk_mib(path: Path) -> float:
    """Apparent size of the files under `path`, but the alone stores (`--paired`)."""
    files = (
        f for f in path.rglob("*") if f.is_file() and "alone" not in f.relative_to(path).parts[:1]
    )
    return sum(f.stat().st_size for f in files) / 2**20


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def corpus_embedder(kind: str, threads: int) -> Embedder:
    if kind == "hash":
        return HashVectors(MINILM_NAME, MINILM_DIM)
    if kind == "onnx":
        from memoryd.stores.embeddings import MiniLMOnnxEmbedder

        return MiniLMOnnxEmbedder(threads)
    import torch  # the thread count is process-wide: the service phase embeds with it too

    from memoryd.stores.embeddings import MiniLMEmbedder

    torch.set_num_threads(threads)
    return MiniLMEmbedder(threads=threads)


def embedded(
    sentences: list[str], questions: list[str], kind: str, threads: int
) -> tuple[Matrix, Matrix]:
    """The corpus's embeddings; a model's are cached on disk by content hash."""
    if kind == "hash":
        model = corpus_embedder(kind, threads)
        return normalise(model.embed(sentences)), normalise(model.embed(questions))
    digest = hashlib.sha256("\x00".join([kind, *sentences, "\x01", *questions]).encode())
    cache = Path.home() / ".cache/memoryd-bench" / f"corpus-{digest.hexdigest()[:16]}.npz"
    if cache.is_file():
        with np.load(cache) as saved:
            return saved["base"], saved["queries"]
    log(f"embedding {len(sentences):,} sentences and {len(questions)} questions ({kind})")
    model = corpus_embedder(kind, threads)
    base = normalise(model.embed(sentences))
    queries = normalise(model.embed(questions))
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, base=base, queries=queries)
    return base, queries


class GivenVectors:
    """An embedder answering with vectors handed to it beforehand (by text): the query
    vector of a tier search, which embeds its query through the batcher."""

    name = MINILM_NAME
    dim = MINILM_DIM

    def __init__(self) -> None:
        self.table: dict[str, list[float]] = {}

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.table[t] for t in texts]

    def warm(self) -> None:
        return None


def open_store(adapter: str, data_dir: Path, space: str = term_space.USER) -> VectorStore:
    """The store `build_app` would open for these settings (same path and collection), in
    the term space its metadata records (a new store: `space`, ADR 0601)."""
    store: VectorStore
    if adapter == "edge":
        from memoryd.stores.vectors.edge_store import EdgeVectorStore

        store = EdgeVectorStore(data_dir / "vectors", dim=MINILM_DIM)
    else:
        from memoryd.stores.vectors.qdrant_server_store import QdrantServerVectorStore

        store = QdrantServerVectorStore(dim=MINILM_DIM, path=str(data_dir / "qdrant-local"))
    check_embedder_matches(store, GivenVectors(), space)  # as `build_app` does
    spaced = term_space.in_term_space(store, store.read_meta() or {})
    if isinstance(spaced, term_space.UserTermSpace):
        # The collection's keyword statistics, counted before anything is timed.
        started = time.perf_counter()
        spaced.terms.start()
        spaced.terms.wait()
        print(f"  keyword statistics counted in {time.perf_counter() - started:.1f} s", flush=True)
    return spaced


def settings_for(adapter: str, data_dir: Path) -> Settings:
    if adapter == "edge":
        return Settings(data_dir=data_dir)
    return Settings(
        data_dir=data_dir,
        vectors={"backend": "qdrant"},
        qdrant={"location": str(data_dir / "qdrant-local")},
    )


def user_name(user: int) -> str:
    return f"user-{user:04d}"


def user_vectors(base: Matrix, user: int, per_user: int, seed: int) -> tuple[Any, Any, Matrix]:
    return synthetic_memories(base, per_user, seed * 1_000_003 + user)


def new_point(text: str, user: int, row: int, vector: list[float]) -> NewPoint:
    """Row `row` of user `user` as the long-term tier writes it, its vector given."""
    session = f"s{row // 100}"
    scope = Scope(tenant=TENANT, user_id=user_name(user), session_id=session)
    cmd = AddCommand(
        scope=scope,
        tier=Tier.LONG_TERM,
        content=text,
        metadata={"speaker": SPEAKERS[row % 2]},
    )
    now = DAY0 + row * 600.0
    record = cmd.new_record(cmd.content, Kind.NOTE, now, None)
    record.id = memory_id(user, row)
    record.occurred_at = now
    record.position = row % 100 + 1
    digest = content_hash(scope, Tier.LONG_TERM, "", record.content)
    payload = to_payload(record, scope, digest, 1024)
    return NewPoint(record, payload, embed_text_of(payload), vector=vector)


async def load(
    memory: VectorMemory,
    sentences: list[str],
    base: Matrix,
    args: argparse.Namespace,
    users: Sequence[int] | None = None,
) -> dict[str, float]:
    """Writes `users` (default: --first-user up to --users), each user's memories from its
    own seed."""
    users = range(args.first_user, args.users) if users is None else users
    started = time.perf_counter()
    last = started
    # A progress line per user of a few heavy users, per hundredth of many light ones.
    every = max(1, len(users) // 100)
    points: list[NewPoint] = []
    for n, user in enumerate(users):
        a, b, vectors = user_vectors(base, user, args.per_user, args.seed)
        for row in range(args.per_user):
            text = f"{sentences[a[row]]} {sentences[b[row]]}"
            points.append(new_point(text, user, row, vectors[row].tolist()))
            if len(points) == args.batch:
                await memory.insert(points)
                points = []
        if (n + 1) % every == 0 or n + 1 == len(users):
            if points:
                await memory.insert(points)
                points = []
            now_t = time.perf_counter()
            done = (n + 1) * args.per_user
            log(
                f"loaded user {n + 1:,}/{len(users):,} ({done:,} memories) in "
                f"{now_t - last:.1f} s; total {now_t - started:.0f} s, "
                f"{done / (now_t - started):,.0f}/s, rss {rss_mib():,.0f} MiB"
            )
            last = now_t
    memory.store.flush()
    elapsed = time.perf_counter() - started
    loaded = len(users) * args.per_user
    return {"loaded": loaded, "load_s": elapsed, "load_per_s": loaded / elapsed}


Plan = list[tuple[int, list[int]]]


def search_plan(n_questions: int, args: argparse.Namespace) -> Plan:
    """The users the search phase asks, in order, and each one's question indices: the
    same in the shared store and alone (`--paired`)."""
    rng = random.Random(args.seed)
    users = rng.sample(range(args.users), min(args.search_users, args.users))
    return [(u, [rng.randrange(n_questions) for _ in range(args.queries)]) for u in users]


class Samples:
    """Per-call latencies (ms) and recalls of the search phase, in call order."""

    def __init__(self) -> None:
        self.hybrid: list[float] = []
        self.tier: list[float] = []
        self.dense: list[float] = []
        self.recalls: list[float] = []

    def summary(self, users: int) -> dict[str, float]:
        return {
            "search_users": users,
            "queries": len(self.hybrid),
            "store_hybrid_p50_ms": percentile(self.hybrid, 50),
            "store_hybrid_p99_ms": percentile(self.hybrid, 99),
            "tier_search_p50_ms": percentile(self.tier, 50),
            "tier_search_p99_ms": percentile(self.tier, 99),
            "dense_top10_p50_ms": percentile(self.dense, 50),
            "dense_top10_p99_ms": percentile(self.dense, 99),
            "recall_at_10_mean": float(np.mean(self.recalls)),
            "recall_at_10_min": float(np.min(self.recalls)),
        }


def tier_memory(store: VectorStore) -> tuple[VectorMemory, GivenVectors, EmbeddingBatcher]:
    given = GivenVectors()
    batcher = EmbeddingBatcher(given)
    return VectorMemory(store, batcher, RetrievalSettings(), clock=time.time), given, batcher


async def warm_search(
    memory: VectorMemory, given: GivenVectors, user: int, questions: list[str], qvecs: Matrix
) -> None:
    """Warms the thread pool and the time parser, whose first query with digits loads
    dateparser (~0.4 s, once per process); also `user`'s per-user counts."""
    warm = memory.scope_filter(Scope(TENANT, user_name(user)), Tier.LONG_TERM)
    for question in ("HRN-2304 on 4 May 2023", questions[0]):
        given.table = {question: qvecs[0].tolist()}
        await memory.search(warm, question, 10, 0.0)


async def search_user(
    memory: VectorMemory,
    given: GivenVectors,
    base: Matrix,
    questions: list[str],
    qvecs: Matrix,
    user: int,
    asked: list[int],
    samples: Samples,
    args: argparse.Namespace,
) -> None:
    retrieval = RetrievalSettings()
    top_k = 10
    per_source = max(4 * top_k, retrieval.candidates)
    fusion = RrfParams(
        k=retrieval.rrf_k,
        dense_weight=retrieval.dense_weight,
        sparse_weight=retrieval.sparse_weight,
        prefetch_limit=per_source,
    )
    encoder = memory._encoder  # the tier's own BM25 encoder
    store = memory.store
    _, _, vectors = user_vectors(base, user, args.per_user, args.seed)
    flt = memory.scope_filter(Scope(TENANT, user_name(user)), Tier.LONG_TERM)
    for qi in asked:
        question, qv = questions[qi], qvecs[qi].tolist()
        sparse = encoder.encode_query(question)
        t0 = time.perf_counter()
        await asyncio.to_thread(store.count, flt)
        await asyncio.to_thread(
            store.search,
            flt,
            dense=qv,
            sparse=sparse if sparse.indices else None,
            limit=2 * per_source,
            fusion=fusion,
            with_vectors=True,
        )
        samples.hybrid.append((time.perf_counter() - t0) * 1000)
        given.table = {question: qv}
        t0 = time.perf_counter()
        await memory.search(flt, question, top_k, 0.0)
        samples.tier.append((time.perf_counter() - t0) * 1000)
        if os.environ.get("SCALE_TRACE"):
            log(f"tier search {samples.tier[-1]:.1f} ms: {question}")
        t0 = time.perf_counter()
        hits = await asyncio.to_thread(store.search, flt, dense=qv, limit=top_k)
        samples.dense.append((time.perf_counter() - t0) * 1000)
        exact = [memory_id(user, r) for r in exact_top_k(vectors, qvecs[qi], top_k)]
        samples.recalls.append(recall_at_k([h.id for h in hits], exact, top_k))
    log(f"searched user {user_name(user)}: recall so far {np.mean(samples.recalls):.4f}")


async def search_phase(
    memory: VectorMemory,
    given: GivenVectors,
    base: Matrix,
    questions: list[str],
    qvecs: Matrix,
    plan: Plan,
    args: argparse.Namespace,
) -> tuple[dict[str, float], Samples]:
    samples = Samples()
    await warm_search(memory, given, plan[0][0], questions, qvecs)
    for user, asked in plan:
        await search_user(memory, given, base, questions, qvecs, user, asked, samples, args)
    return samples.summary(len(plan)), samples


def service_embedder(args: argparse.Namespace) -> Embedder | None:
    """Hash vectors for a `hash` corpus; else None (the app's own embedder and cache).
    Paired runs hand every app one uncached model, so no app answers from a cache that
    another (the shared store's, asked by every user) has filled."""
    if args.corpus_vectors == "hash":
        return HashVectors(MINILM_NAME, MINILM_DIM)
    return corpus_embedder(args.corpus_vectors, args.threads) if args.paired else None


async def open_app(data_dir: Path, embedder: Embedder | None, args: argparse.Namespace) -> Any:
    from memoryd.app import build_app

    app = await build_app(settings_for(args.adapter, data_dir), embedder=embedder)
    app.serving()  # as the server does once it answers
    if isinstance(app.vectors, term_space.UserTermSpace):
        # The server counts the collection's keyword statistics after SERVING (ADR 0601):
        # a steady state is what is timed here, not those first seconds.
        await asyncio.to_thread(app.vectors.terms.wait)
    await app.engine.retrieve(RetrieveQuery(scope=Scope(TENANT, "warm"), query="warm up"))
    return app


async def retrieve_each(
    app: Any, calls: Sequence[tuple[int, str]], total: list[float], embedding: list[float]
) -> None:
    for user, question in calls:
        scope = Scope(TENANT, user_name(user))
        t0 = time.perf_counter()
        found = await app.engine.retrieve(
            RetrieveQuery(scope=scope, query=question, tiers=[Tier.LONG_TERM], top_k=10)
        )
        total.append((time.perf_counter() - t0) * 1000)
        embedding.append(found.embedding_ms)


def service_summary(users: int, total: list[float], embedding: list[float]) -> dict[str, Any]:
    return {
        "service_users": users,
        "service_queries": len(total),
        "service_retrieve_p50_ms": percentile(total, 50),
        "service_retrieve_p99_ms": percentile(total, 99),
        "service_embedding_p50_ms": percentile(embedding, 50),
    }


async def service_phase(
    data_dir: Path, questions: list[str], args: argparse.Namespace, plan: Plan | None = None
) -> tuple[dict[str, Any], list[float]]:
    """`engine.retrieve` through the app built on the loaded data (real query embedding):
    the search phase's users and questions (`plan`), or its own sample."""
    if plan is None:
        rng = random.Random(args.seed + 1)
        users = rng.sample(range(args.users), min(args.service_users, args.users))
        # Each query text once in the whole run: no embedding cache hit.
        pool = rng.sample(questions, min(len(questions), len(users) * args.service_queries))
        calls = [(users[n % len(users)], q) for n, q in enumerate(pool)]
    else:
        users = [u for u, _ in plan]
        calls = [(u, questions[qi]) for u, asked in plan for qi in asked]
    app = await open_app(data_dir, service_embedder(args), args)
    total: list[float] = []
    embedding: list[float] = []
    await retrieve_each(app, calls, total, embedding)
    await app.close()
    return service_summary(len(users), total, embedding), total


def alone_dir(args: argparse.Namespace, user: int) -> Path:
    return Path(args.data_dir) / "alone" / user_name(user)


def user_digest(memory: VectorMemory, user: int) -> str:
    """A hash of a user's points (ids, payloads, dense vectors to 5 decimals): equal in
    the shared store and alone when both hold the same memories."""
    store = memory.store
    flt = memory.scope_filter(Scope(TENANT, user_name(user)), Tier.LONG_TERM, live_only=False)
    points: list[Any] = []
    offset: str | None = None
    while True:
        page, offset = store.scroll(flt, limit=1000, offset=offset, with_vectors=True)
        points += page
        if offset is None:
            break
    digest = hashlib.sha256()
    for point in sorted(points, key=lambda p: p.id):
        dense = [] if point.dense is None else [round(float(x), 5) for x in point.dense]
        digest.update(json.dumps([point.id, point.payload, dense], sort_keys=True).encode())
    return f"{len(points)}:{digest.hexdigest()[:16]}"


async def alone_phase(
    sentences: list[str],
    base: Matrix,
    questions: list[str],
    qvecs: Matrix,
    plan: Plan,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The shared run's users and questions, each user in a store of its own holding only
    its memories (built once under `--data-dir`/alone, then reused)."""
    result: dict[str, Any] = {"alone_built": 0, "alone_load_s": 0.0, "digests": {}}
    for user, _ in plan:
        path = alone_dir(args, user)
        if (path / "loaded").is_file():
            continue
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        store = open_store(args.adapter, path, args.term_space)
        memory, _, batcher = tier_memory(store)
        result["alone_load_s"] += (await load(memory, sentences, base, args, [user]))["load_s"]
        await batcher.close()
        store.close()
        (path / "loaded").write_text("")
        result["alone_built"] += 1
    samples = Samples()
    for n, (user, asked) in enumerate(plan):
        store = open_store(args.adapter, alone_dir(args, user), args.term_space)
        memory, given, batcher = tier_memory(store)
        result["digests"][user_name(user)] = user_digest(memory, user)
        # As in the shared run: the first user's counts warmed; each other store warmed
        # by a user it does not hold (the shared store is warm by then).
        await warm_search(memory, given, user if n == 0 else -1, questions, qvecs)
        await search_user(memory, given, base, questions, qvecs, user, asked, samples, args)
        await batcher.close()
        store.close()
    result |= samples.summary(len(plan))
    result["samples"] = {"store_hybrid_ms": samples.hybrid, "tier_search_ms": samples.tier}
    if args.service_users:
        total: list[float] = []
        embedding: list[float] = []
        embedder = service_embedder(args)
        for user, asked in plan:
            app = await open_app(alone_dir(args, user), embedder, args)
            await retrieve_each(app, [(user, questions[qi]) for qi in asked], total, embedding)
            await app.close()
        result |= service_summary(len(plan), total, embedding)
        result["samples"]["service_retrieve_ms"] = total
    return result


async def run(args: argparse.Namespace) -> dict[str, Any]:
    data_dir: Path = args.data_dir or Path(tempfile.mkdtemp(prefix="memoryd-1m-"))
    os.makedirs(data_dir, exist_ok=True)
    result: dict[str, Any] = {
        "shape": args.shape,
        "adapter": args.adapter,
        "corpus_vectors": args.corpus_vectors,
        "users": args.users,
        "per_user": args.per_user,
        "memories": args.users * args.per_user,
        "data_dir": str(data_dir),
    }
    if args.paired:
        result["paired"] = args.paired
    sentences, questions = eval_corpus(ROOT)
    result["embedder_threads"] = args.threads
    base, qvecs = embedded(sentences, questions, args.corpus_vectors, args.threads)
    plan = search_plan(len(questions), args)
    if args.paired:
        result["plan_users"] = [user_name(u) for u, _ in plan]
    if args.paired == "alone":
        return result | await alone_phase(sentences, base, questions, qvecs, plan, args)
    rss0 = rss_mib()
    result["rss_before_load_mib"] = rss0
    t0 = time.perf_counter()
    store = open_store(args.adapter, data_dir, args.term_space)
    result["open_s"] = time.perf_counter() - t0
    # What the store holds before this run writes: its own RSS once opened.
    result["rss_after_open_mib"] = rss_mib()
    log(f"opened in {result['open_s']:.1f} s; rss {result['rss_after_open_mib']:,.0f} MiB")
    memory, given, batcher = tier_memory(store)
    if not args.skip_load:
        result |= await load(memory, sentences, base, args)
    result["count"] = store.count()
    result["rss_after_load_mib"] = rss_mib()
    result["rss_growth_mib"] = result["rss_after_load_mib"] - rss0
    result["disk_mib"] = disk_mib(data_dir)
    log(
        f"count {result['count']:,}; rss {result['rss_after_load_mib']:,.0f} MiB; "
        f"disk {result['disk_mib']:,.0f} MiB"
    )
    if args.search_users:
        summary, samples = await search_phase(memory, given, base, questions, qvecs, plan, args)
        result |= summary
        result["rss_after_search_mib"] = rss_mib()
        if args.paired:
            result["digests"] = {user_name(u): user_digest(memory, u) for u, _ in plan}
            result["samples"] = {"store_hybrid_ms": samples.hybrid, "tier_search_ms": samples.tier}
    await batcher.close()
    store.close()
    if args.service_users:
        summary, total = await service_phase(
            data_dir, questions, args, plan if args.paired else None
        )
        result |= summary
        if args.paired:
            result["samples"]["service_retrieve_ms"] = total
    if args.data_dir is None and not args.keep:
        shutil.rmtree(data_dir, ignore_errors=True)
    return result


# What a paired round compares: per-call samples of each side, by name.
PAIRED = ("service_retrieve", "tier_search", "store_hybrid")


def distribution(samples: dict[str, list[float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in PAIRED:
        if f"{name}_ms" in samples:
            for p in (50, 99):
                out[f"{name}_p{p}_ms"] = percentile(samples[f"{name}_ms"], p)
    return out


def ratios(shared: dict[str, float], alone: dict[str, float]) -> dict[str, float]:
    return {
        key.removesuffix("_ms"): shared[key] / alone[key] for key in shared if key.endswith("_ms")
    }


def child_argv(args: argparse.Namespace, side: str, load_now: bool, out: Path) -> list[str]:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        *("--shape", args.shape, "--adapter", args.adapter),
        *("--users", str(args.users), "--per-user", str(args.per_user)),
        *("--corpus-vectors", args.corpus_vectors, "--batch", str(args.batch)),
        *("--search-users", str(args.search_users), "--queries", str(args.queries)),
        *("--service-users", str(args.service_users), "--threads", str(args.threads)),
        *("--seed", str(args.seed), "--data-dir", str(args.data_dir)),
        *("--term-space", args.term_space, "--paired", side, "--json", str(out)),
    ]
    return argv if load_now else [*argv, "--skip-load"]


def paired_rounds(args: argparse.Namespace) -> dict[str, Any]:
    """`--pair-with-alone N`: N rounds, each the shared store then every sampled user
    alone, one process per side; per-call samples compared round by round and pooled."""
    if args.data_dir is None:
        raise SystemExit("--pair-with-alone needs --data-dir (the stores are reused)")
    if args.search_users < 1 or args.queries < 1:
        raise SystemExit("--pair-with-alone needs --search-users and --queries of 1 or more")
    outdir = (args.json or args.data_dir / "paired.json").resolve()
    outdir.parent.mkdir(parents=True, exist_ok=True)
    rounds: list[dict[str, Any]] = []
    pooled: dict[str, dict[str, list[float]]] = {"shared": {}, "alone": {}}
    digests: dict[str, Any] = {}
    for k in range(1, args.pair_with_alone + 1):
        row: dict[str, Any] = {"round": k}
        for side in ("shared", "alone"):
            out = outdir.with_name(f"{outdir.stem}-r{k}-{side}.json")
            load_before = os.getloadavg()
            log(f"round {k}, {side}: load {load_before[0]:.2f}")
            load_now = side == "shared" and k == 1 and not args.skip_load
            subprocess.run(child_argv(args, side, load_now, out), check=True)
            report = json.loads(out.read_text())
            for name, values in report["samples"].items():
                pooled[side].setdefault(name, []).extend(values)
            row[side] = distribution(report["samples"]) | {
                "load_before": load_before[0],
                "load_after": os.getloadavg()[0],
                "recall_at_10_min": report["recall_at_10_min"],
                "report": out.name,
            }
            digests.setdefault(side, report["digests"])
        row["ratio"] = ratios(row["shared"], row["alone"])
        rounds.append(row)
    same = digests["shared"] == digests["alone"]
    result = {
        "shape": args.shape,
        "users": args.users,
        "per_user": args.per_user,
        "sampled_users": args.search_users,
        "queries_per_user": args.queries,
        "same_memories_alone": same,
        "rounds": rounds,
        "pooled": {
            "shared": distribution(pooled["shared"]),
            "alone": distribution(pooled["alone"]),
        },
    }
    result["pooled"]["ratio"] = ratios(result["pooled"]["shared"], result["pooled"]["alone"])
    print_pairs(result)
    return result


def print_pairs(result: dict[str, Any]) -> None:
    cols = [f"{n}_p{p}" for n in PAIRED for p in (50, 99)]
    print("| round | side | load | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 3) + "|")
    rows = [(str(r["round"]), r) for r in result["rounds"]] + [("pooled", result["pooled"])]
    for name, row in rows:
        for side in ("shared", "alone"):
            figures = row[side]
            load_avg = f"{figures['load_before']:.1f}" if "load_before" in figures else ""
            cells = [f"{figures[c + '_ms']:.2f}" if c + "_ms" in figures else "" for c in cols]
            print(f"| {name} | {side} | {load_avg} | " + " | ".join(cells) + " |")
        cells = [f"{row['ratio'][c]:.2f}x" if c in row["ratio"] else "" for c in cols]
        print(f"| {name} | ratio | | " + " | ".join(cells) + " |")
    print(f"same memories alone as shared: {result['same_memories_alone']}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=tuple(SHAPES), default="heavy")
    parser.add_argument("--adapter", choices=("edge", "qdrant"), default="edge")
    parser.add_argument("--users", type=int, help="users (default: the shape's)")
    parser.add_argument("--per-user", type=int, help="memories per user (default: the shape's)")
    parser.add_argument(
        "--corpus-vectors",
        choices=("minilm", "onnx", "hash"),
        default="minilm",
        help="what embeds the corpus sentences and questions (hash: no model)",
    )
    parser.add_argument("--batch", type=int, default=500, help="memories per upsert")
    parser.add_argument("--search-users", type=int, default=20)
    parser.add_argument("--queries", type=int, default=25, help="per searched user")
    parser.add_argument("--service-users", type=int, default=4)
    parser.add_argument("--service-queries", type=int, default=25, help="per service user")
    parser.add_argument("--threads", type=int, default=1, help="threads of the corpus model")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--term-space",
        choices=[term_space.USER, term_space.SHARED],
        default=term_space.USER,
        help="a new store's keyword term ids: each user's own (the server's default, ADR "
        "0601) or one space for all (MEMORYD_VECTORS__TERM_SPACE=shared)",
    )
    parser.add_argument("--data-dir", type=Path, help="keep the store here (reused if loaded)")
    parser.add_argument("--skip-load", action="store_true", help="--data-dir already loaded")
    parser.add_argument(
        "--first-user",
        type=int,
        default=0,
        help="load users from this one on: --data-dir holds the ones before (a fill in "
        "chunks, each in a fresh process)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary data dir")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument(
        "--paired",
        choices=("shared", "alone"),
        help="service Retrieve asks the search phase's users and questions; alone: each "
        "of those users in a store of its own (built once under --data-dir/alone)",
    )
    parser.add_argument(
        "--pair-with-alone",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="alternate ROUNDS shared and alone runs (--paired, one process each) and "
        "report both side by side; child reports go next to --json",
    )
    args = parser.parse_args()
    users, per_user = SHAPES[args.shape]
    args.users = users if args.users is None else args.users
    args.per_user = per_user if args.per_user is None else args.per_user
    result = paired_rounds(args) if args.pair_with_alone else asyncio.run(run(args))
    text = json.dumps(result, indent=2)
    # The per-call samples of a paired run go to --json only.
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))
    if args.json:
        args.json.write_text(text + "\n")
    sys.exit(0)


if __name__ == "__main__":
    main()
