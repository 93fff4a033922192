"""The console's first pages at scale (issue 30: a tenant of 1,000 users, a user of 10,000
memories; target: first page under 300 ms on this machine). Not a timed test: run it and
read the figures.

    PYTHONPATH=service:benchmarks .venv/bin/python benchmarks/console_pages.py
        [--users 1000] [--memories 10000] [--rounds 20] [--json-out pages.json]

An in-process memoryd (auth off, hashed vectors as in fill_user.py, so the fill is quick)
and the console app called in process through httpx's ASGI transport: each figure is a
whole page, the console's gRPC calls to the service included. Pages (the report's keys under
"pages"): `overview` (25 users with their usage), `user_first_page` (the 10,000-memory
user's first 50 memories across tiers and its usage), `user_next_page`, and `ask` (Retrieve
with explain, RenderContext).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import grpc
import httpx

from memoryd.app import build_app
from memoryd.console.app import Console, create_app
from memoryd.console.service import Service
from memoryd.settings import MetricsSettings, Settings
from memoryd.stores.embeddings.minilm import MINILM_DIM, MINILM_NAME
from memoryd.transport.server import MemorydServer
from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc
from scale_kit import HashVectors

BATCH = 256


async def fill(stub: memory_pb2_grpc.MemoryServiceAsyncStub, users: int, memories: int) -> str:
    items = [
        pb.AddRequest(scope=pb.Scope(user_id=f"user-{u:05d}"), tier=pb.TIER_LONG_TERM,
                      content=f"user {u} likes topic {u * 31 % 997}")
        for u in range(users)
    ]  # fmt: skip
    heavy = "user-heavy"
    items += [
        pb.AddRequest(scope=pb.Scope(user_id=heavy), tier=pb.TIER_LONG_TERM,
                      content=f"Memory {n}: detail number {n * 7919 % 100_003}")
        for n in range(memories)
    ]  # fmt: skip
    for start in range(0, len(items), BATCH):
        reply = await stub.AddBatch(pb.AddBatchRequest(items=items[start : start + BATCH]))
        assert reply.failed_count == 0, reply
    return heavy


async def timed(client: httpx.AsyncClient, path: str, rounds: int) -> dict[str, float]:
    took = []
    for _ in range(rounds):
        started = time.perf_counter()
        reply = await client.get(path)
        took.append((time.perf_counter() - started) * 1000)
        assert reply.status_code == 200, (path, reply.status_code)
    took.sort()
    return {
        "p50_ms": round(statistics.median(took), 1),
        "p95_ms": round(took[math.ceil(0.95 * len(took)) - 1], 1),  # nearest rank
        "max_ms": round(took[-1], 1),
    }


def _next_token(html: str) -> str:
    """The page token of the "Next page" link, or "" on the last page."""
    if "Next page" not in html:
        return ""
    link = html.split("Next page")[0].rsplit('href="', 1)[1]
    return link.split("page=")[1].split('"')[0].split("&")[0]


async def run(users: int, memories: int, rounds: int) -> dict[str, dict[str, float] | None]:
    settings = Settings(
        data_dir=Path(tempfile.mkdtemp(prefix="memoryd-console-bench-")),
        listen="127.0.0.1:0",
        metrics=MetricsSettings(listen=""),
        long_term={"max_memories": max(10_000, memories)},
    )
    app = await build_app(settings, embedder=HashVectors(MINILM_NAME, MINILM_DIM))
    server = MemorydServer(settings, app)
    port = await server.start()
    console = Console(Service(f"127.0.0.1:{port}"))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            started = time.perf_counter()
            heavy = await fill(memory_pb2_grpc.MemoryServiceStub(channel), users, memories)
            print(f"filled {users:,} users + {memories:,} memories in "
                  f"{time.perf_counter() - started:.0f} s")  # fmt: skip
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(console)), base_url="http://c"
        ) as client:
            form = await client.get("/signin")
            csrf = form.text.split('name="csrf" value="')[1].split('"')[0]
            # No credentials configured on this server: any bearer is the anonymous admin.
            await client.post("/signin", data={"csrf": csrf, "credential": "bench"})
            first = await client.get(f"/users/{heavy}?size=50")
            token = _next_token(first.text)
            figures = {
                "overview": await timed(client, "/?size=25", rounds),
                "user_first_page": await timed(client, f"/users/{heavy}?size=50", rounds),
                # Only when the user has more than one page (not in a smoke run's sizes).
                "user_next_page": (
                    await timed(client, f"/users/{heavy}?size=50&page={token}", rounds)
                    if token
                    else None
                ),
                "ask": await timed(client, f"/users/{heavy}/ask?q=detail+number+42", rounds),
            }
    finally:
        await console.service.close()
        await server.stop(grace_s=0)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    figures = asyncio.run(run(args.users, args.memories, args.rounds))
    for page, f in figures.items():
        if f is None:
            continue
        print(
            f"{page:<36} p50 {f['p50_ms']:7.1f} ms  p95 {f['p95_ms']:7.1f} ms  "
            f"max {f['max_ms']:7.1f} ms"
        )
    if args.json_out:
        report = {"users": args.users, "memories": args.memories, "pages": figures}
        args.json_out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
