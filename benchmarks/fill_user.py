"""Filling one user's long-term memory towards the default quota (10,000 memories): the
add rate per thousand, which must stay steady (issue 18: the last thousand within 20 % of
the first). Quota checks and Usage read the usage counters, so they cost the same at
9,000 memories as at 100.

    PYTHONPATH=service .venv/bin/python benchmarks/fill_user.py [--memories 10000]
        [--concurrency 16] [--redis-url redis://...] [--json-out fill.json]

An in-process server on loopback gRPC with the default quotas, the adds `--concurrency`
at a time from one client in the same process. Texts are embedded by a deterministic
hash embedder (the MiniLM name and dimension, hashed unit vectors), so the figures are the
server's own cost per add, not the model's. With --redis-url the counters (and hot tiers)
live in that Redis, as with several replicas.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import tempfile
import time
from pathlib import Path

import grpc

from memoryd.app import build_app
from memoryd.settings import MetricsSettings, Settings
from memoryd.stores.embeddings.minilm import MINILM_DIM, MINILM_NAME
from memoryd.transport.server import MemorydServer
from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc
from scale_kit import HashVectors


async def fill(
    memories: int, concurrency: int, step: int, redis_url: str | None
) -> tuple[list[float], list[float]]:
    """Adds `memories` long-term memories for one user; for each `step` adds, the rate
    (adds/s) and this process's CPU time per add (ms: client and server, which other
    processes on a shared machine disturb less than the rate)."""
    data_dir = Path(tempfile.mkdtemp(prefix="memoryd-fill-"))
    settings = Settings(
        data_dir=data_dir,
        listen="127.0.0.1:0",
        metrics=MetricsSettings(listen=""),
        redis_url=redis_url,
    )
    app = await build_app(settings, embedder=HashVectors(MINILM_NAME, MINILM_DIM))
    server = MemorydServer(settings, app)
    port = await server.start()
    done_at: list[float] = []
    cpu_at: list[float] = [time.process_time()]
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = memory_pb2_grpc.MemoryServiceStub(channel)
            user = pb.Scope(user_id=f"fill-{time.time_ns()}")
            queue = iter(range(memories))

            async def adder() -> None:
                for n in queue:
                    content = f"Memory {n}: the user mentioned detail number {n * 7919 % 100_003}"
                    await stub.Add(
                        pb.AddRequest(scope=user, tier=pb.TIER_LONG_TERM, content=content)
                    )
                    done_at.append(time.perf_counter())
                    if len(done_at) % step == 0:  # progress, as the run goes
                        cpu_at.append(time.process_time())
                        last = done_at[-step - 1] if len(done_at) > step else started
                        rate = step / (done_at[-1] - last)
                        print(f"  {len(done_at):>6,} memories: {rate:7.1f} adds/s", flush=True)

            started = time.perf_counter()
            await asyncio.gather(*(adder() for _ in range(concurrency)))
            usage = await stub.Usage(pb.UsageRequest(scope=user))
            [lt] = [t for t in usage.tiers if t.tier == pb.TIER_LONG_TERM]
            assert lt.count == memories, (lt.count, memories)
    finally:
        await server.stop(grace_s=0)
    rates = []
    edges = [started, *done_at[step - 1 :: step]]
    for a, b in itertools.pairwise(edges):
        rates.append(step / (b - a))
    cpu_ms = [(b - a) * 1000 / step for a, b in itertools.pairwise(cpu_at)]
    return rates, cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--step", type=int, default=1_000, help="adds per reported rate")
    parser.add_argument("--redis-url", help="keep the counters in this Redis")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    rates, cpu_ms = asyncio.run(fill(args.memories, args.concurrency, args.step, args.redis_url))
    for i, (rate, cpu) in enumerate(zip(rates, cpu_ms, strict=False)):
        span = f"{i * args.step:>6,}-{(i + 1) * args.step:>6,}"
        print(f"memories {span}: {rate:7.1f} adds/s, {cpu:5.2f} ms CPU per add")
    last_vs_first = rates[-1] / rates[0]
    cpu_last_vs_first = cpu_ms[-1] / cpu_ms[0]
    print(f"rate, last / first: {last_vs_first:.2f} (target: at least 0.80)")
    print(f"CPU per add, last / first: {cpu_last_vs_first:.2f} (target: at most 1.20)")
    if args.json_out:
        report = {
            "memories": args.memories,
            "concurrency": args.concurrency,
            "step": args.step,
            "counters": "redis" if args.redis_url else "in_process",
            "rates_per_step": rates,
            "cpu_ms_per_add_per_step": cpu_ms,
            "last_vs_first": last_vs_first,
            "cpu_last_vs_first": cpu_last_vs_first,
        }
        args.json_out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
