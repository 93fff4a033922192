"""Memory per stored memory in the embedded vector store (docs/scaling.md).

Loads N points shaped like long-term memories (384-d MiniLM dense vector, ~12-term BM25
sparse vector, the payload the tiers write, ~200 bytes of content) into a fresh edge
store, then reports the process RSS growth and the on-disk size per point.

    PYTHONPATH=service python benchmarks/capacity_rss.py --points 50000
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import tempfile
import time
import uuid
from pathlib import Path

from memoryd.stores.vectors.edge_store import EdgeVectorStore
from memoryd.stores.vectors.port import SparseVector, VectorPoint


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def a_point(rng: random.Random, n: int) -> VectorPoint:
    dense = [rng.gauss(0, 1) for _ in range(384)]
    terms = rng.sample(range(1, 2**31), 12)
    return VectorPoint(
        id=str(uuid.UUID(int=rng.getrandbits(128))),
        dense=dense,
        sparse=SparseVector(terms, [rng.random() for _ in terms]),
        payload={
            "tenant": "default",
            "user_id": f"user-{n % 1000}",
            "tier": "long_term",
            "kind": "fact",
            "content": "The user prefers window seats on long flights " * 4,
            "metadata": {"source": "explicit"},
            "importance": 0.5,
            "created_at": time.time(),
            "updated_at": time.time(),
            "access_count": 0,
            "size": 200,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as directory:
        store = EdgeVectorStore(Path(directory), dim=384)
        before = rss_mib()
        started = time.perf_counter()
        for first in range(0, args.points, args.batch):
            last = min(first + args.batch, args.points)
            store.upsert([a_point(rng, n) for n in range(first, last)])
        store.flush()
        elapsed = time.perf_counter() - started
        after = rss_mib()
        disk = sum(f.stat().st_size for f in Path(directory).rglob("*") if f.is_file())
        per_point = (after - before) * 2**20 / args.points
        print(f"points: {args.points}  load: {elapsed:.1f} s")
        print(f"rss: {before:.0f} -> {after:.0f} MiB, {per_point:.0f} B/point")
        print(f"disk: {disk / 2**20:.0f} MiB, {disk / args.points:.0f} B/point")
        count = store.count()
        print(f"count: {count}")
        store.close()
    if args.json:
        result = {
            "points": args.points,
            "count": count,
            "load_s": elapsed,
            "rss_before_mib": before,
            "rss_after_mib": after,
            "rss_bytes_per_point": per_point,
            "disk_mib": disk / 2**20,
            "disk_bytes_per_point": disk / args.points,
        }
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
