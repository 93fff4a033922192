"""Every benchmark still runs: each script under benchmarks/ is run here as its commands in
benchmarks/README.md run it, with tiny sizes, against real parts (its own `memoryd serve`
processes, a real Redis, the embedded stores, the ONNX model where it embeds), and the
report it writes has the fields its readers use. No figure is asserted (benchmarks are
never timed tests): a script that no longer starts, or no longer reports, fails here.

A new file in benchmarks/ fails `test_every_benchmark_file_is_run_by_a_smoke_run` until
it has a smoke run below (or is exercised by one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import load
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
# Generous: a smoke run takes seconds alone, more on a machine shared with other work.
TIMEOUT_S = 300
# What the loaded reports of a ghz-style run hold (DESIGN.md §6).
GHZ_FIELDS = ("name", "count", "total", "average", "rps", "latencyDistribution.0.latency")


@dataclass(frozen=True)
class Smoke:
    """One run of `script` (relative to benchmarks/) with `args` (split on spaces), in
    which `{tmp}` is a fresh directory and `{a}`, `{b}` (targets), `{pid}`, `{pid_b}`,
    `{redis_port}` the servers it needs; then each report file (relative to `{tmp}`) must
    hold each dotted field."""

    script: str
    args: str
    reports: dict[str, tuple[str, ...]]
    needs: frozenset[str] = field(default_factory=frozenset)  # "servers", "go", "mem0"


SMOKES: dict[str, Smoke] = {
    "ab_server_cpu": Smoke(
        "ab_server_cpu.py",
        "--a {a}:{pid} --b {b}:{pid_b} --rounds 1 -n 5 -c 1 --driver python --out {tmp}/ab "
        "--json {tmp}/report.json",
        {
            "report.json": (
                "runs.0.side",
                "runs.1.side",
                "runs.0.rps",
                "runs.0.p99_ms",
                "runs.0.server_cpu_us_per_call",
            )
        },
        frozenset({"servers"}),
    ),
    "capacity_rss": Smoke(
        "capacity_rss.py",
        "--points 30 --batch 20 --json {tmp}/report.json",
        {"report.json": ("count", "rss_bytes_per_point", "disk_bytes_per_point")},
    ),
    "cost_per_rpc": Smoke(
        "cost_per_rpc.py",
        "--target {a} --pid {pid} --redis-port {redis_port} -n 3 --settle 0.2 --json "
        "{tmp}/report.json",
        {
            "report.json": (
                "operations.4.operation",
                "operations.0.cpu_ms_per_call",
                "operations.0.redis_commands_per_call",
            )
        },
        frozenset({"servers"}),
    ),
    "console_pages": Smoke(
        "console_pages.py",
        "--users 5 --memories 20 --rounds 1 --json-out {tmp}/report.json",
        {
            "report.json": (
                "pages.overview.p50_ms",
                "pages.user_first_page.p50_ms",
                "pages.ask.p50_ms",
            )
        },
    ),
    "edge_gil": Smoke(
        "edge_gil.py",
        "--points 50 --seconds 0.1 --json {tmp}/report.json",
        {
            "report.json": (
                "searches_per_s_1_threads",
                "searches_per_s_2_threads",
                "python_loop_beside_searches",
            )
        },
    ),
    "embedder_parity": Smoke(
        "embedder_parity.py",
        "--reference onnx-int8s --runtimes onnx-int8s --json {tmp}/report.json",
        {
            "report.json": (
                "memories",
                "queries",
                "cosine_to_reference.onnx-int8s.min",
                "recall_at_5.onnx-int8s/onnx-int8s",
            )
        },
    ),
    "static_recipes": Smoke(
        "static_recipes.py",
        "--weights u8 --texts 8 --rounds 1 --json {tmp}/report.json",
        {
            "report.json": (
                "formats.u8.cosine_to_torch.min",
                "formats.u8.kernel_to_exact_products.mean",
                "formats.u8.texts_per_s_32",
                "probes.torch.s5 grounded",
            )
        },
    ),
    "embedder_speed": Smoke(
        "embedder_speed.py",
        "--runtimes onnx-int8s --threads 1 --rounds 1 --texts 8 --queries 3 --json "
        "{tmp}/report.json",
        {
            "report.json": (
                "configs.0.batched_texts_per_s",
                "configs.0.alone_texts_per_s",
                "configs.0.one_p99_ms",
            )
        },
    ),
    "fill_user": Smoke(
        "fill_user.py",
        "--memories 20 --concurrency 2 --step 10 --json-out {tmp}/report.json",
        {"report.json": ("memories", "rates_per_step", "cpu_ms_per_add_per_step", "last_vs_first")},
    ),
    "framing_overhead": Smoke(
        "framing/framing_overhead.py",
        "-n 3 --json-out {tmp}/report.json",
        {
            "report.json": (
                "python-sync.health",
                "python-sync.add_working",
                "python-asyncio.add_working",
            )
        },
    ),
    "load": Smoke(
        "load.py",
        "--start-server --driver python --procs 1 -c 2 -n 6 --warmup 0s --scenarios "
        "health,add_long_term,add_turns,retrieve_new,retrieve_talks --fill 20 --embedder-texts 8 "
        "--out {tmp}/out",
        {
            "out/summary.json": (
                "date",
                "machine.cpus",
                "driver",
                "fill.memories",
                "fill_bench-talks.memories",
                "embedder.batched_texts_per_s",
                "runs.4.file",
            ),
            "out/health-c2.json": GHZ_FIELDS,
            "out/add_turns-c2.json": GHZ_FIELDS,
            "out/retrieve_new-c2.json": GHZ_FIELDS,
            "out/retrieve_talks-c2.json": GHZ_FIELDS,
        },
    ),
    "load --driver go": Smoke(
        "load.py",
        "--start-server --driver go --procs 1 -c 1 -n 6 --warmup 0s --scenarios "
        "health,add_working,add_turns,retrieve_talks --fill 20 --embedder-texts 0 "
        "--out {tmp}/out",
        {
            "out/summary.json": ("driver", "runs.3.file"),
            "out/add_turns-c1.json": GHZ_FIELDS,
            "out/add_working-c1.json": GHZ_FIELDS,
            "out/retrieve_talks-c1.json": GHZ_FIELDS,
        },
        frozenset({"go"}),
    ),
    "memory_footprint": Smoke(
        "memory_footprint.py",
        "--memories 40 --users 2 --json {tmp}/report.json",
        {
            "report.json": (
                "memories",
                "rss_growth_mib",
                "vectors_on_disk_mib",
                "per_1m_memories.rss_mib",
            )
        },
    ),
    "retrieve_after_write": Smoke(
        "retrieve_after_write.py",
        "--fill 20 --queries 3 --warmup 1 --data-dir {tmp}/data --json {tmp}/report.json",
        {
            "report.json": (
                "fill.memories",
                "retrieve_p99_ms",
                "server_cpu_ms_per_retrieve",
                "cpu_ms_per_retrieve_by_thread",
            )
        },
    ),
    "retrieve_at_scale": Smoke(
        "retrieve_at_scale.py",
        "--memories 30 --queries 2 --top-k 10 --rounds 2 --json {tmp}/report.json",
        {"report.json": ("rows.0.p50_ms", "rows.6.p99_ms", "rows.0.embedding_p50_ms")},
    ),
    "scope_filter": Smoke(
        "scope_filter.py",
        "--users 2 --per-user 60 --heavy 120 --light 20 --queries 3 --check-users 2 "
        "--data-dir {tmp}/data --json {tmp}/report.json",
        {
            "report.json": (
                "filter_a",
                "filter_b",
                "other_users_same_count",
                "timed.heavy.same_points",
                "timed.heavy.calls.search.A.p99_ms",
                "timed.light.calls.count_each_5.B.p50_ms",
                "timed.light.answers_differing.scroll_by_expiry",
            )
        },
    ),
    "index_set": Smoke(
        "index_set.py",
        "--users 2 --per-user 150 --light 20 --queries 3 --open-rounds 1 "
        "--data-dir {tmp}/data --json {tmp}/report.json",
        {
            "report.json": (
                "build.B.indexes",
                "open.0.A.rss_per_memory_kib",
                "open.0.B.after_mib.RssAnon",
                "time.same_count",
                "time.timed.heavy.answers_differing.survey_page",
                "time.timed.heavy.calls.dedup.B.p99_ms",
                "time.timed.light.calls.search.A.p50_ms",
            )
        },
    ),
    "run_mem0 (memoryd side)": Smoke(
        "peers/run_mem0.py",
        "--only memoryd --embedder minilm-onnx --memories 30 --single-adds 10 --batch 10 "
        "--queries 3 --json {tmp}/report.json",
        {"report.json": ("workload.memories", "memoryd.search_p99_ms", "memoryd.bulk_add_per_s")},
    ),
    "run_mem0 (mem0 side)": Smoke(
        "peers/run_mem0.py",
        "--only mem0 --memories 30 --single-adds 10 --batch 10 --queries 3 --json "
        "{tmp}/report.json",
        {"report.json": ("mem0.search_p99_ms", "mem0.bulk_add_per_s")},
        frozenset({"mem0"}),
    ),
}
SCALE_FIELDS = (
    "shape",
    "adapter",
    "memories",
    "count",
    "load_per_s",
    "rss_growth_mib",
    "disk_mib",
    "store_hybrid_p99_ms",
    "tier_search_p99_ms",
    "recall_at_10_min",
    "service_retrieve_p99_ms",
)
# scale_1m.py: each shape, both vector adapters (the qdrant one, local mode, once: it is
# the slow one), sizes overridden; `hash` vectors, so no model runs.
for _adapter, _shape, _users, _per_user in (
    ("edge", "heavy", 2, 40),
    ("edge", "many", 12, 4),
    ("qdrant", "heavy", 2, 15),
):
    SMOKES[f"scale_1m {_adapter} {_shape}"] = Smoke(
        "scale_1m.py",
        f"--adapter {_adapter} --shape {_shape} --users {_users} --per-user {_per_user} "
        "--corpus-vectors hash --search-users 2 --queries 2 --service-users 1 "
        "--service-queries 2 --json {tmp}/report.json",
        {"report.json": SCALE_FIELDS},
    )
# A chunk of a fill done in several processes: users 1.. into a store holding user 0.
SMOKES["scale_1m edge heavy chunk"] = Smoke(
    "scale_1m.py",
    "--shape heavy --users 2 --per-user 40 --first-user 1 --corpus-vectors hash "
    "--data-dir {tmp}/data --search-users 2 --queries 2 --service-users 0 "
    "--json {tmp}/report.json",
    {"report.json": ("loaded", "count", "open_s", "rss_after_open_mib", "tier_search_p99_ms")},
)
SMOKES["startup"] = Smoke(
    "startup.py",
    "--data-dir {tmp}/data --runs 1 --settle 5 --retrieves 2 --warmup 1 --json {tmp}/report.json",
    {
        "report.json": (
            "serving_median_s",
            "disk_mib",
            "runs.0.first_answer_s",
            "runs.0.serving_s",
            "runs.0.rss_at_serving_mib.VmRSS",
            "runs.0.busy_after_serving_s",
            "runs.0.retrieve_p99_ms",
            "runs.0.rss_after_retrieves_mib.RssAnon",
        )
    },
)

# The same users and questions in the shared store and each user alone, alternating.
SMOKES["scale_1m paired with alone"] = Smoke(
    "scale_1m.py",
    "--shape many --users 6 --per-user 5 --corpus-vectors hash --search-users 2 --queries 2 "
    "--service-users 1 --pair-with-alone 1 --data-dir {tmp}/data --json {tmp}/report.json",
    {
        "report.json": (
            "same_memories_alone",
            "rounds.0.shared.service_retrieve_p99_ms",
            "rounds.0.alone.service_retrieve_p99_ms",
            "rounds.0.ratio.service_retrieve_p99",
            "rounds.0.ratio.tier_search_p99",
            "pooled.ratio.service_retrieve_p50",
        ),
        "report-r1-alone.json": ("digests", "samples.service_retrieve_ms"),
    },
)

# Files no smoke run names: what runs them, or why they need none.
EXERCISED_ELSEWHERE = {
    "ghz_report.py": "a module of load.py (its fields: tests/unit/test_ghz_report.py)",
    "scale_kit.py": "a module of scale_1m.py and run_mem0.py (tests/unit/test_scale_kit.py)",
    "driver/main.go": "built and run by the smoke run `load --driver go`",
    "framing/bench.go": "run by framing_overhead.py when Go is installed",
    "framing/bench.mjs": "run by framing_overhead.py when the TypeScript client is built",
    "peers/mem0_workload.py": "run by the smoke run `run_mem0 (mem0 side)`",
    "peers/setup_mem0.sh": "installs mem0 from the package index (its syntax is checked)",
}
# What a script may need that this machine may lack: why its smoke run is skipped.
_MISSING = {
    "go": load.go_missing(),
    "mem0": None
    if (BENCH / "peers/.venv-mem0/bin/python").exists()
    else "mem0's virtual environment is not set up (bash benchmarks/peers/setup_mem0.sh)",
}


def _field(report: Any, dotted: str) -> Any:
    """`report["a"]["b"][0]` for "a.b.0" (a key may hold dots: it is tried whole first)."""
    if isinstance(report, dict) and dotted in report:
        return report[dotted]
    head, _, rest = dotted.partition(".")
    value = report[int(head)] if isinstance(report, list) else report[head]
    return _field(value, rest) if rest else value


def _env() -> dict[str, str]:
    paths = [".", "service", "clients/python", "benchmarks", "evals"]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in paths)}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Two `memoryd serve` processes of this tree, the first on a real Redis."""
    directory = tmp_path_factory.mktemp("bench-servers")
    redis = RedisServer(directory / "redis")
    env = {"MEMORYD_REDIS_URL": redis.url, "MEMORYD_REDIS_CLUSTER": "false"}
    try:
        with (
            load.server_process(env, directory / "a") as (a, pid),
            load.server_process({}, directory / "b") as (b, pid_b),
        ):
            yield {
                "a": a,
                "b": b,
                "pid": str(pid),
                "pid_b": str(pid_b),
                "redis_port": str(redis.port),
            }
    finally:
        redis.stop()


