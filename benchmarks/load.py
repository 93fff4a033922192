"""A ghz-style load harness for memoryd: every RPC scenario, several client processes.

    make bench                                   # starts its own server, runs everything
    PYTHONPATH=service .venv/bin/python benchmarks/load.py --start-server
    PYTHONPATH=service .venv/bin/python benchmarks/load.py --target 127.0.0.1:50051 \\
        -c 1,50 -z 10s --procs 2 --scenarios add_long_term,retrieve_new [--driver python]

Each scenario runs once per concurrency in ``-c``: ``c`` callers (coroutines, each with
one call in flight) spread over ``--procs`` client processes (one gRPC channel each), for
``-z`` (duration) or ``-n`` (calls in total), after ``--warmup`` of unrecorded calls.

The client processes are Go (``--driver go``, benchmarks/driver/: compiled, goroutine
callers, ghz's way) when Debian's Go toolchain and packaged grpc libraries are installed
(``make clients-deps``), built into a temporary directory at start; else Python grpc.aio
processes (``--driver python``), which cost the shared cores far more and add their own
latency to every call: compare figures of one driver only. The report says which ran. A
report per run is written with ghz's field names (benchmarks/ghz_report.py), plus
``summary.json`` with the machine's load average around every run, the 10k-memory fill's
rate, and the configured embedder's own batched throughput on the long-term Adds' texts
(measured in this process while the server is idle), so Add RPS can be set against it.

Scenarios: health; add_<tier> for working, short_term, long_term, persona, episodic,
structured; add_batch (skipped when the contract has no AddBatch); retrieve_cached and
retrieve_new (the same few queries, or a new query every call) over one user with
``--fill`` long-term memories; retrieve_talks (a new question naming a speaker every call,
over a user with ``--fill`` conversation turns "Name: text"); add_long_term_one_user
(every caller adds for one user); retrieve_empty (a user with nothing); render_context
(new queries over the filled user). Targets are read against benchmarks/README.md, never
checked in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ghz_report import go_code_name, report
from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
FILLED_USER = "bench-filled"
FILLED_TALKS = "bench-talks"  # conversation turns, "Name: text"
CALL_TIMEOUT_S = 30.0

# --- texts: varied, deterministic, unique per index (so never deduplicated or cached) ---

_WHO = ["Ana", "The user", "Bob", "Maria", "The team", "Her manager", "Luis", "Priya"]
_DOES = [
    "prefers",
    "decided to use",
    "is allergic to",
    "asked about",
    "booked",
    "finished reading",
    "wants to learn",
    "complained about",
    "recommended",
    "moved away from",
]
_WHAT = [
    "green tea in the morning",
    "Postgres for the billing service",
    "shellfish",
    "a flight to Lisbon",
    "the quarterly roadmap",
    "Rust for the ingestion worker",
    "a standing desk",
    "the Heron public beta",
    "yoga classes on Thursdays",
    "dark mode in every editor",
    "the new CI pipeline",
    "a vegetarian diet",
    "the Kyoto trip itinerary",
    "weekly one-on-ones",
    "noise-cancelling headphones",
]
_WHEN = [
    "since last spring",
    "for the next release",
    "after the March incident",
    "on weekdays",
    "until the end of the year",
    "because of the budget review",
    "as of 2025",
    "when travelling",
]


_SPEAKERS = ["Ana", "Bob", "Maria", "Luis"]


def turn(n: int) -> str:
    """Turn `n` of a conversation: one of four speakers on one of the facts' topics."""
    rng = random.Random(n)
    return (
        f"{rng.choice(_SPEAKERS)}: I {rng.choice(_DOES)} {rng.choice(_WHAT)} "
        f"{rng.choice(_WHEN)} (note {n})"
    )


def talk_question(tag: str) -> str:
    rng = random.Random(tag)
    return f"What did {rng.choice(_SPEAKERS)} say about {rng.choice(_WHAT)}? [{tag}]"


