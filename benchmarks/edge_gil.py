"""Does a qdrant-edge search leave the GIL? What bounds Retrieve throughput in one process.

    PYTHONPATH=service .venv/bin/python benchmarks/edge_gil.py [--points 10000]

Fills a temporary embedded store with one user's random unit vectors (and a few sparse
terms each), then measures, for the search a Retrieve makes (hybrid, 40 per source,
80 results with payloads and dense vectors, filtered to the user):

- searches per second from one thread and from two: two threads only help if the engine
  releases the GIL while it searches;
- how fast a pure-Python loop runs beside a thread that searches without pause, as a
  share of its speed alone: about 1.0 on a machine with a spare core if searches leave
  the GIL, about 0.5 if the two take turns.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

from memoryd.stores.vectors.edge_store import EdgeVectorStore
from memoryd.stores.vectors.port import Filter, MatchValue, RrfParams, SparseVector, VectorPoint

DIM = 384


def fill(store: EdgeVectorStore, points: int, rng: np.random.Generator) -> None:
    for start in range(0, points, 1000):
        batch = []
        for n in range(start, min(points, start + 1000)):
            vector = rng.standard_normal(DIM).astype(np.float32)
            terms = sorted({int(t) for t in rng.integers(0, 5000, 8)})
            batch.append(
                VectorPoint(
                    id=str(uuid.uuid4()),
                    dense=(vector / np.linalg.norm(vector)).tolist(),
                    sparse=SparseVector(terms, [1.0] * len(terms)),
                    payload={"tenant": "t", "user_id": "u", "content": f"memory {n}"},
                )
            )
        store.upsert(batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    result: dict[str, float] = {"points": args.points}
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as folder:
        store = EdgeVectorStore(folder, DIM)
        fill(store, args.points, rng)
        query = rng.standard_normal(DIM).astype(np.float32)
        user = Filter(must=[MatchValue("tenant", "t"), MatchValue("user_id", "u")])

        def search() -> None:
            store.search(
                user,
                dense=(query / np.linalg.norm(query)).tolist(),
                sparse=SparseVector([1, 2, 3, 4, 5, 6], [1.0] * 6),
                limit=80,
                fusion=RrfParams(prefetch_limit=40),
                with_vectors=True,
            )

        for threads in (1, 2):
            done = [0] * threads
            until = time.perf_counter() + args.seconds

            def searcher(slot: int, until: float = until, done: list[int] = done) -> None:
                while time.perf_counter() < until:
                    search()
                    done[slot] += 1

            workers = [threading.Thread(target=searcher, args=(i,)) for i in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            result[f"searches_per_s_{threads}_threads"] = sum(done) / args.seconds
            print(f"{threads} thread(s): {sum(done) / args.seconds:7.0f} searches/s")

        def spin(seconds: float) -> int:
            count, until = 0, time.perf_counter() + seconds
            while time.perf_counter() < until:
                count += 1
            return count

        alone = spin(args.seconds)
        stop = threading.Event()

        def background() -> None:
            while not stop.is_set():
                search()

        worker = threading.Thread(target=background)
        worker.start()
        beside = spin(args.seconds)
        stop.set()
        worker.join()
        result["python_loop_beside_searches"] = beside / alone
        print(f"a Python loop beside a thread of searches: {beside / alone:.2f} of its speed alone")
        store.close()
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
