"""A turn's own vector: its text embedded without its lead, kept in its payload (ADR 0409).

A turn of a session is embedded after the end of the turn before it (ADR 0400), which a
reply needs and a statement that stands alone is diluted by. Such a turn also keeps the
vector of its own text, which the ranking blends into the cosine it ranks by
(`retrieval.own_weight`). It is not searched, only read with a candidate's payload, so it
lives there: packed as int8 (scaled by its largest value, 384 bytes for MiniLM, base64),
which keeps the collection's vectors as they are (no store written before needs a
rebuild: its turns rank by their lead alone) and the RAM a memory costs unchanged (payloads
stay on disk until read, ADR 0602).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

OWN_FIELD = "own_vec"
_SCALE = 127.0


def pack(vector: Sequence[float]) -> str:
    """`vector` as int8 values scaled by its largest magnitude, base64: a cosine against
    it moves by a few thousandths at most (it is normalised again when read)."""
    values = np.asarray(vector, dtype=np.float32)
    peak = float(np.max(np.abs(values))) if values.size else 0.0
    scaled = values * (_SCALE / peak) if peak > 0 else values
    return base64.b64encode(np.rint(scaled).astype(np.int8).tobytes()).decode("ascii")


def unpack(payload: Mapping[str, Any], dim: int) -> npt.NDArray[np.float32] | None:
    """The unit-length own vector a payload keeps, or None: the point has none (not a turn
    after another, or written before ADR 0409), or it is not of this dimension (written by
    another embedder: `memoryd reindex` computes it again)."""
    packed = payload.get(OWN_FIELD)
    if not isinstance(packed, str):
        return None
    try:
        raw = base64.b64decode(packed, validate=True)
    except ValueError:
        return None
    if len(raw) != dim:
        return None
    values = np.frombuffer(raw, dtype=np.int8).astype(np.float32)
    norm = float(np.linalg.norm(values))
    return values / norm if norm > 0 else None