def fact(n: int) -> str:
    rng = random.Random(n)
    return (
        f"{rng.choice(_WHO)} {rng.choice(_DOES)} {rng.choice(_WHAT)} {rng.choice(_WHEN)} (note {n})"
    )


def question(tag: str) -> str:
    rng = random.Random(tag)
    return f"what does {rng.choice(_WHO).lower()} think about {rng.choice(_WHAT)}? [{tag}]"


CACHED_QUERIES = [
    "what does the user drink in the morning",
    "which database did the team choose",
    "is anyone allergic to food",
    "where is the next trip",
    "what editor settings are preferred",
    "what is planned for the next release",
    "which classes are booked",
    "what changed in the CI pipeline",
]


# --- scenarios -----------------------------------------------------------------------


@dataclass(frozen=True)
class Ctx:
    """Who makes a call: the run, client process, caller and the caller's call number."""

    run: str
    proc: int
    worker: int
    seq: int

    @property
    def caller(self) -> str:
        return f"{self.run}-{self.proc}-{self.worker}"


def _scope(
    ctx: Ctx, *, user: str | None = None, agent: str = "agent", session: str = "s"
) -> pb.Scope:
    return pb.Scope(
        user_id=user or f"bench-{ctx.caller}", agent_id=agent, session_id=session, task_id="t"
    )


def _add_working(ctx: Ctx) -> Message:
    return pb.AddRequest(
        scope=_scope(ctx), tier=pb.TIER_WORKING, key=f"k{ctx.seq % 50}", content="v" * 64
    )


def _add_short_term(ctx: Ctx) -> Message:
    return pb.AddRequest(
        scope=_scope(ctx), tier=pb.TIER_SHORT_TERM, content=f"message {ctx.seq}: {fact(ctx.seq)}"
    )


def _long_term_index(ctx: Ctx) -> int:
    # Disjoint per caller, so no two calls of a run send the same text.
    return (ctx.proc * 1000 + ctx.worker) * 1_000_000 + ctx.seq


def _add_long_term(ctx: Ctx) -> Message:
    # A new user every 5,000 calls stays under the 10,000-memory quota.
    user = f"bench-{ctx.caller}-{ctx.seq // 5000}"
    return pb.AddRequest(
        scope=_scope(ctx, user=user),
        tier=pb.TIER_LONG_TERM,
        kind=pb.KIND_FACT,
        content=f"{fact(_long_term_index(ctx))} [{ctx.run}]",
    )


def _add_turns(ctx: Ctx) -> Message:
    # A conversation: sessions of 20 turns, each after the first embedded after its lead
    # and alone (ADR 0400, 0409); a new user every 5,000 calls (the quota).
    user, session = f"bench-turns-{ctx.caller}-{ctx.seq // 5000}", f"s{ctx.seq // 20}"
    return pb.AddRequest(
        scope=_scope(ctx, user=user, session=session),
        tier=pb.TIER_LONG_TERM,
        kind=pb.KIND_MESSAGE,
        content=f"{turn(_long_term_index(ctx))} [{ctx.run}]",
    )


def _add_long_term_one_user(ctx: Ctx) -> Message:
    # Every caller of the run writes for the same user (a new one every 100 calls of each
    # caller, under the 10,000-memory quota at c=50): their Adds meet at one user's lock.
    return pb.AddRequest(
        scope=_scope(ctx, user=f"bench-one-{ctx.run}-{ctx.seq // 100}"),
        tier=pb.TIER_LONG_TERM,
        kind=pb.KIND_FACT,
        content=f"{fact(_long_term_index(ctx))} [{ctx.run}] one user",
    )


def _add_persona(ctx: Ctx) -> Message:
    return pb.AddRequest(
        scope=_scope(ctx),
        tier=pb.TIER_PERSONA,
        key=f"preference {ctx.seq % 200}",
        content=f"{_WHAT[ctx.seq % len(_WHAT)]} ({ctx.seq})",
    )


