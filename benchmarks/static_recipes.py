"""The static int8 MiniLM's weight formats compared on this machine's CPU (ADR 0301).

    PYTHONPATH=service:evals .venv/bin/python benchmarks/static_recipes.py \\
        [--weights s8,s8-7bit,u8] [--rounds 5] [--graphs DIR] [--texts N] [--json PATH]

For each weight format of `_quantize_static` (``s8``: recipe v2's signed int8; ``s8-7bit``:
the same with ``reduce_range``; ``u8``: uint8 weights, recipe v3, the shipped one, whose
graph is the model cache's), derives the graph and prints, over every memory and query of
evals/golden.jsonl:

- the cosine of its vectors to torch's (``MiniLMEmbedder``), mean / min / 1st percentile;
- the cosine of its vectors to the same graph's run without ONNX Runtime's graph
  optimisations, where each product is a DequantizeLinear and a float MatMul: the exact
  integer products, which is what a VNNI CPU's int8 kernel computes. Far from 1, this
  CPU's int8 kernel does not compute them exactly (AVX2's saturating ``vpmaddubsw``);
- the cosines behind RF-003 scenarios 4 and 5 (tests/service/test_seed_scenarios.py);
- texts per second at one thread, one text per call and 32 per call (rounds interleave
  the formats, so the machine's load hits all alike).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import numpy as np

from harness.dataset import DEFAULT_DATASET, load_dataset
from memoryd.stores.embeddings import MiniLMEmbedder, MiniLMOnnxEmbedder, minilm_onnx

# (query, memory) pairs of the seed scenarios: 5's memory must clear min_score 0.3 (its
# score is the better of the two queries'), 4's "slopes" must rank above "coffee".
PROBES = {
    "s5 query": ("Paris trip planning", "User likes French cuisine"),
    "s5 grounded": ("Paris trip planning. current_destination: Paris", "User likes French cuisine"),
    "s4 skiing": ("skiing preferences", "User enjoys skiing"),
    "s4 slopes": ("skiing preferences", "User avoids advanced slopes"),
    "s4 coffee": ("skiing preferences", "User likes coffee with mountain view"),
}


class _Graph(MiniLMOnnxEmbedder):
    """The embedder on a given graph file, with all or none of the graph optimisations."""

    def __init__(self, graph: Path, optimised: bool) -> None:
        super().__init__(1)
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if not optimised:
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        self._session = onnxruntime.InferenceSession(
            str(graph), options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = minilm_onnx._load_tokenizer()


def dot(pair: list[list[float]]) -> float:
    return float(np.dot(pair[0], pair[1]))


def cosines(a: Any, b: Any) -> Any:
    return np.sum(np.asarray(a) * np.asarray(b), axis=1)


def summary(cos: Any) -> dict[str, float]:
    return {
        "mean": float(cos.mean()),
        "min": float(cos.min()),
        "p1": float(np.percentile(cos, 1)),
    }


def spread(cos: Any) -> str:
    return f"{cos.mean():.4f} / {cos.min():.4f} / {np.percentile(cos, 1):.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--weights", default="s8,s8-7bit,u8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--graphs", type=Path, help="keep the derived graphs here")
    parser.add_argument("--texts", type=int, help="only the first N golden-set texts")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    dataset = load_dataset(DEFAULT_DATASET)
    texts = [m.content for m in dataset.memories] + [c.query for c in dataset.cases if c.relevant]
    texts = texts[: args.texts]
    result: dict[str, Any] = {"texts": len(texts), "formats": {}}
    torch = MiniLMEmbedder(threads=1)
    reference = torch.embed(texts)
    pairs = {name: torch.embed(list(pair)) for name, pair in PROBES.items()}
    probes = {"torch": {name: dot(v) for name, v in pairs.items()}}
    print(f"{len(texts)} golden-set texts; cosine mean / min / 1st percentile")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.graphs or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        fast: dict[str, _Graph] = {}
        for weights in args.weights.split(","):
            graph = folder / f"minilm-static-{weights}.onnx"
            if weights == minilm_onnx.SHIPPED_WEIGHTS and not graph.is_file():
                # The graph the server uses, derived once into the model cache.
                graph = minilm_onnx.prepare_quantized(quantization="static")
            if not graph.is_file():
                started = time.perf_counter()
                with tempfile.TemporaryDirectory(dir=folder) as work:
                    minilm_onnx._quantize_static(
                        minilm_onnx.verified_source(),
                        Path(work),
                        graph,
                        cast(minilm_onnx.StaticWeights, weights),
                    )
                print(f"{weights}: derived in {time.perf_counter() - started:.0f} s")
            fast[weights] = _Graph(graph, optimised=True)
            exact = _Graph(graph, optimised=False)
            vectors = fast[weights].embed(texts)
            to_torch, exact_vectors = cosines(vectors, reference), exact.embed(texts)
            result["formats"][weights] = {
                "cosine_to_torch": summary(to_torch),
                "exact_products_to_torch": summary(cosines(exact_vectors, reference)),
                "kernel_to_exact_products": summary(cosines(vectors, exact_vectors)),
            }
            print(
                f"{weights:8s} to torch {spread(to_torch)}   "
                f"exact products to torch {spread(cosines(exact_vectors, reference))}   "
                f"this CPU's kernel to the exact products "
                f"{spread(cosines(vectors, exact_vectors))}"
            )
            probes[weights] = {
                name: dot(fast[weights].embed(list(pair))) for name, pair in PROBES.items()
            }
        print("\nseed-scenario cosines (query ~ memory):")
        print(f"{'':14s}" + "".join(f"{name:>10s}" for name in probes))
        for name in PROBES:
            print(f"{name:14s}" + "".join(f"{p[name]:10.4f}" for p in probes.values()))

        rates: dict[str, dict[str, list[float]]] = {w: {"1": [], "32": []} for w in fast}
        print(f"\nload average before: {os.getloadavg()}")
        for _ in range(args.rounds):
            for weights, embedder in fast.items():
                started = time.perf_counter()
                for text in texts[:64]:
                    embedder.embed([text])
                rates[weights]["1"].append(64 / (time.perf_counter() - started))
                started = time.perf_counter()
                for i in range(0, len(texts), 32):
                    embedder.embed(texts[i : i + 32])
                rates[weights]["32"].append(len(texts) / (time.perf_counter() - started))
        print(f"load average after:  {os.getloadavg()}")
        print("texts/s at 1 thread, median of rounds: one per call, 32 per call")
        for weights, rate in rates.items():
            one, batch = statistics.median(rate["1"]), statistics.median(rate["32"])
            print(f"{weights:8s} {one:7.1f} {batch:7.1f}")
            result["formats"][weights] |= {"texts_per_s_1": one, "texts_per_s_32": batch}
    result["probes"] = probes
    result["load_average"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
