"""Helpers of the scale and peer benchmarks (numpy only; unit-tested in
tests/unit/test_scale_kit.py): exact search, recall@k, percentiles, the evals corpus, and
the synthetic memory vectors and texts built from real sentences.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]

# Memory ids are derived, so a benchmark can map store hits back to rows without a table.
_ID_NAMESPACE = uuid.UUID("5f1d3b1e-8c1a-4f57-9a38-3d2b6c0f4e21")


def memory_id(user: int, row: int) -> str:
    """The point id of row `row` of user `user` (a stable UUID)."""
    return str(uuid.uuid5(_ID_NAMESPACE, f"{user}:{row}"))


def normalise(vectors: npt.ArrayLike) -> Matrix:
    """Rows scaled to unit length (cosine collections store them so); zero rows stay 0."""
    m = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    out: Matrix = np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)
    return out


def exact_top_k(corpus: Matrix, query: Sequence[float] | Matrix, k: int) -> list[int]:
    """Rows of `corpus` with the `k` highest cosine similarities to `query`, best first
    (ties: lower row first). Brute force: the ground truth for recall."""
    if k < 1:
        raise ValueError("k must be >= 1")
    scores = normalise(corpus) @ normalise(np.asarray(query, dtype=np.float32))
    k = min(k, len(scores))
    # Stable sort on the negated scores keeps ties in row order.
    return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]


def recall_at_k(found: Iterable[str], exact: Sequence[str], k: int) -> float:
    """Share of the exact top `k` found among the first `k` hits (1.0 when the exact list
    is empty: there was nothing to find)."""
    if k < 1:
        raise ValueError("k must be >= 1")
    truth = set(exact[:k])
    if not truth:
        return 1.0
    hits = set(list(found)[:k])
    return len(hits & truth) / len(truth)


def percentile(samples: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (`p` in 0..100) of a non-empty sample."""
    if not samples:
        raise ValueError("no samples")
    if not 0 <= p <= 100:
        raise ValueError("p must be within 0..100")
    ordered = sorted(samples)
    rank = max(1, int(np.ceil(p / 100 * len(ordered))))
    return ordered[rank - 1]


def synthetic_memories(
    base: Matrix,
    count: int,
    seed: int,
    *,
    mix: tuple[float, float] = (0.2, 0.6),
    noise: float = 0.015,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], Matrix]:
    """`count` memory vectors made from real sentence embeddings `base` (unit rows):
    memory i is ``normalise(base[a_i] + w_i * base[b_i] + N(0, noise^2))`` with a, b drawn
    uniformly and w uniform in `mix`, so memories cluster the way the sentences do but no
    two coincide. Returns (a, b, vectors); deterministic for a seed. The text of memory i
    is meant to be sentence a_i followed by sentence b_i."""
    rng = np.random.default_rng(seed)
    n = len(base)
    a = rng.integers(0, n, size=count)
    b = rng.integers(0, n, size=count)
    w = rng.uniform(mix[0], mix[1], size=(count, 1)).astype(np.float32)
    jitter = rng.normal(0.0, noise, size=(count, base.shape[1])).astype(np.float32)
    return a, b, normalise(base[a] + w * base[b] + jitter)


def eval_corpus(root: Path) -> tuple[list[str], list[str]]:
    """Distinct real sentences (conversation turns of evals/longconv, each turn's sentences
    of over 20 characters, golden-set memories) and distinct real questions (longconv
    questions, golden-set queries), in file order."""
    texts: list[str] = []
    questions: list[str] = []
    for path in sorted((root / "evals/longconv/data").glob("conv-*.json")):
        conv = json.loads(path.read_text(encoding="utf-8"))
        for session in conv["sessions"]:
            for turn in session["turns"]:
                texts.append(turn["text"])
                texts += [s for s in re.split(r"(?<=[.!?])\s+", turn["text"]) if len(s) > 20]
        questions += [q["q"] for q in conv["questions"]]
    for line in (root / "evals/golden.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row.get("type") == "memory":
            texts.append(row["content"])
        elif row.get("type") == "case":
            questions.append(row["query"])
    return list(dict.fromkeys(texts)), list(dict.fromkeys(questions))


def memory_texts(sentences: Sequence[str], count: int, seed: int) -> list[str]:
    """`count` distinct memory texts, each two random sentences joined (deterministic)."""
    if count > len(sentences) * (len(sentences) - 1):
        raise ValueError("not enough sentences for that many distinct texts")
    rng = np.random.default_rng(seed)
    seen: dict[str, None] = {}
    while len(seen) < count:
        a, b = rng.integers(0, len(sentences), size=2)
        if a != b:
            seen.setdefault(f"{sentences[a]} {sentences[b]}", None)
    return list(seen)


class HashVectors:
    """Stands in for an embedder: hashed unit vectors of its name and dimension, so a
    benchmark writes many memories without running a model (deterministic per text)."""

    def __init__(self, name: str, dim: int) -> None:
        self.name = name
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
            out.append(normalise(np.random.default_rng(seed).standard_normal(self.dim)).tolist())
        return out

    def warm(self) -> None:
        return None
