"""The embeddings port: text in, L2-normalised dense vectors out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["CacheLookup", "CacheStats", "Embedder", "EmbedderUnavailable", "RuntimeVariant"]


class Embedder(Protocol):
    """Turns texts into dense vectors of one fixed dimension.

    ``embed`` is synchronous and may block for a long time (model inference, HTTP): the
    core calls it from a worker thread, never on the event loop. Implementations must be
    safe to call from several threads at once.
    """

    @property
    def name(self) -> str:
        """Identifies the vector space, e.g. ``"minilm:all-MiniLM-L6-v2"``.

        Vectors from embedders with different names must never be compared; caches key on it.
        """
        ...

    @property
    def dim(self) -> int:
        """Length of every vector returned by ``embed``."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector per text, in input order; ``[]`` for no texts.

        Raises ``EmbedderUnavailable`` when a remote provider cannot answer.
        """
        ...

    def warm(self) -> None:
        """Load the model and run one embedding, so the first request is not slow."""
        ...


@runtime_checkable
class RuntimeVariant(Protocol):
    """An embedder that runs a model of another embedder's space on another runtime."""

    @property
    def variant(self) -> str:
        """E.g. ``"onnx-int8"``: same ``name`` (no reindex), slightly different vectors."""
        ...


@runtime_checkable
class CacheLookup(Protocol):
    """An embedder with an in-process cache that can be read without blocking."""

    def lookup(self, texts: Sequence[str]) -> list[list[float] | None]:
        """The cached vector of each text, or None; in memory only (no I/O, no model), so
        it may be called on the event loop. A hit counts as one, as in ``embed``."""
        ...


class EmbedderUnavailable(Exception):
    """The embedding provider failed (network error, timeout, 5xx, bad answer).

    ``embedder`` is the failing embedder's name; ``status_code`` the HTTP status when the
    provider answered with an error.
    """

    def __init__(self, message: str, *, embedder: str = "", status_code: int | None = None):
        super().__init__(message)
        self.embedder = embedder
        self.status_code = status_code


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counts since creation, per distinct text of each call: ``hits`` (in memory),
    ``redis_hits``, ``misses`` (texts handed to the inner embedder); and the current
    number of in-memory ``entries``."""

    hits: int
    redis_hits: int
    misses: int
    entries: int