def _add_episodic(ctx: Ctx) -> Message:
    episode = pb.Episode(
        task=f"task {ctx.seq}: {fact(ctx.seq)}",
        steps=[
            pb.EpisodeStep(action="searched the notes", observation="found two candidates"),
            pb.EpisodeStep(action="asked the user", observation="the user chose one"),
        ],
        outcome="done",
        success=True,
    )
    # A new agent every 500 calls stays under the 1,000 episodes per agent.
    return pb.AddRequest(
        scope=_scope(ctx, agent=f"agent-{ctx.seq // 500}"), tier=pb.TIER_EPISODIC, episode=episode
    )


def _add_structured(ctx: Ctx) -> Message:
    document = {"type": "order", "n": ctx.seq, "item": _WHAT[ctx.seq % len(_WHAT)], "qty": 2}
    return pb.AddRequest(
        scope=_scope(ctx, user=f"bench-{ctx.caller}-{ctx.seq // 2000}"),
        tier=pb.TIER_STRUCTURED,
        document_json=json.dumps(document),
    )


def _add_batch(ctx: Ctx) -> Message:
    items = [
        pb.AddRequest(
            scope=_scope(ctx, user=f"bench-{ctx.caller}-{ctx.seq // 500}"),
            tier=pb.TIER_LONG_TERM,
            content=f"{fact(_long_term_index(ctx) * 16 + i)} [{ctx.run}]",
        )
        for i in range(16)
    ]
    return pb.AddBatchRequest(items=items)  # type: ignore[attr-defined]


def _retrieve_cached(ctx: Ctx) -> Message:
    return pb.RetrieveRequest(
        scope=pb.Scope(user_id=FILLED_USER),
        tiers=[pb.TIER_LONG_TERM],
        query=CACHED_QUERIES[ctx.seq % len(CACHED_QUERIES)],
        top_k=10,
    )


def _new_question(user: str, ask: Callable[[str], str], ctx: Ctx) -> Message:
    """A question never asked before (so never a cached embedding) over a filled user."""
    return pb.RetrieveRequest(
        scope=pb.Scope(user_id=user),
        tiers=[pb.TIER_LONG_TERM],
        query=ask(f"{ctx.caller}-{ctx.seq}"),
        top_k=10,
    )


def _retrieve_new(ctx: Ctx) -> Message:
    return _new_question(FILLED_USER, question, ctx)


def _retrieve_talks(ctx: Ctx) -> Message:
    return _new_question(FILLED_TALKS, talk_question, ctx)


def _retrieve_empty(ctx: Ctx) -> Message:
    return pb.RetrieveRequest(
        scope=pb.Scope(user_id=f"bench-empty-{ctx.caller}"),
        tiers=[pb.TIER_LONG_TERM],
        query=CACHED_QUERIES[ctx.seq % len(CACHED_QUERIES)],
    )


def _render_context(ctx: Ctx) -> Message:
    return pb.RenderContextRequest(
        scope=pb.Scope(user_id=FILLED_USER),
        query=question(f"render-{ctx.caller}-{ctx.seq}"),
        token_budget=500,
    )


def _health(ctx: Ctx) -> Message:
    request: Message = health_pb2.HealthCheckRequest(service="")  # untyped module
    return request


@dataclass(frozen=True)
class Scenario:
    service: str  # "memory" or "health"
    method: str
    build: Callable[[Ctx], Message]
    fills: str = ""  # the filled user it reads (FILLED_USER or FILLED_TALKS), if any

    def available(self) -> str | None:
        """None when it can run against this contract, else why not."""
        if self.method == "AddBatch" and not hasattr(pb, "AddBatchRequest"):
            return "the contract has no AddBatch RPC yet"
        return None


