"""Server CPU and Redis commands per RPC, against a running memoryd (docs/scaling.md).

    PYTHONPATH=service python benchmarks/cost_per_rpc.py --pid PID --redis-port PORT

`--pid` is the memoryd process (its user + system CPU time is read from /proc);
`--redis-port` the Redis it uses (commands counted from INFO stats). Calls are sequential,
so CPU ms per call bounds the calls per second one core can serve.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import redis

from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime + stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="127.0.0.1:50051")
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--redis-port", type=int)
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between steps")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(args.target))
    r = redis.Redis(port=args.redis_port) if args.redis_port else None
    sc = pb.Scope(
        user_id=f"bench-{uuid.uuid4().hex[:8]}", agent_id="a", task_id="t", session_id="s"
    )

    def commands() -> int:
        return int(r.info("stats")["total_commands_processed"]) if r else 0

    def add(tier: pb.Tier.ValueType, key: str = "", content: str = "") -> Any:
        return stub.Add(pb.AddRequest(scope=sc, tier=tier, key=key, content=content))

    def retrieve(query: str) -> Any:
        return stub.Retrieve(pb.RetrieveRequest(scope=sc, query=query))

    ops: list[tuple[str, Callable[[int], Any]]] = [
        ("Add working", lambda i: add(pb.TIER_WORKING, f"k{i % 50}", "v" * 64)),
        ("Add short_term", lambda i: add(pb.TIER_SHORT_TERM, content=f"message {i} on trips")),
        ("Add long_term", lambda i: add(pb.TIER_LONG_TERM, content=f"fact {i}: likes city {i}")),
        ("Retrieve all tiers (cached q)", lambda i: retrieve("what does the user like")),
        ("Retrieve all tiers (new q)", lambda i: retrieve(f"question {i} on trips")),
    ]
    print(f"{'operation':32} {'ms/call':>8} {'cpu ms':>7} {'calls/s/core':>12} {'redis/call':>10}")
    for name, call in ops:
        time.sleep(args.settle)  # background work of the previous step (write-behind) settles
        cpu0, cmd0, t0 = cpu_s(args.pid), commands(), time.perf_counter()
        for i in range(args.n):
            call(i)
        wall = time.perf_counter() - t0
        if name == "Add short_term":
            time.sleep(1.5 * args.settle)  # the write-behind copies belong to this step's cost
        cpu = cpu_s(args.pid) - cpu0
        redis_ops = (commands() - cmd0) / args.n
        per = cpu / args.n * 1000
        rows.append(
            {
                "operation": name,
                "ms_per_call": wall / args.n * 1000,
                "cpu_ms_per_call": per,
                "redis_commands_per_call": redis_ops,
            }
        )
        # /proc counts CPU in clock ticks (10 ms): a few fast calls may take none of them.
        per_core = f"{1000 / per:12.0f}" if per else f"{'< 1 tick':>12}"
        print(f"{name:32} {wall / args.n * 1000:8.2f} {per:7.2f} {per_core} {redis_ops:10.1f}")
    if args.json:
        args.json.write_text(json.dumps({"calls": args.n, "operations": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