@pytest.mark.parametrize("name", sorted(SMOKES))
def test_the_benchmark_runs_with_tiny_sizes_and_reports_its_fields(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    smoke = SMOKES[name]
    for need in smoke.needs & _MISSING.keys():
        if _MISSING[need]:
            pytest.skip(f"{need}: {_MISSING[need]}")
    values = {"tmp": str(tmp_path)}
    if "servers" in smoke.needs:
        values |= request.getfixturevalue("servers")
    args = [arg.format(**values) for arg in smoke.args.split()]

    done = subprocess.run(
        [sys.executable, str(BENCH / smoke.script), *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for path, fields in smoke.reports.items():
        report = json.loads((tmp_path / path).read_text(encoding="utf-8"))
        for dotted in fields:
            try:
                _field(report, dotted)
            except (KeyError, IndexError, TypeError):
                pytest.fail(f"{path} has no {dotted}: {json.dumps(report)[:2000]}")


def test_every_benchmark_file_is_run_by_a_smoke_run() -> None:
    files = {
        str(path.relative_to(BENCH))
        for suffix in ("py", "go", "mjs", "sh")
        for path in BENCH.rglob(f"*.{suffix}")
        if not any(part.startswith(".") for part in path.relative_to(BENCH).parts)
    }
    smoked = {smoke.script for smoke in SMOKES.values()}

    assert files - smoked - EXERCISED_ELSEWHERE.keys() == set()
    assert (smoked | EXERCISED_ELSEWHERE.keys()) - files == set()  # nothing stale


def test_the_mem0_setup_script_parses() -> None:
    subprocess.run(["bash", "-n", str(BENCH / "peers/setup_mem0.sh")], check=True)
