"""Framing overhead of each client: a no-op round trip (Health Check) and a working-tier
Add, one call at a time, from Python sync, Python asyncio, Node (TypeScript client) and Go,
all against the same memoryd, each reported against the others.

    .venv/bin/python benchmarks/framing/framing_overhead.py [--target HOST:PORT] [-n 500]

Without --target it starts `memoryd serve` on a free port with a temporary data dir. Node
needs `make test-clients` (or `npm ci && npm run build` in clients/typescript) first; Go
needs Debian's Go packages (`make clients-deps`). A client whose toolchain is missing is
left out. Prints p50 / p99 / mean per client and operation, and each p50 relative to
Python sync's. No thresholds: the numbers are for reading, not for gating.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "clients" / "python")]

from memoryd_client import AsyncMemoryClient, MemoryClient  # noqa: E402

WARMUP = 20


@contextmanager
def memoryd(target: str | None) -> Iterator[str]:
    if target:
        yield target
        return
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-") as data:
        env = {
            **os.environ,
            "MEMORYD_DATA_DIR": data,
            "PYTHONPATH": str(ROOT / "service"),
            # Metrics on a free port: another server on this machine may hold the fixed one.
            "MEMORYD_METRICS__LISTEN": "127.0.0.1:0",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "serve", "--listen", "127.0.0.1:0"],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stderr is not None
            seen: list[str] = []
            for line in proc.stderr:
                seen.append(line)
                if found := re.search(r"MemoryService on port (\d+)", line):
                    break
            else:
                raise RuntimeError("memoryd did not start:\n" + "".join(seen[-20:]))
            yield f"127.0.0.1:{found.group(1)}"
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def python_sync(target: str, n: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {}
    with MemoryClient(target) as client:
        ops: dict[str, Callable[[int], Any]] = {
            "health": lambda i: client.health(),
            "add_working": lambda i: client.add(
                user_id="bench-py",
                agent_id="a",
                task_id="t",
                tier="working",
                key=f"k{i % 50}",
                content="v",
            ),
        }
        for name, call in ops.items():
            for i in range(WARMUP):
                call(i)
            samples = []
            for i in range(n):
                started = time.perf_counter()
                call(i)
                samples.append((time.perf_counter() - started) * 1000)
            results[name] = samples
    return results


async def python_async(target: str, n: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {}
    async with AsyncMemoryClient(target) as client:
        ops: dict[str, Callable[[int], Awaitable[Any]]] = {
            "health": lambda i: client.health(),
            "add_working": lambda i: client.add(
                user_id="bench-aio",
                agent_id="a",
                task_id="t",
                tier="working",
                key=f"k{i % 50}",
                content="v",
            ),
        }
        for name, call in ops.items():
            for i in range(WARMUP):
                await call(i)
            samples = []
            for i in range(n):
                started = time.perf_counter()
                await call(i)
                samples.append((time.perf_counter() - started) * 1000)
            results[name] = samples
    return results


def _json_lines(out: str) -> dict[str, list[float]]:
    return {d["op"]: d["ms"] for d in map(json.loads, out.splitlines()) if d}


def node(target: str, n: int) -> dict[str, list[float]] | None:
    built = ROOT / "clients/typescript/dist/src/index.js"
    if not shutil.which("node") or not built.exists():
        print("node: skipped (build clients/typescript first)", file=sys.stderr)
        return None
    script = Path(__file__).with_name("bench.mjs")
    out = subprocess.run(
        ["node", str(script), target, str(n)], check=True, capture_output=True, text=True
    )
    return _json_lines(out.stdout)


def go(target: str, n: int) -> dict[str, list[float]] | None:
    if not shutil.which("go") or not Path("/usr/share/gocode/src/google.golang.org/grpc").is_dir():
        print("go: skipped (make clients-deps)", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory(prefix="memoryd-gopath-") as gopath:
        src = Path(gopath, "src")
        (src / "memoryd.dev").mkdir(parents=True)
        (src / "memoryd.dev/client").symlink_to(ROOT / "clients/go")
        (src / "framingbench").symlink_to(Path(__file__).parent)
        env = {**os.environ, "GO111MODULE": "off", "GOPATH": f"{gopath}:/usr/share/gocode"}
        binary = Path(gopath, "bench")
        subprocess.run(["go", "build", "-o", str(binary), "framingbench"], env=env, check=True)
        out = subprocess.run(
            [str(binary), "-target", target, "-n", str(n)],
            check=True,
            capture_output=True,
            text=True,
        )
    return _json_lines(out.stdout)


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", help="a running memoryd (default: start one)")
    parser.add_argument("-n", type=int, default=500, help="calls per client and operation")
    parser.add_argument("--json-out", help="write every sample here")
    args = parser.parse_args()
    with memoryd(args.target) as target:
        runs: dict[str, dict[str, list[float]] | None] = {
            "python-sync": python_sync(target, args.n),
            "python-asyncio": asyncio.run(python_async(target, args.n)),
            "node": node(target, args.n),
            "go": go(target, args.n),
        }
    measured = {k: v for k, v in runs.items() if v}
    base = measured["python-sync"]
    print(
        f"{'op':12s} {'client':15s} {'p50 ms':>8s} {'p99 ms':>8s} {'mean ms':>8s}"
        f" {'p50 vs py-sync':>15s}"
    )
    for op in ("health", "add_working"):
        for name, result in measured.items():
            s = result[op]
            ratio = pct(s, 50) / pct(base[op], 50)
            print(
                f"{op:12s} {name:15s} {pct(s, 50):8.3f} {pct(s, 99):8.3f} "
                f"{statistics.fmean(s):8.3f} {ratio:14.2f}x"
            )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(measured))


if __name__ == "__main__":
    main()
