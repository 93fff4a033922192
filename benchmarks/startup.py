"""`memoryd serve` on an existing data directory: time to SERVING, where it went, RSS.

    PYTHONPATH=service:benchmarks .venv/bin/python benchmarks/startup.py \\
        --data-dir /tmp/bench/heavy-100x10k [--runs 3] [--retrieves 200 --users 100] \\
        [--json out.json]

Each run starts `memoryd serve` of this tree (or of `--tree`, for an A/B) on free ports
(default settings: the ONNX embedder, the embedded stores; `MEMORYD_LOG_LEVEL=INFO`) and
polls the health service's readiness (`""`) every `--poll-ms`, a new connection and a 1 s
deadline each time, as an orchestrator's probe does, from the moment the process is
started: the first answer (the start-up health process's NOT_SERVING) and the first
SERVING are reported in seconds since the start, as is each line the server logs (read
from its stderr as it comes; "vector store opened in" places the engine's load on the same
clock). Then the server's RSS (VmRSS, RssAnon, RssFile from /proc) and the data
directory's disk use; with `--settle`, how long the server keeps working after SERVING
(the first storage survey reads every memory) and its RSS then; with `--retrieves`,
Retrieve p50/p99 through gRPC (long-term, top 10, a new question each call) for users
`user-NNNN` drawn from `--users` (the names benchmarks/scale_1m.py writes; `--heavy-user
N` asks that one every time) and the RSS after them. The server is stopped with SIGTERM
after each run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

import load
from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc
from scale_kit import percentile

STATUS = {
    health_pb2.HealthCheckResponse.SERVING: "SERVING",
    health_pb2.HealthCheckResponse.NOT_SERVING: "NOT_SERVING",
}


def rss_mib(pid: int) -> dict[str, float]:
    """VmRSS and its anonymous and file-backed parts (clean mapped pages of the store's
    files are in RssFile: the kernel can take them back without writing anything)."""
    fields = ("VmRSS", "RssAnon", "RssFile")
    return {
        name: int(rest.split()[0]) / 1024
        for name, _, rest in (
            line.partition(":") for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
        if name in fields
    }


def disk_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def cpu_s(pid: int) -> float:
    """The process's user + system CPU so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pid: int, max_s: float) -> dict[str, float]:
    """Wait until the server stops working after SERVING (the maintenance loop's first
    storage survey reads every memory): until a second passes with under 0.1 s of its CPU,
    or `max_s`. How long that took, and the CPU it used."""
    started = time.monotonic()
    cpu0 = last = cpu_s(pid)
    while time.monotonic() - started < max_s:
        time.sleep(1.0)
        now = cpu_s(pid)
        if now - last < 0.1:
            break
        last = now
    return {"busy_after_serving_s": time.monotonic() - started, "cpu_after_serving_s": now - cpu0}


def _read_log(stream: Any, started: float, lines: list[str]) -> None:
    for line in stream:
        if '"memoryd.rpc"' in line or '"memoryd.retrieval"' in line:
            continue  # a line per call of the Retrieves
        lines.append(f"{time.monotonic() - started:6.2f}s {line.rstrip()}")


def _poll(target: str, started: float, poll_s: float, timeout_s: float) -> dict[str, Any]:
    """Health polls until SERVING: the first answer and the first SERVING, in seconds."""
    first_answer = None
    changes: list[str] = []
    last = ""
    while time.monotonic() - started < timeout_s:
        asked = time.monotonic()
        # A connection per probe, as an orchestrator's probe makes: a kept channel would
        # wait out its reconnect backoff (~1 s) after the start-up health server stops.
        with grpc.insecure_channel(target) as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=1
                )
                status = STATUS.get(reply.status, str(reply.status))
            except grpc.RpcError as exc:
                status = exc.code().name
        at = asked - started
        if status in STATUS.values() and first_answer is None:
            first_answer = at
        if status != last:
            changes.append(f"{at:6.2f}s {status}")
            last = status
        if status == "SERVING":
            return {"first_answer_s": first_answer, "serving_s": at, "health": changes}
        time.sleep(max(0.0, poll_s - (time.monotonic() - asked)))
    raise TimeoutError(f"no SERVING from {target} within {timeout_s:.0f} s: {changes}")