# In the default order, add_short_term runs last: each message it adds is copied to the
# long-term tier behind the scenes (write-behind), embedding for a while after the run.
SCENARIOS: dict[str, Scenario] = {
    "health": Scenario("health", "Check", _health),
    "add_working": Scenario("memory", "Add", _add_working),
    "add_long_term": Scenario("memory", "Add", _add_long_term),
    "add_long_term_one_user": Scenario("memory", "Add", _add_long_term_one_user),
    "add_turns": Scenario("memory", "Add", _add_turns),
    "add_persona": Scenario("memory", "Add", _add_persona),
    "add_episodic": Scenario("memory", "Add", _add_episodic),
    "add_structured": Scenario("memory", "Add", _add_structured),
    "add_batch": Scenario("memory", "AddBatch", _add_batch),
    "retrieve_cached": Scenario("memory", "Retrieve", _retrieve_cached, fills=FILLED_USER),
    "retrieve_new": Scenario("memory", "Retrieve", _retrieve_new, fills=FILLED_USER),
    "retrieve_talks": Scenario("memory", "Retrieve", _retrieve_talks, fills=FILLED_TALKS),
    "retrieve_empty": Scenario("memory", "Retrieve", _retrieve_empty),
    "render_context": Scenario("memory", "RenderContext", _render_context, fills=FILLED_USER),
    "add_short_term": Scenario("memory", "Add", _add_short_term),
}


# --- client processes ----------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    scenario: str
    target: str
    run: str
    proc: int
    callers: int  # in this process
    first_worker: int  # callers are numbered across processes
    start_at: float  # wall clock, the same for every process
    warmup_s: float
    duration_s: float | None
    counts: tuple[int, ...] | None  # calls each caller records, in count mode


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def _run_job(job: Job) -> dict[str, Any]:
    scenario = SCENARIOS[job.scenario]
    latencies: list[int] = []
    codes: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    window = [float("inf"), 0.0]
    measure_from = job.start_at + job.warmup_s
    measure_to = measure_from + job.duration_s if job.duration_s is not None else None
    async with grpc.aio.insecure_channel(job.target) as channel:
        stub: Any = (
            health_pb2_grpc.HealthStub(channel)
            if scenario.service == "health"
            else memory_pb2_grpc.MemoryServiceStub(channel)
        )
        call = getattr(stub, scenario.method)

        async def caller(index: int) -> None:
            worker = job.first_worker + index
            wanted = job.counts[index] if job.counts is not None else None
            recorded = seq = 0
            while True:
                started_wall = time.time()
                if measure_to is not None and started_wall >= measure_to:
                    return
                if wanted is not None and recorded >= wanted:
                    return
                request = scenario.build(Ctx(job.run, job.proc, worker, seq))
                seq += 1
                started = time.perf_counter_ns()
                code, error = "OK", None
                try:
                    await call(request, timeout=CALL_TIMEOUT_S)
                except grpc.aio.AioRpcError as exc:
                    code = go_code_name(exc.code().name)
                    error = f"rpc error: code = {code} desc = {exc.details()}"
                elapsed = time.perf_counter_ns() - started
                if started_wall < measure_from:
                    continue  # warm-up
                recorded += 1
                latencies.append(elapsed)
                codes[code] += 1
                if error is not None:
                    errors[error] += 1
                window[0] = min(window[0], started_wall)
                window[1] = max(window[1], time.time())

        await asyncio.sleep(max(0.0, job.start_at - time.time()))
        await asyncio.gather(*(caller(i) for i in range(job.callers)))
    return {"latencies": latencies, "codes": codes, "errors": errors, "window": window}


def _client_process(conn: Connection) -> None:
    while True:
        job = conn.recv()
        if job is None:
            return
        conn.send(asyncio.run(_run_job(job)))


