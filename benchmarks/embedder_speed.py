"""The local embedders' own speed, per runtime and thread count, in one process.

    PYTHONPATH=service .venv/bin/python benchmarks/embedder_speed.py --threads 1,2

For each runtime (torch, ONNX float, ONNX static int8 ``onnx-int8s``, ONNX dynamic int8
``onnx-int8``; the other model, ``mpnet-onnx`` and ``mpnet`` on torch: ``--runtimes
onnx-int8s,mpnet-onnx,mpnet``) and intra-op thread count: texts per second when embedding
64 texts per call (as the batcher sends them) and one text per call, and the latency of
one short query alone (p50/p99). Rounds interleave the configurations, so a change in the
machine's load hits all of them alike; the load average is printed with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from load import fact, question
from memoryd.stores.embeddings import (
    MiniLMEmbedder,
    MiniLMOnnxEmbedder,
    MPNetEmbedder,
    MPNetOnnxEmbedder,
)
from memoryd.stores.embeddings.port import Embedder

TORCH = ("torch", "mpnet")


def make(runtime: str, threads: int) -> Embedder:
    if runtime == "torch":
        return MiniLMEmbedder(threads=threads)
    if runtime == "mpnet":
        return MPNetEmbedder(threads=threads)
    if runtime == "mpnet-onnx":
        return MPNetOnnxEmbedder(threads)
    if runtime == "onnx-float":
        return MiniLMOnnxEmbedder(threads, quantized=False)
    return MiniLMOnnxEmbedder(
        threads, quantization="static" if runtime == "onnx-int8s" else "dynamic"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--runtimes", default="onnx-int8s,onnx-int8,onnx-float,torch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--texts", type=int, default=256, help="texts per round")
    parser.add_argument("--queries", type=int, default=30, help="single queries per round")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    texts = [fact(50_000_000 + i) for i in range(args.texts)]
    alone_texts = texts[: max(1, len(texts) // 2)]
    configs = [
        (runtime, int(t))
        for runtime in args.runtimes.split(",")
        for t in args.threads.split(",")
        # torch's thread count is process-wide: one torch configuration per process.
        if runtime not in TORCH or t == args.threads.split(",")[0]
    ]
    embedders = {c: make(*c) for c in configs}
    for embedder in embedders.values():
        embedder.warm()
    rates: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
    alone: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
    singles: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
    print(f"load average before: {os.getloadavg()}")
    for r in range(args.rounds):
        for config, embedder in embedders.items():
            started = time.perf_counter()
            for i in range(0, len(texts), 64):
                embedder.embed(texts[i : i + 64])
            rates[config].append(len(texts) / (time.perf_counter() - started))
            started = time.perf_counter()
            for text in alone_texts:
                embedder.embed([text])
            alone[config].append(len(alone_texts) / (time.perf_counter() - started))
            for q in range(args.queries):
                t0 = time.perf_counter()
                embedder.embed([question(f"speed-{r}-{q}")])
                singles[config].append((time.perf_counter() - t0) * 1000)
    print(f"load average after:  {os.getloadavg()}")
    print(
        f"{'runtime':12s} {'threads':>7s} {'texts/s (median)':>17s} {'best':>7s} "
        f"{'alone texts/s':>14s} {'one p50 ms':>11s} {'one p99 ms':>11s}"
    )
    rows: list[dict[str, Any]] = []
    for config in configs:
        ordered = sorted(singles[config])
        rows.append(
            {
                "runtime": config[0],
                "threads": config[1],
                "batched_texts_per_s": statistics.median(rates[config]),
                "batched_best_texts_per_s": max(rates[config]),
                "alone_texts_per_s": statistics.median(alone[config]),
                "one_p50_ms": ordered[len(ordered) // 2],
                "one_p99_ms": ordered[int(len(ordered) * 0.99)],
            }
        )
        print(
            f"{config[0]:12s} {config[1]:7d} {statistics.median(rates[config]):17.1f} "
            f"{max(rates[config]):7.1f} {statistics.median(alone[config]):14.1f} "
            f"{ordered[len(ordered) // 2]:11.2f} "
            f"{ordered[int(len(ordered) * 0.99)]:11.2f}"
        )

    if args.json:
        args.json.write_text(json.dumps({"rounds": args.rounds, "configs": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
