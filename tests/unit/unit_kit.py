"""The fast layer's kit: a deterministic embedder, the only fake embedder of the suite.

`HashEmbedder` maps each word to a fixed direction, so texts sharing words are similar and
results are deterministic. `GatedEmbedder` is the same with a gate that holds a model call
open, for tests of what happens while the model is busy. The integration suites keep the
real MiniLM model.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from memoryd.stores.embeddings.port import EmbedderUnavailable

if TYPE_CHECKING:
    from memoryd.core.memory.embedding_batcher import EmbeddingBatcher

DIM = 64
# Liveness only (a broken batcher must fail, not hang the suite); never a latency check.
LIVENESS_S = 30
T = TypeVar("T")

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


class GatedEmbedder(HashEmbedder):
    """Records each call's texts; while closed, a call blocks after it has started."""

    def __init__(self, reject: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.called = threading.Condition()
        self.gate = threading.Event()
        self.gate.set()
        self.reject = reject

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        with self.called:
            self.calls.append(list(texts))
            self.called.notify_all()
        self.gate.wait()
        if self.reject is not None and self.reject in texts:
            raise EmbedderUnavailable("input rejected", embedder=self.name, status_code=400)
        return super().embed(texts)

    async def hold_first_call(self, batcher: EmbeddingBatcher) -> asyncio.Task[list[list[float]]]:
        """Close the gate and start a call that stays in the model until `release`."""
        return await self.hold(lambda: batcher.embed(["first"]))

    async def hold(self, start: Callable[[], Awaitable[T]]) -> asyncio.Task[T]:
        """Close the gate, run `start` until its model call has begun, and return its task:
        the model stays busy until `release`."""
        self.gate.clear()
        begun = len(self.calls) + 1
        task = asyncio.ensure_future(start())
        await asyncio.to_thread(self._wait_calls, begun)
        return task

    def release(self) -> None:
        self.gate.set()

    async def until_calls(self, count: int) -> None:
        """Wait until the model has been called `count` times (for liveness only)."""
        assert await asyncio.to_thread(self._wait_calls, count), f"fewer than {count} calls"

    def _wait_calls(self, count: int) -> bool:
        with self.called:
            return self.called.wait_for(lambda: len(self.calls) >= count, LIVENESS_S)

    @property
    def texts_embedded(self) -> list[str]:
        return [t for call in self.calls for t in call]
