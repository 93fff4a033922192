"""Embeddings from the OpenAI API or any OpenAI-compatible server (``POST /embeddings``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import openai

from memoryd.stores.embeddings._vectors import l2_normalise
from memoryd.stores.embeddings.port import EmbedderUnavailable

__all__ = ["OpenAIEmbedder"]

# Native sizes of OpenAI's embedding models, so ``dim`` is known before ``warm()``.
_KNOWN_DIMS: Mapping[str, int] = MappingProxyType(
    {
        "text-embedding-3-small": 1536,
        "text-embedding-3-large": 3072,
        "text-embedding-ada-002": 1536,
    }
)
# Compatible servers without authentication still get a well-formed header.
_PLACEHOLDER_KEY = "no-key"
_MAX_ERROR_CHARS = 300


class OpenAIEmbedder:
    """Synchronous client for ``/embeddings``; vectors are L2-normalised and in input order.

    ``dimensions`` is sent only when set (text-embedding-3 models shorten their vectors).
    ``dim`` comes from ``dimensions``, the known OpenAI models, or the first answer
    (``warm()``). Every provider failure raises ``EmbedderUnavailable``; the ``openai``
    client retries connection errors, 408/409/429 and 5xx ``max_retries`` times first.
    """

    def __init__(
        self,
        api_key: str | None,
        model: str = "text-embedding-3-small",
        base_url: str | None = None,
        dimensions: int | None = None,
        timeout_s: float = 10.0,
        max_retries: int = 2,
        batch_size: int = 256,
    ) -> None:
        if not model:
            raise ValueError("model must not be empty")
        if dimensions is not None and dimensions < 1:
            raise ValueError("dimensions must be >= 1")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        # The API accepts at most 2048 inputs per request.
        if not 1 <= batch_size <= 2048:
            raise ValueError("batch_size must be between 1 and 2048")
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if base_url is None:
                raise ValueError("the OpenAI embedder needs an api_key (or OPENAI_API_KEY)")
            key = _PLACEHOLDER_KEY
        self._model = model
        self._dimensions = dimensions
        self._timeout_s = timeout_s
        self._batch_size = batch_size
        self._name = f"openai:{model}" if dimensions is None else f"openai:{model}@{dimensions}"
        self._dim: int | None = dimensions if dimensions is not None else _KNOWN_DIMS.get(model)
        self._dim_lock = threading.Lock()
        # The sync client (an httpx connection pool) is documented as thread-safe.
        self._client = openai.OpenAI(
            api_key=key, base_url=base_url, timeout=timeout_s, max_retries=max_retries
        )

    @property
    def name(self) -> str:
        """``openai:<model>``, plus ``@<dimensions>`` when shortened: another vector space."""
        return self._name

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise RuntimeError(f"{self._name}: dimension unknown until warm() or embed()")
        return self._dim

    def warm(self) -> None:
        self.embed(["warm-up"])

    def close(self) -> None:
        self._client.close()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            vectors.extend(self._embed_batch(texts[start : start + self._batch_size]))
        return vectors

    def _embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        # The API rejects empty strings; a single space carries the same (lack of) meaning.
        inputs = [text if text else " " for text in texts]
        url = str(self._client.base_url)
        try:
            response = self._client.embeddings.create(
                input=inputs,
                model=self._model,
                # Floats, not the client's base64 default: not every compatible server has it.
                encoding_format="float",
                dimensions=self._dimensions if self._dimensions is not None else openai.omit,
            )
        except openai.APITimeoutError as exc:
            raise self._unavailable(
                f"embeddings request to {url} timed out after {self._timeout_s:g} s"
            ) from exc
        except openai.APIConnectionError as exc:
            raise self._unavailable(f"cannot reach {url}: {exc}") from exc
        except openai.APIStatusError as exc:
            raise self._unavailable(
                f"{url} answered HTTP {exc.status_code}: {exc.message[:_MAX_ERROR_CHARS]}",
                status_code=exc.status_code,
            ) from exc
        except openai.OpenAIError as exc:
            raise self._unavailable(f"embeddings request to {url} failed: {exc}") from exc

        data = sorted(response.data, key=lambda item: item.index)
        if [item.index for item in data] != list(range(len(inputs))):
            raise self._unavailable(
                f"{url} answered {len(data)} embeddings for {len(inputs)} inputs "
                "(or with wrong indices)"
            )
        try:
            vectors = [l2_normalise(item.embedding) for item in data]
        except (TypeError, ValueError) as exc:
            raise self._unavailable(f"{url} answered malformed embeddings: {exc}") from exc
        self._check_dim(vectors, url)
        return vectors

    def _check_dim(self, vectors: list[list[float]], url: str) -> None:
        lengths = {len(vector) for vector in vectors}
        if len(lengths) != 1:
            raise self._unavailable(f"{url} answered vectors of mixed lengths {sorted(lengths)}")
        (length,) = lengths
        with self._dim_lock:
            if self._dim is None and length > 0:
                self._dim = length
        if length != self._dim:
            raise self._unavailable(
                f"{url} answered {length}-dimensional vectors, expected {self._dim}"
            )

    def _unavailable(self, message: str, *, status_code: int | None = None) -> EmbedderUnavailable:
        return EmbedderUnavailable(
            f"{self._name}: {message}", embedder=self._name, status_code=status_code
        )
