"""Are the ONNX MiniLM runtimes in the torch model's vector space? Measured on the golden set.

    PYTHONPATH=service:evals .venv/bin/python benchmarks/embedder_parity.py \\
        [--reference torch] [--runtimes onnx-int8s,onnx-int8,onnx-float]

Prints the cosine of each runtime's vectors to the reference's (torch's) over every memory
and query of evals/golden.jsonl, and dense-only Recall@5 per user with memories embedded
by one runtime and queries by another: a store written by torch and queried by int8 is the
case of a deployment that switches runtime without reindexing (docs/adr/0300-...).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from harness.dataset import DEFAULT_DATASET, load_dataset
from memoryd.stores.embeddings import MiniLMEmbedder, MiniLMOnnxEmbedder
from memoryd.stores.embeddings.port import Embedder

TOP_K = 5
RUNTIMES = ("torch", "onnx-int8s", "onnx-int8", "onnx-float")


def make(runtime: str) -> Embedder:
    if runtime == "torch":
        return MiniLMEmbedder(threads=1)
    if runtime == "onnx-float":
        return MiniLMOnnxEmbedder(quantized=False)
    return MiniLMOnnxEmbedder(quantization="static" if runtime == "onnx-int8s" else "dynamic")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--reference", default="torch", choices=RUNTIMES)
    parser.add_argument("--runtimes", default="onnx-int8s,onnx-int8,onnx-float")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    reference = args.reference
    names = list(dict.fromkeys([reference, *args.runtimes.split(",")]))
    dataset = load_dataset(DEFAULT_DATASET)
    memories = dataset.memories
    cases = [c for c in dataset.cases if c.relevant]
    runtimes = {name: make(name) for name in names}
    docs = {n: np.asarray(e.embed([m.content for m in memories])) for n, e in runtimes.items()}
    queries = {n: np.asarray(e.embed([c.query for c in cases])) for n, e in runtimes.items()}
    result: dict[str, Any] = {"reference": reference, "memories": len(memories)}
    result["queries"] = len(cases)

    print(f"{len(memories)} memories, {len(cases)} queries with relevant memories")
    result["cosine_to_reference"] = {}
    for name in runtimes:
        cos = np.concatenate(
            [np.sum(docs[name] * docs[reference], 1), np.sum(queries[name] * queries[reference], 1)]
        )
        result["cosine_to_reference"][name] = {
            "mean": float(cos.mean()),
            "min": float(cos.min()),
            "p1": float(np.percentile(cos, 1)),
        }
        print(
            f"cosine to {reference}, {name:10s}: mean {cos.mean():.4f}  min {cos.min():.4f}  "
            f"1st percentile {np.percentile(cos, 1):.4f}"
        )

    def recall(doc_runtime: str, query_runtime: str) -> float:
        found = wanted = 0
        for i, case in enumerate(cases):
            mine = [j for j, m in enumerate(memories) if m.user == case.user]
            scores = docs[doc_runtime][mine] @ queries[query_runtime][i]
            top = {memories[mine[j]].label for j in np.argsort(-scores)[:TOP_K]}
            found += len(top & set(case.relevant))
            wanted += len(case.relevant)
        return found / wanted

    # Each runtime alone, then the stores written by one and queried by another that a
    # switch of runtime without reindexing would give.
    pairs = [(n, n) for n in names] + [
        pair
        for pair in [
            (reference, "onnx-int8s"),
            ("onnx-int8s", reference),
            ("onnx-int8", "onnx-int8s"),
            ("onnx-int8s", "onnx-int8"),
        ]
        if pair[0] != pair[1] and set(pair) <= set(names)
    ]
    print(f"\ndense-only Recall@{TOP_K} (memories embedded by / queries by):")
    result["recall_at_5"] = {}
    for doc_runtime, query_runtime in pairs:
        found = recall(doc_runtime, query_runtime)
        result["recall_at_5"][f"{doc_runtime}/{query_runtime}"] = found
        print(f"  {doc_runtime:10s} / {query_runtime:10s}  {found:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
