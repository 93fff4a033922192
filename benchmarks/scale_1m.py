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
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

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
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


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


def open_store(adapter: str, data_dir: Path) -> VectorStore:
    """The store `build_app` would open for these settings (same path and collection)."""
    if adapter == "edge":
        from memoryd.stores.vectors.edge_store import EdgeVectorStore

        return EdgeVectorStore(data_dir / "vectors", dim=MINILM_DIM)
    from memoryd.stores.vectors.qdrant_server_store import QdrantServerVectorStore

    return QdrantServerVectorStore(dim=MINILM_DIM, path=str(data_dir / "qdrant-local"))


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
    memory: VectorMemory, sentences: list[str], base: Matrix, args: argparse.Namespace
) -> dict[str, float]:
    started = time.perf_counter()
    last = started
    # A progress line per user of a few heavy users, per hundredth of many light ones.
    every = max(1, args.users // 100)
    points: list[NewPoint] = []
    for user in range(args.first_user, args.users):
        a, b, vectors = user_vectors(base, user, args.per_user, args.seed)
        for row in range(args.per_user):
            text = f"{sentences[a[row]]} {sentences[b[row]]}"
            points.append(new_point(text, user, row, vectors[row].tolist()))
            if len(points) == args.batch:
                await memory.insert(points)
                points = []
        if (user + 1) % every == 0 or user + 1 == args.users:
            if points:
                await memory.insert(points)
                points = []
            now_t = time.perf_counter()
            done = (user + 1 - args.first_user) * args.per_user
            log(
                f"loaded user {user + 1:,}/{args.users:,} ({done:,} memories) in "
                f"{now_t - last:.1f} s; total {now_t - started:.0f} s, "
                f"{done / (now_t - started):,.0f}/s, rss {rss_mib():,.0f} MiB"
            )
            last = now_t
    memory.store.flush()
    elapsed = time.perf_counter() - started
    loaded = (args.users - args.first_user) * args.per_user
    return {"loaded": loaded, "load_s": elapsed, "load_per_s": loaded / elapsed}


async def search_phase(
    memory: VectorMemory,
    given: GivenVectors,
    base: Matrix,
    questions: list[str],
    qvecs: Matrix,
    args: argparse.Namespace,
) -> dict[str, float]:
    rng = random.Random(args.seed)
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
    users = rng.sample(range(args.users), min(args.search_users, args.users))
    hybrid: list[float] = []
    tier: list[float] = []
    dense_ms: list[float] = []
    recalls: list[float] = []
    warm = memory.scope_filter(Scope(TENANT, user_name(users[0])), Tier.LONG_TERM)
    # Warms the thread pool and the time parser, whose first query with digits loads
    # dateparser (~0.4 s, once per process).
    for question in ("HRN-2304 on 4 May 2023", questions[0]):
        given.table = {question: qvecs[0].tolist()}
        await memory.search(warm, question, top_k, 0.0)
    for user in users:
        _, _, vectors = user_vectors(base, user, args.per_user, args.seed)
        flt = memory.scope_filter(Scope(TENANT, user_name(user)), Tier.LONG_TERM)
        for _ in range(args.queries):
            qi = rng.randrange(len(questions))
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
            hybrid.append((time.perf_counter() - t0) * 1000)
            given.table = {question: qv}
            t0 = time.perf_counter()
            await memory.search(flt, question, top_k, 0.0)
            tier.append((time.perf_counter() - t0) * 1000)
            if os.environ.get("SCALE_TRACE"):
                log(f"tier search {tier[-1]:.1f} ms: {question}")
            t0 = time.perf_counter()
            hits = await asyncio.to_thread(store.search, flt, dense=qv, limit=top_k)
            dense_ms.append((time.perf_counter() - t0) * 1000)
            exact = [memory_id(user, r) for r in exact_top_k(vectors, qvecs[qi], top_k)]
            recalls.append(recall_at_k([h.id for h in hits], exact, top_k))
        log(f"searched user {user_name(user)}: recall so far {np.mean(recalls):.4f}")
    return {
        "search_users": len(users),
        "queries": len(hybrid),
        "store_hybrid_p50_ms": percentile(hybrid, 50),
        "store_hybrid_p99_ms": percentile(hybrid, 99),
        "tier_search_p50_ms": percentile(tier, 50),
        "tier_search_p99_ms": percentile(tier, 99),
        "dense_top10_p50_ms": percentile(dense_ms, 50),
        "dense_top10_p99_ms": percentile(dense_ms, 99),
        "recall_at_10_mean": float(np.mean(recalls)),
        "recall_at_10_min": float(np.min(recalls)),
    }


async def service_phase(
    data_dir: Path, questions: list[str], args: argparse.Namespace
) -> dict[str, float]:
    """`engine.retrieve` through the app built on the loaded data (real query embedding)."""
    from memoryd.app import build_app

    embedder = HashVectors(MINILM_NAME, MINILM_DIM) if args.corpus_vectors == "hash" else None
    app = await build_app(settings_for(args.adapter, data_dir), embedder=embedder)
    rng = random.Random(args.seed + 1)
    users = rng.sample(range(args.users), min(args.service_users, args.users))
    # Each query text once in the whole run: no embedding cache hit.
    pool = rng.sample(questions, min(len(questions), len(users) * args.service_queries))
    await app.engine.retrieve(RetrieveQuery(scope=Scope(TENANT, "warm"), query="warm up"))
    total: list[float] = []
    embedding: list[float] = []
    for n, question in enumerate(pool):
        scope = Scope(TENANT, user_name(users[n % len(users)]))
        t0 = time.perf_counter()
        found = await app.engine.retrieve(
            RetrieveQuery(scope=scope, query=question, tiers=[Tier.LONG_TERM], top_k=10)
        )
        total.append((time.perf_counter() - t0) * 1000)
        embedding.append(found.embedding_ms)
    await app.close()
    return {
        "service_users": len(users),
        "service_queries": len(total),
        "service_retrieve_p50_ms": percentile(total, 50),
        "service_retrieve_p99_ms": percentile(total, 99),
        "service_embedding_p50_ms": percentile(embedding, 50),
    }


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
    sentences, questions = eval_corpus(ROOT)
    result["embedder_threads"] = args.threads
    base, qvecs = embedded(sentences, questions, args.corpus_vectors, args.threads)
    rss0 = rss_mib()
    result["rss_before_load_mib"] = rss0
    given = GivenVectors()
    t0 = time.perf_counter()
    store = open_store(args.adapter, data_dir)
    result["open_s"] = time.perf_counter() - t0
    # What the store holds before this run writes: its own RSS once opened.
    result["rss_after_open_mib"] = rss_mib()
    log(f"opened in {result['open_s']:.1f} s; rss {result['rss_after_open_mib']:,.0f} MiB")
    batcher = EmbeddingBatcher(given)
    memory = VectorMemory(store, batcher, RetrievalSettings(), clock=time.time)
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
        result |= await search_phase(memory, given, base, questions, qvecs, args)
        result["rss_after_search_mib"] = rss_mib()
    await batcher.close()
    store.close()
    if args.service_users:
        result |= await service_phase(data_dir, questions, args)
    if args.data_dir is None and not args.keep:
        shutil.rmtree(data_dir, ignore_errors=True)
    return result


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
    args = parser.parse_args()
    users, per_user = SHAPES[args.shape]
    args.users = users if args.users is None else args.users
    args.per_user = per_user if args.per_user is None else args.per_user
    result = asyncio.run(run(args))
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    sys.exit(0)


if __name__ == "__main__":
    main()
