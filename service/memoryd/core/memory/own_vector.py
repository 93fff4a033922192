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
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

OWN_FIELD = "own_vec"
_SCALE = 127.0


def keeps_own(lead: str, own_weight: float) -> bool:
    """Whether a memory embedded after `lead` also keeps its own text's vector: a turn
    after another, while the ranking gives that vector a share (`retrieval.own_weight`)."""
    return bool(lead) and own_weight > 0


def pack(vector: Sequence[float]) -> str:
    """`vector` as int8 values scaled by its largest magnitude, base64: a cosine against
    it moves by a few thousandths at most (it is normalised again when read)."""
    values = np.asarray(vector, dtype=np.float32)
    peak = float(np.max(np.abs(values))) if values.size else 0.0
    scaled = values * (_SCALE / peak) if peak > 0 else values
    return base64.b64encode(np.rint(scaled).astype(np.int8).tobytes()).decode("ascii")


def unpack_all(
    payloads: Sequence[Mapping[str, Any]], dim: int
) -> tuple[list[int], npt.NDArray[np.float32]]:
    """The unit-length own vectors of `payloads` as the rows of one matrix, in one
    conversion, with the index of the payload each row came from. A payload without one
    is skipped: the point has none (not a turn after another, or written before ADR 0409),
    or not of this dimension (written by another embedder: `memoryd reindex` computes it
    again)."""
    kept: list[int] = []
    raws: list[bytes] = []
    for i, payload in enumerate(payloads):
        packed = payload.get(OWN_FIELD)
        if not isinstance(packed, str):
            continue
        try:  # strict: what `b64decode(validate=True)` checks, without its regular expression
            raw = binascii.a2b_base64(packed, strict_mode=True)
        except ValueError:  # binascii.Error is one
            continue
        if len(raw) == dim:
            kept.append(i)
            raws.append(raw)
    values = np.frombuffer(b"".join(raws), dtype=np.int8).astype(np.float32)
    matrix = values.reshape(len(raws), dim)
    norms = np.linalg.norm(matrix, axis=1)
    live = norms > 0
    rows = [i for i, ok in zip(kept, live.tolist(), strict=True) if ok]
    return rows, matrix[live] / norms[live, None]