class Clients:
    """Client processes kept for the whole run (spawned: grpc does not survive fork)."""

    def __init__(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs = []
        for _ in range(count):
            parent, child = context.Pipe()
            proc = context.Process(target=_client_process, args=(child,), daemon=True)
            proc.start()
            self._conns.append(parent)
            self._procs.append(proc)

    def run(self, jobs: list[Job]) -> list[dict[str, Any]]:
        for conn, job in zip(self._conns, jobs, strict=False):
            conn.send(job)
        return [conn.recv() for conn in self._conns[: len(jobs)]]

    def close(self) -> None:
        for conn in self._conns:
            conn.send(None)
        for proc in self._procs:
            proc.join(timeout=10)


GO_PACKAGE = "memoryd.dev"
GO_LIBRARIES = Path("/usr/share/gocode")


def go_missing() -> str | None:
    """None when the Go driver can be built here, else why not."""
    if shutil.which("go") is None:
        return "no `go` toolchain (make clients-deps)"
    if not (GO_LIBRARIES / "src/google.golang.org/grpc").is_dir():
        return f"no packaged grpc-go under {GO_LIBRARIES} (make clients-deps)"
    return None


def build_go_driver(workdir: Path) -> Path:
    """benchmarks/driver built against the committed Go stubs, in GOPATH mode with
    Debian's packaged libraries (no module proxy here), into `workdir`."""
    src = workdir / "src" / GO_PACKAGE
    src.mkdir(parents=True, exist_ok=True)
    for name, target in (("client", ROOT / "clients/go"), ("driver", ROOT / "benchmarks/driver")):
        if not (src / name).exists():
            (src / name).symlink_to(target)
    binary = workdir / "driver"
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{workdir}:{GO_LIBRARIES}",
        "GOFLAGS": "",
    }
    if not any(os.environ.get(v) for v in ("GOCACHE", "XDG_CACHE_HOME", "HOME")):
        env["GOCACHE"] = str(workdir / "cache")  # go's default cache lives under $HOME
    built = subprocess.run(
        ["go", "build", "-o", str(binary), f"{GO_PACKAGE}/driver"],
        env=env,
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        raise RuntimeError(f"the Go driver does not build:\n{built.stderr}")
    return binary


class GoClients:
    """The Go driver: one process per job, started for each run (a few ms), each with
    one connection; its JSON is the shape `_run_job` returns."""

    def __init__(self, binary: Path) -> None:
        self._binary = binary

    def command(self, job: Job) -> list[str]:
        args = [
            str(self._binary),
            f"-target={job.target}",
            f"-scenario={job.scenario}",
            f"-run={job.run}",
            f"-proc={job.proc}",
            f"-c={job.callers}",
            f"-first-worker={job.first_worker}",
            f"-start-at={job.start_at:.6f}",
            f"-warmup={job.warmup_s}",
            f"-timeout={CALL_TIMEOUT_S}",
        ]
        if job.counts is not None:
            args.append("-counts=" + ",".join(str(n) for n in job.counts))
        else:
            args.append(f"-z={job.duration_s}")
        return args

    def run(self, jobs: list[Job]) -> list[dict[str, Any]]:
        procs = [
            subprocess.Popen(self.command(job), stdout=subprocess.PIPE, text=True) for job in jobs
        ]
        results = []
        for proc in procs:
            out, _ = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"the Go driver failed (exit {proc.returncode})")
            raw = json.loads(out)
            window = raw["window"] if raw["latencies"] else [float("inf"), 0.0]
            results.append(
                {
                    "latencies": raw["latencies"],
                    "codes": Counter(raw["codes"]),
                    "errors": Counter(raw["errors"]),
                    "window": window,
                }
            )
        return results

    def close(self) -> None:
        pass


def run_scenario(
    clients: Clients | GoClients,
    args: argparse.Namespace,
    name: str,
    concurrency: int,
) -> dict[str, Any]:
    procs = max(1, min(args.procs, concurrency))
    per_proc = _split(concurrency, procs)
    counts = _split(args.total, concurrency) if args.total else None
    start_at = time.time() + 1.0  # every process is listening by then
    jobs, first = [], 0
    for proc, callers in enumerate(per_proc):
        jobs.append(
            Job(
                scenario=name,
                target=args.target,
                run=args.run,
                proc=proc,
                callers=callers,
                first_worker=first,
                start_at=start_at,
                warmup_s=args.warmup,
                duration_s=None if args.total else args.duration,
                counts=tuple(counts[first : first + callers]) if counts else None,
            )
        )
        first += callers
    load_before = os.getloadavg()
    results = clients.run(jobs)
    load_after = os.getloadavg()
    latencies = [x for r in results for x in r["latencies"]]
    codes: Counter[str] = sum((r["codes"] for r in results), Counter())
    errors: Counter[str] = sum((r["errors"] for r in results), Counter())
    if args.total:
        begin = min(r["window"][0] for r in results)
        end = max(r["window"][1] for r in results)
        total_ns = int(max(0.0, end - begin) * 1e9)
    else:
        total_ns = int(args.duration * 1e9)
    options = {
        "concurrency": concurrency,
        "processes": procs,
        "duration_s": None if args.total else args.duration,
        "total": args.total or None,
        "warmup_s": args.warmup,
        "driver": args.driver,
        "target": args.target,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
    }
    return report(f"{name} c={concurrency}", latencies, total_ns, codes, errors, options)


