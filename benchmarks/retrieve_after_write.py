"""Retrieve for one filled user, each question right after a new memory of that user (the
per-user caches cold, as an active agent calls it), single client through gRPC; and the
server's CPU per Retrieve split by thread, from /proc/<pid>/task/*/stat (issue 28).

    PYTHONPATH=service:benchmarks .venv/bin/python benchmarks/retrieve_after_write.py \\
        [--fill 10000] [--queries 300] [--write-every 1] [--data-dir D [--fill-only]] \\
        [--json out.json]

Starts `memoryd serve` of this tree on free ports (its configured embedder: the questions
and the new memories are embedded as in real use), fills one user with long-term memories
(load.py's fill) to `--fill` less the ones it will add, then `--queries` times: Add one
long-term memory of the user (every `--write-every` questions; 0: never, the warm-cache
comparison), then Retrieve a new question (long-term, top 10). Only the Retrieve is timed;
the server's threads' CPU (utime + stime) is read just before and after each Retrieve and
summed by thread name. The server starts with a `sitecustomize` (written to a temporary
directory) that gives each Python thread its Python name at the OS level (`memoryd-embed_N`:
the embedding batcher; `asyncio_N`: `asyncio.to_thread`, the store searches), so /proc tells
them apart; native threads keep the name of the thread that started them.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import grpc

import load
from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc
from scale_kit import percentile

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")
THREAD_NAMES = """
import ctypes, threading
_prctl = ctypes.CDLL(None).prctl
_run = threading.Thread._bootstrap_inner
def _named(self):
    _prctl(15, self.name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    _run(self)
threading.Thread._bootstrap_inner = _named
"""
# With --trace-store: every call of the vector store adapter, as one line "start name ms"
# (start on CLOCK_MONOTONIC, which the client shares), appended to $MEMORYD_TRACE_STORE.
STORE_TRACE = """
import os, time
from memoryd.stores.vectors import edge_store as _edge
_out = open(os.environ["MEMORYD_TRACE_STORE"], "a", buffering=1)
def _timed(name, fn):
    def call(self, *args, **kwargs):
        t0 = time.monotonic()
        try:
            return fn(self, *args, **kwargs)
        finally:
            label = name + ("[" + kwargs["order_by"] + "]" if kwargs.get("order_by") else "")
            _out.write("%.6f %s %.3f\\n" % (t0, label, (time.monotonic() - t0) * 1000))
    return call
for _name in ("count", "count_each", "scroll", "search", "retrieve", "upsert", "delete",
              "delete_where", "set_payload"):
    setattr(_edge.EdgeVectorStore, _name, _timed(_name, getattr(_edge.EdgeVectorStore, _name)))
"""


def thread_ticks(pid: int) -> dict[tuple[int, str], int]:
    """(tid, name) -> utime + stime ticks of every thread of `pid`."""
    ticks = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "stat").read_text()
        except OSError:  # the thread ended
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        ticks[(int(task.name), name)] = int(fields[11]) + int(fields[12])
    return ticks


async def measure(target: str, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    user = "bench-after-write"
    # The new memories bring the user to `--fill` at the end (the default quota is 10,000).
    writes = -(-(args.warmup + args.queries) // args.write_every) if args.write_every else 0
    filled = await load.fill(target, user, args.fill - writes)
    if args.fill_only:  # a data dir to copy for several runs (`memoryd compact` on one)
        return {"filled": filled, "windows": []}
    scope = pb.Scope(user_id=user, agent_id="agent", session_id="s", task_id="t")
    latencies: list[float] = []
    windows: list[tuple[float, float]] = []  # each recorded Retrieve, CLOCK_MONOTONIC
    cpu: dict[str, float] = defaultdict(float)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        for i in range(-args.warmup, args.queries):
            if args.write_every and i % args.write_every == 0:
                content = f"{load.fact(5_000_000 + i + args.warmup)} [after-write]"
                await stub.Add(pb.AddRequest(scope=scope, tier=pb.TIER_LONG_TERM, content=content))
            request = pb.RetrieveRequest(
                scope=scope,
                tiers=[pb.TIER_LONG_TERM],
                query=load.question(f"after-write-{i}"),
                top_k=10,
            )
            before = thread_ticks(pid)
            started = time.monotonic()
            t0 = time.perf_counter()
            await stub.Retrieve(request, timeout=load.CALL_TIMEOUT_S)
            elapsed = (time.perf_counter() - t0) * 1000
            ended = time.monotonic()
            after = thread_ticks(pid)
            if i < 0:
                continue
            latencies.append(elapsed)
            windows.append((started, ended))
            for key, value in after.items():
                cpu["main" if key[0] == pid else key[1]] += (value - before.get(key, 0)) * TICK_MS
    n = len(latencies)
    return {
        "fill": filled,
        "queries": n,
        "write_every": args.write_every,
        "retrieve_p50_ms": percentile(latencies, 50),
        "retrieve_p90_ms": percentile(latencies, 90),
        "retrieve_p99_ms": percentile(latencies, 99),
        "retrieve_max_ms": max(latencies),
        "server_cpu_ms_per_retrieve": sum(cpu.values()) / n,
        "cpu_ms_per_retrieve_by_thread": {
            k: v / n for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]) if v
        },
        "threads": sorted({name for _, name in thread_ticks(pid)}),
        "loadavg_after": os.getloadavg(),
        "windows": windows,
    }


def store_calls(trace: Path, windows: list[tuple[float, float]]) -> dict[str, dict[str, float]]:
    """Per store call name: calls and ms (wall, in the calling thread) per Retrieve, of the
    calls that started inside a recorded Retrieve."""
    starts = [w[0] for w in windows]
    calls: dict[str, list[float]] = defaultdict(list)
    for line in trace.read_text().splitlines():
        start, name, ms = line.split()
        i = bisect.bisect_right(starts, float(start)) - 1
        if i >= 0 and float(start) <= windows[i][1]:
            calls[name].append(float(ms))
    n = len(windows)
    return {
        name: {
            "calls_per_retrieve": len(ms) / n,
            "ms_per_retrieve": sum(ms) / n,
            "p50_ms": percentile(ms, 50),
        }
        for name, ms in sorted(calls.items(), key=lambda kv: -sum(kv[1]))
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fill", type=int, default=10_000, help="the user's memories")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=5, help="unrecorded questions first")
    parser.add_argument("--write-every", type=int, default=1, help="0: never write")
    parser.add_argument("--data-dir", type=Path, help="the server's (reused if filled)")
    parser.add_argument(
        "--fill-only", action="store_true", help="fill --data-dir for the run, then stop"
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument(
        "--trace-store",
        action="store_true",
        help="time every store call of the server (edge adapter) and report those of the "
        "Retrieves (adds a little to each call: compare traced runs with traced runs)",
    )
    args = parser.parse_args()
    data_dir = args.data_dir or Path(f"/tmp/memoryd-after-write-{time.time_ns()}")
    result: dict[str, Any] = {"loadavg_before": os.getloadavg()}
    shim = Path(tempfile.mkdtemp(prefix="memoryd-thread-names-"))
    (shim / "sitecustomize.py").write_text(THREAD_NAMES + (STORE_TRACE if args.trace_store else ""))
    env = {"PYTHONPATH": os.pathsep.join([str(shim), str(load.ROOT / "service")])}
    trace = shim / "store-calls.txt"
    if args.trace_store:
        env["MEMORYD_TRACE_STORE"] = str(trace)
    with load.server_process(env, data_dir) as (target, pid):
        result |= asyncio.run(measure(target, pid, args))
    windows = result.pop("windows")
    if args.trace_store:
        result["store_calls_per_retrieve"] = store_calls(trace, windows)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
