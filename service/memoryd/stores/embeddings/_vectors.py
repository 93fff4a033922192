"""Small vector helpers shared by the embedders (pure Python, no numpy needed)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def l2_normalise(vector: Iterable[float]) -> list[float]:
    """``vector / ||vector||``; a zero vector stays zero (it has no direction to keep).

    Raises ``ValueError`` for NaN or infinite components, which would poison every score.
    """
    values = [float(x) for x in vector]
    norm = math.sqrt(math.fsum(x * x for x in values))
    if not math.isfinite(norm):
        raise ValueError("vector has non-finite components")
    if norm == 0.0:
        return values
    return [x / norm for x in values]
