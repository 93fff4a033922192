"""Latency of the main RPCs against a running memoryd (loopback, Python client).

    PYTHONPATH=service .venv/bin/python benchmarks/rpc_latency.py --target 127.0.0.1:50051

Prints p50/p99 per operation and writes a ghz-style JSON report (count, total, average,
fastest, slowest, rps, latencyDistribution) per operation with --json-out. Latency targets
live in DESIGN.md §6; they are checked here, never in tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import grpc

from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc


def measure(n: int, call: Callable[[int], Any]) -> list[float]:
    samples = []
    for i in range(n):
        started = time.perf_counter()
        call(i)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def report(name: str, samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

    total = sum(samples)
    print(f"{name:28s} n={len(samples):5d}  p50={pct(50):7.3f} ms  p99={pct(99):7.3f} ms")
    return {
        "name": name,
        "count": len(samples),
        "total": total,
        "average": statistics.fmean(samples),
        "fastest": ordered[0],
        "slowest": ordered[-1],
        "rps": len(samples) / (total / 1000) if total else 0.0,
        "latencyDistribution": [
            {"percentage": p, "latency": pct(p)} for p in (10, 25, 50, 75, 90, 95, 99)
        ],
        "statusCodeDistribution": {"OK": len(samples)},
        "errorDistribution": {},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="127.0.0.1:50051")
    parser.add_argument("-n", type=int, default=500)
    parser.add_argument("--json-out")
    args = parser.parse_args()
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(args.target))
    user = f"bench-{uuid.uuid4().hex[:8]}"
    sc = pb.Scope(user_id=user, agent_id="a", task_id="t", session_id="s")
    n = args.n
    results = [
        report(
            "Add working",
            measure(
                n,
                lambda i: stub.Add(
                    pb.AddRequest(
                        scope=sc, tier=pb.TIER_WORKING, key=f"k{i % 50}", content="v" * 64
                    )
                ),
            ),
        ),
        report(
            "Add short_term",
            measure(
                n,
                lambda i: stub.Add(
                    pb.AddRequest(scope=sc, tier=pb.TIER_SHORT_TERM, content=f"message {i}")
                ),
            ),
        ),
        report(
            "Add long_term",
            measure(
                min(n, 200),
                lambda i: stub.Add(
                    pb.AddRequest(
                        scope=sc, tier=pb.TIER_LONG_TERM, content=f"fact {i}: the user likes {i}"
                    )
                ),
            ),
        ),
        report(
            "Retrieve long_term (cached q)",
            measure(
                n,
                lambda i: stub.Retrieve(
                    pb.RetrieveRequest(
                        scope=sc, tiers=[pb.TIER_LONG_TERM], query="what does the user like"
                    )
                ),
            ),
        ),
        report(
            "Retrieve long_term (new q)",
            measure(
                min(n, 200),
                lambda i: stub.Retrieve(
                    pb.RetrieveRequest(scope=sc, tiers=[pb.TIER_LONG_TERM], query=f"question {i}")
                ),
            ),
        ),
        report(
            "Retrieve, user with nothing",
            measure(
                n,
                lambda i: stub.Retrieve(
                    pb.RetrieveRequest(
                        scope=pb.Scope(user_id=f"empty-{i}"), tiers=[pb.TIER_LONG_TERM], query="x"
                    )
                ),
            ),
        ),
    ]
    if args.json_out:
        with open(args.json_out, "w") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
