"""The fast layer's kit: a deterministic embedder, the only fake embedder of the suite.

`HashEmbedder` maps each word to a fixed direction, so texts sharing words are similar and
results are deterministic. The integration suites keep the real MiniLM model.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

DIM = 64

AppFactory = Callable[..., Any]

# Words that stress token counting and escaping: non-Latin scripts, markup, an entity,
# quotes. Random texts in the token budget and render tests are drawn from these and more.
AWKWARD_WORDS = (
    "user",
    "prefers",
    "uv",
    "over",
    "pip",
    "coffee",
    "skiing",
    "Zürich",
    "日本語",
    "meeting",
    "notes",
    "deadline",
    "<tag>",
    "&",
    '"quoted"',
)


class HashEmbedder:
    """Bag of hashed words, L2-normalised: deterministic, instant, no weights."""

    name = "test:hash-words"
    dim = DIM

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            vector = np.zeros(DIM)
            for word in re.findall(r"\w+", text.casefold()):
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                vector[int.from_bytes(digest[:4], "big") % DIM] += 1.0
            norm = float(np.linalg.norm(vector))
            out.append((vector / norm if norm else vector).tolist())
        return out

    def warm(self) -> None:
        return None
