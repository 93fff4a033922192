"""Are the ONNX MiniLM runtimes in the torch model's vector space? Measured on the golden set.

    PYTHONPATH=service:evals .venv/bin/python benchmarks/embedder_parity.py

Prints the cosine of each runtime's vectors to torch's over every memory and query of
evals/golden.jsonl, and dense-only Recall@5 per user with memories embedded by one runtime
and queries by another: a store written by torch and queried by int8 is the case of a
deployment that switches runtime without reindexing (docs/adr/0300-...).
"""

from __future__ import annotations

import numpy as np

from harness.dataset import DEFAULT_DATASET, load_dataset
from memoryd.stores.embeddings import MiniLMEmbedder, MiniLMOnnxEmbedder
from memoryd.stores.embeddings.port import Embedder

TOP_K = 5


def main() -> None:
    dataset = load_dataset(DEFAULT_DATASET)
    memories = dataset.memories
    cases = [c for c in dataset.cases if c.relevant]
    runtimes: dict[str, Embedder] = {
        "torch": MiniLMEmbedder(threads=1),
        "onnx-int8s": MiniLMOnnxEmbedder(),
        "onnx-int8": MiniLMOnnxEmbedder(quantization="dynamic"),
        "onnx-float": MiniLMOnnxEmbedder(quantized=False),
    }
    docs = {n: np.asarray(e.embed([m.content for m in memories])) for n, e in runtimes.items()}
    queries = {n: np.asarray(e.embed([c.query for c in cases])) for n, e in runtimes.items()}

    print(f"{len(memories)} memories, {len(cases)} queries with relevant memories")
    for name in runtimes:
        cos = np.concatenate(
            [np.sum(docs[name] * docs["torch"], 1), np.sum(queries[name] * queries["torch"], 1)]
        )
        print(
            f"cosine to torch, {name:10s}: mean {cos.mean():.4f}  min {cos.min():.4f}  "
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

    print(f"\ndense-only Recall@{TOP_K} (memories embedded by / queries by):")
    for doc_runtime, query_runtime in [
        ("torch", "torch"),
        ("onnx-int8s", "onnx-int8s"),
        ("onnx-int8", "onnx-int8"),
        ("onnx-float", "onnx-float"),
        ("torch", "onnx-int8s"),
        ("onnx-int8s", "torch"),
        ("onnx-int8", "onnx-int8s"),
        ("onnx-int8s", "onnx-int8"),
    ]:
        print(
            f"  {doc_runtime:10s} / {query_runtime:10s}  {recall(doc_runtime, query_runtime):.3f}"
        )


if __name__ == "__main__":
    main()