def _retrieves(target: str, args: argparse.Namespace, run: int) -> dict[str, Any]:
    rng = random.Random(run)
    latencies: list[float] = []
    with grpc.insecure_channel(target) as channel:
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        for n in range(args.warmup + args.retrieves):
            user = args.heavy_user if args.heavy_user is not None else rng.randrange(args.users)
            request = pb.RetrieveRequest(
                scope=pb.Scope(user_id=f"user-{user:04d}"),
                tiers=[pb.TIER_LONG_TERM],
                query=load.question(f"startup-{run}-{n}"),
                top_k=10,
            )
            t0 = time.perf_counter()
            stub.Retrieve(request, timeout=30)
            if n >= args.warmup:
                latencies.append((time.perf_counter() - t0) * 1000)
    return {
        "retrieves": len(latencies),
        "retrieve_p50_ms": percentile(latencies, 50),
        "retrieve_p99_ms": percentile(latencies, 99),
    }


def one_run(args: argparse.Namespace, run: int) -> dict[str, Any]:
    target = f"127.0.0.1:{load._free_port()}"
    env = {
        **os.environ,
        "PYTHONPATH": str(args.tree / "service"),
        "MEMORYD_LISTEN": target,
        "MEMORYD_DATA_DIR": str(args.data_dir),
        "MEMORYD_LOG_LEVEL": "INFO",
        "MEMORYD_METRICS__LISTEN": "127.0.0.1:0",
    }
    result: dict[str, Any] = {"run": run, "loadavg_before": os.getloadavg()}
    lines: list[str] = []
    started = time.monotonic()
    server = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "serve"], env=env, stderr=subprocess.PIPE, text=True
    )
    reader = threading.Thread(target=_read_log, args=(server.stderr, started, lines))
    reader.start()
    try:
        result |= _poll(target, started, args.poll_ms / 1000, args.timeout)
        result["rss_at_serving_mib"] = rss_mib(server.pid)
        if args.settle:
            result |= settle(server.pid, args.settle)
            result["rss_settled_mib"] = rss_mib(server.pid)
        if args.retrieves:
            result |= _retrieves(target, args, run)
            result["rss_after_retrieves_mib"] = rss_mib(server.pid)
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        reader.join()
    result["log"] = lines
    result["loadavg_after"] = os.getloadavg()
    print(
        f"run {run}: SERVING at {result['serving_s']:.2f} s (first answer "
        f"{result['first_answer_s']}), rss {result['rss_at_serving_mib']['VmRSS']:,.0f} MiB, "
        f"load "
        f"{result['loadavg_before'][0]:.2f} -> {result['loadavg_after'][0]:.2f}",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="an existing data dir")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--poll-ms", type=float, default=100.0)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to SERVING")
    parser.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="at most this many seconds, wait for the server's CPU to go quiet after SERVING",
    )
    parser.add_argument("--retrieves", type=int, default=0, help="after SERVING, through gRPC")
    parser.add_argument("--warmup", type=int, default=5, help="unrecorded Retrieves first")
    parser.add_argument("--users", type=int, default=1, help="user-0000 .. user-(N-1)")
    parser.add_argument("--heavy-user", type=int, help="ask only this user")
    parser.add_argument(
        "--tree", type=Path, default=load.ROOT, help="the checkout whose memoryd runs (A/B)"
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    runs = [one_run(args, n + 1) for n in range(args.runs)]
    serving = [r["serving_s"] for r in runs]
    result = {
        "data_dir": str(args.data_dir),
        "disk_mib": disk_mib(args.data_dir),
        "serving_s": serving,
        "serving_min_s": min(serving),
        "serving_median_s": percentile(serving, 50),
        "runs": runs,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