# --- the filled user, the embedder's own throughput, the server ----------------------


async def _usage_count(target: str, user: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        usage = await stub.Usage(pb.UsageRequest(scope=pb.Scope(user_id=user)))
    return next((t.count for t in usage.tiers if t.tier == pb.TIER_LONG_TERM), 0)


async def fill(
    target: str, user: str, wanted: int, concurrency: int = 16, *, talks: bool = False
) -> dict[str, Any]:
    """Add long-term memories to `user` until it has `wanted`; the rate per thousand. With
    `talks`, conversation turns (kind MESSAGE, 20 a session) instead of facts."""
    have = await _usage_count(target, user)
    if have >= wanted:
        return {"memories": have, "added": 0}
    todo = iter(range(have, wanted))
    done_at: list[float] = []
    started = time.perf_counter()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = memory_pb2_grpc.MemoryServiceStub(channel)

        async def adder() -> None:
            for n in todo:
                kinds = (pb.KIND_FACT, pb.KIND_PREFERENCE, pb.KIND_DECISION, pb.KIND_NOTE)
                request = (
                    pb.AddRequest(
                        scope=pb.Scope(user_id=user, session_id=f"s{n // 20}"),
                        tier=pb.TIER_LONG_TERM,
                        kind=pb.KIND_MESSAGE,
                        content=turn(n),
                    )
                    if talks
                    else pb.AddRequest(
                        scope=pb.Scope(user_id=user),
                        tier=pb.TIER_LONG_TERM,
                        kind=kinds[n % 4],
                        content=fact(n),
                    )
                )
                await stub.Add(request, timeout=120)
                done_at.append(time.perf_counter() - started)
                if len(done_at) % 1000 == 0:
                    rate = 1000 / (done_at[-1] - (done_at[-1001] if len(done_at) > 1000 else 0))
                    print(
                        f"  filled {have + len(done_at):,}/{wanted:,} ({rate:,.0f}/s)", flush=True
                    )

        await asyncio.gather(*(adder() for _ in range(concurrency)))
    thousands = [
        1000 / (done_at[i + 999] - (done_at[i - 1] if i else 0))
        for i in range(0, len(done_at) - 999, 1000)
    ]
    return {
        "memories": await _usage_count(target, user),
        "added": len(done_at),
        "seconds": done_at[-1] if done_at else 0.0,
        "rate_per_thousand": thousands,
    }


def embedder_throughput(count: int, server_env: dict[str, str]) -> dict[str, Any]:
    """The configured embedder (as the server's settings choose it, uncached) on texts like
    add_long_term's, batched as the server batches (``batch_max_size`` texts per call),
    and one text per call. In a child process, so it loads its own model."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        result: dict[str, Any] = pool.apply(_embedder_throughput, (count, server_env))
    result["loadavg_after"] = os.getloadavg()
    return result


def _embedder_throughput(count: int, server_env: dict[str, str]) -> dict[str, Any]:
    texts = [f"{fact(90_000_000 + i)} [embedder]" for i in range(count)]
    saved = {k: os.environ.get(k) for k in server_env}
    os.environ.update(server_env)
    try:
        from memoryd.settings import Settings
        from memoryd.stores import embeddings

        settings = Settings()
        embedder = embeddings.ADAPTERS[embeddings.adapter_name(settings)](settings)
        embedder.warm()
        size = settings.embedder.batch_max_size
        started = time.perf_counter()
        for i in range(0, len(texts), size):
            embedder.embed(texts[i : i + size])
        batched = len(texts) / (time.perf_counter() - started)
        singles = []
        for text in texts[:200]:
            t0 = time.perf_counter_ns()
            embedder.embed([text])
            singles.append(time.perf_counter_ns() - t0)
        singles.sort()
        return {
            "embedder": f"{embedder.name} ({settings.embedder.provider})",
            "texts": len(texts),
            "batch_size": size,
            "batched_texts_per_s": batched,
            "single_p50_ns": singles[len(singles) // 2],
            "single_p99_ns": singles[int(len(singles) * 0.99)],
        }
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_serving(target: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with grpc.insecure_channel(target) as channel:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=2
                )
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"no SERVING answer from {target} within {timeout_s:.0f} s")


@contextmanager
def started_server(env: dict[str, str], data_dir: Path) -> Iterator[str]:
    with server_process(env, data_dir) as (target, _):
        yield target


@contextmanager
def server_process(env: dict[str, str], data_dir: Path) -> Iterator[tuple[str, int]]:
    """`memoryd serve` of this tree on a free port, once SERVING: its target and pid."""
    target = f"127.0.0.1:{_free_port()}"
    full_env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "service"),
        "MEMORYD_LISTEN": target,
        "MEMORYD_DATA_DIR": str(data_dir),
        "MEMORYD_LOG_LEVEL": "WARNING",
        # Metrics on, as by default, on a free port: another server may hold the fixed one.
        "MEMORYD_METRICS__LISTEN": "127.0.0.1:0",
        **env,
    }
    server = subprocess.Popen([sys.executable, "-m", "memoryd", "serve"], env=full_env)
    try:
        _wait_serving(target, 600)
        yield target, server.pid
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# --- the command line ---------------------------------------------------------------


def _seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)?", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 10s, 500ms, 1m)")
    value, unit = float(match.group(1)), match.group(2) or "s"
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0}[unit]


def _ms(ns: float) -> str:
    return f"{ns / 1e6:8.2f}"


def print_table(reports: list[dict[str, Any]]) -> None:
    print(
        f"\n{'scenario':28s} {'count':>7s} {'rps':>9s} {'avg ms':>8s} {'p50 ms':>8s} "
        f"{'p90 ms':>8s} {'p99 ms':>8s} {'errors':>7s}  load"
    )
    for r in reports:
        dist = {d["percentage"]: d["latency"] for d in r["latencyDistribution"]}
        failed = r["count"] - r["statusCodeDistribution"].get("OK", 0)
        load = r["options"]["loadavg_after"][0]
        print(
            f"{r['name']:28s} {r['count']:7d} {r['rps']:9.1f} {_ms(r['average'])} "
            f"{_ms(dist[50])} {_ms(dist[90])} {_ms(dist[99])} {failed:7d}  {load:.1f}"
        )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--target", help="host:port of a running memoryd (default: start one)")
    p.add_argument("--start-server", action="store_true", help="start a server (the default)")
    p.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment of the started server and of the embedder measurement",
    )
    p.add_argument("-c", "--concurrency", default="1,50", help="comma list (default 1,50)")
    p.add_argument("--procs", type=int, default=2, help="client processes (default 2)")
    p.add_argument("-z", "--duration", type=_seconds, default=10.0, help="per run (10s)")
    p.add_argument("-n", "--total", type=int, default=0, help="calls per run instead of -z")
    p.add_argument("--warmup", type=_seconds, default=2.0, help="unrecorded calls first (2s)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma list, in order")
    p.add_argument("--fill", type=int, default=10_000, help="memories of the filled user")
    p.add_argument(
        "--embedder-texts",
        type=int,
        default=1024,
        help="texts of the embedder's own throughput, measured after add_long_term (0: skip)",
    )
    p.add_argument(
        "--driver",
        choices=("auto", "go", "python"),
        default="auto",
        help="client processes: go (benchmarks/driver) or python; auto: go when it can be "
        "built here",
    )
    p.add_argument("--out", type=Path, help="report directory (default benchmarks/results/…)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        print(f"unknown scenarios: {unknown}; known: {sorted(SCENARIOS)}", file=sys.stderr)
        return 2
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    server_env = dict(item.split("=", 1) for item in args.server_env)
    # Filling one user needs the byte-quota check not to scan the user's memories on every
    # Add (issue 18's usage counters): with 8 KB items at most, 10,000 fit in the 100 MB
    # quota, so the check is skipped. The bench's texts are under 200 bytes.
    server_env.setdefault("MEMORYD_LIMITS__MAX_CONTENT_BYTES", "8192")
    args.run = f"{int(time.time()) % 100000:05d}"
    missing = go_missing()
    if args.driver == "go" and missing:
        print(f"--driver go: {missing}", file=sys.stderr)
        return 2
    if args.driver == "auto":
        args.driver = "python" if missing else "go"
        if missing:
            print(f"driver: python ({missing}); its client processes load the cores more")
    out = args.out or ROOT / "benchmarks" / "results" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout,
        },
        "argv": sys.argv,
        "server_env": server_env,
        "driver": args.driver,
        "runs": [],
    }
    with (
        tempfile.TemporaryDirectory(prefix="memoryd-bench-") as data_dir,
        tempfile.TemporaryDirectory(prefix="memoryd-driver-") as go_dir,
        (
            started_server(server_env, Path(data_dir)) if not args.target else _given(args.target)
        ) as target,
    ):
        args.target = target
        for user in dict.fromkeys(SCENARIOS[n].fills for n in names if SCENARIOS[n].fills):
            if not args.fill:
                break
            print(f"filling {user} to {args.fill:,} long-term memories")
            filled = asyncio.run(fill(target, user, args.fill, talks=user == FILLED_TALKS))
            summary["fill" if user == FILLED_USER else f"fill_{user}"] = filled
        clients = (
            GoClients(build_go_driver(Path(go_dir))) if args.driver == "go" else Clients(args.procs)
        )
        print(f"driver: {args.driver}, {args.procs} client processes")
        reports: list[dict[str, Any]] = []
        try:
            for name in names:
                why_not = SCENARIOS[name].available()
                if why_not:
                    print(f"{name}: skipped, {why_not}")
                    summary["runs"].append({"name": name, "skipped": why_not})
                    continue
                for c in concurrencies:
                    result = run_scenario(clients, args, name, c)
                    reports.append(result)
                    summary["runs"].append({"name": result["name"], "file": f"{name}-c{c}.json"})
                    (out / f"{name}-c{c}.json").write_text(json.dumps(result, indent=2))
                    print_table([result])
                if name == "add_long_term" and args.embedder_texts:
                    # Right after the Adds, with the server idle: the same load around both.
                    summary["embedder"] = embedder_throughput(args.embedder_texts, server_env)
        finally:
            clients.close()
    summary["machine"]["uptime_after"] = subprocess.run(
        ["uptime"], capture_output=True, text=True
    ).stdout
    print_table(reports)
    embedder = summary.get("embedder")
    if embedder:
        print(
            f"\nembedder {embedder['embedder']}: {embedder['batched_texts_per_s']:.0f} texts/s "
            f"batched by {embedder['batch_size']}, one text p50 "
            f"{embedder['single_p50_ns'] / 1e6:.2f} ms"
        )
        for r in reports:
            if r["name"].startswith("add_long_term"):
                share = r["rps"] / embedder["batched_texts_per_s"]
                print(f"  {r['name']}: {r['rps']:.0f} RPS = {share:.0%} of it")
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nreports in {out}")
    return 0


@contextmanager
def _given(target: str) -> Iterator[str]:
    yield target


if __name__ == "__main__":
    sys.exit(main())
