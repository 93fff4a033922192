"""Maximal marginal relevance: picking ranked candidates so that near-repeats sink.

Pure computation over the few candidates a query ranks, with numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from memoryd.stores.vectors.port import DenseVector


@dataclass
class Candidate:
    """A memory to pick: its ranking score, its dense vector and whether it is a turn of a
    conversation (payload.is_turn)."""

    id: str
    score: float
    vector: DenseVector | None
    said: bool = False


def diversify(
    candidates: Sequence[Candidate], top_k: int, penalty: float
) -> list[tuple[int, float]]:
    """Repeatedly take the candidate whose score, minus `penalty` times its similarity to
    the closest memory already taken, is highest. Near-repeats of a taken memory sink below
    memories that add something new, so a small top_k (and the token budget) is not spent
    on one fact said several ways. Returns the index of each candidate taken, in order, with
    what its likeness to the earlier picks took off its score; with penalty 0 (or no
    vectors) the order is by score."""
    if penalty <= 0 or len(candidates) <= 1 or any(c.vector is None for c in candidates):
        return [(i, 0.0) for i in range(min(top_k, len(candidates)))]
    # For each candidate its similarity to the closest memory taken so far: a running
    # maximum, updated with the similarities to each new pick (one row per pick).
    matrix = np.stack([c.vector for c in candidates]).astype(np.float64)  # type: ignore[misc]
    scores = np.asarray([c.score for c in candidates], dtype=np.float64)
    closest = np.zeros(len(candidates), dtype=np.float64)  # nothing taken: no redundancy
    open_ = np.ones(len(candidates), dtype=bool)
    said = np.asarray([c.said for c in candidates], dtype=bool)
    taken: list[tuple[int, float]] = []
    while len(taken) < min(top_k, len(candidates)):
        # The first best on ties, as max() over the candidates in order would take.
        best = int(np.argmax(np.where(open_, scores - penalty * closest, -np.inf)))
        taken.append((best, float(penalty * closest[best])))
        row = dots(matrix, matrix[best])
        if candidates[best].said:
            # Turns of a conversation are not repeats of each other: each was said once, and
            # a question often needs several turns on one topic (ADR 0400).
            row[said] = 0.0
        closest = row if len(taken) == 1 else np.maximum(closest, row)
        open_[best] = False
    return taken


def dots(matrix: npt.NDArray[Any], vector: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Each row of `matrix` dotted with `vector`, in numpy's own loop: a matrix product
    this small would go to the BLAS, whose worker threads spin on every call (measured:
    +10 ms CPU per query on 2 cores) for a few microseconds of arithmetic."""
    product: npt.NDArray[Any] = np.einsum("ij,j->i", matrix, vector)
    return product
