"""Embeddings: the ``Embedder`` port and its adapters (local MiniLM on ONNX Runtime or on
torch, local MPNet on either, OpenAI-compatible API) plus a caching decorator.

`ADAPTERS` names every adapter; the settings choose one (`embedder.provider`). Adapters
are imported lazily (in the factories, and PEP 562 for the names below) so that importing
the port does not pull in torch, openai or redis. A new adapter is its module plus one
line in `ADAPTERS` (and its name in `EmbedderSettings.provider`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias

from memoryd.stores.embeddings.port import Embedder, EmbedderUnavailable

if TYPE_CHECKING:
    from memoryd.settings import Settings
    from memoryd.stores.embeddings.cache import CachedEmbedder
    from memoryd.stores.embeddings.minilm import MiniLMEmbedder
    from memoryd.stores.embeddings.minilm_onnx import MiniLMOnnxEmbedder
    from memoryd.stores.embeddings.mpnet import MPNetEmbedder, MPNetOnnxEmbedder
    from memoryd.stores.embeddings.openai_embedder import OpenAIEmbedder
    from memoryd.stores.embeddings.port import CacheStats

__all__ = [
    "ADAPTERS",
    "CacheStats",
    "CachedEmbedder",
    "Embedder",
    "EmbedderUnavailable",
    "MPNetEmbedder",
    "MPNetOnnxEmbedder",
    "MiniLMEmbedder",
    "MiniLMOnnxEmbedder",
    "OpenAIEmbedder",
    "adapter_name",
    "for_preparing",
]

# The uncached embedder; the composition root wraps it in `CachedEmbedder`.
EmbedderFactory: TypeAlias = "Callable[[Settings], Embedder]"


def _minilm_onnx(settings: Settings) -> Embedder:
    from memoryd.stores.embeddings.minilm_onnx import MiniLMOnnxEmbedder, default_cache_dir

    cfg = settings.embedder
    # Under the data directory by default: the one place a deployment keeps writable
    # (the image's root filesystem is read-only and its user has no home).
    cache_dir = cfg.model_cache_dir or settings.data_dir / "models"
    # A graph `memoryd prepare-embedder` left in the user's cache serves every data
    # directory of that user (tests, evals, local runs) without deriving it again.
    shared = () if cfg.model_cache_dir else (default_cache_dir(),)
    return MiniLMOnnxEmbedder(
        cfg.threads,
        quantized=cfg.onnx_quantized,
        quantization=cfg.onnx_quantization,
        cache_dir=cache_dir,
        shared_cache_dirs=shared,
    )


def for_preparing(settings: Settings) -> Settings:
    """The settings `memoryd prepare-embedder` builds the embedder with: the ONNX graph is
    derived into the user's cache, the shared place `_minilm_onnx` looks in, unless a
    cache directory is set (then the only place looked in)."""
    cfg = settings.embedder
    if cfg.provider != "minilm-onnx" or cfg.model_cache_dir is not None:
        return settings
    from memoryd.stores.embeddings.minilm_onnx import default_cache_dir

    embedder = cfg.model_copy(update={"model_cache_dir": default_cache_dir()})
    return settings.model_copy(update={"embedder": embedder})


def _minilm(settings: Settings) -> Embedder:
    from memoryd.stores.embeddings.minilm import MiniLMEmbedder

    return MiniLMEmbedder(threads=settings.embedder.threads)


def _mpnet(settings: Settings) -> Embedder:
    from memoryd.stores.embeddings.mpnet import MPNetEmbedder

    cfg = settings.embedder
    # The user's cache by default, as `memoryd prepare-embedder` fills it: the weights are
    # the same for every data directory.
    return MPNetEmbedder(threads=cfg.threads, cache_dir=cfg.model_cache_dir)


def _mpnet_onnx(settings: Settings) -> Embedder:
    from memoryd.stores.embeddings.mpnet import MPNetOnnxEmbedder

    cfg = settings.embedder
    return MPNetOnnxEmbedder(cfg.threads, cache_dir=cfg.model_cache_dir)


def _openai(settings: Settings) -> Embedder:
    from memoryd.stores.embeddings.openai_embedder import OpenAIEmbedder

    cfg = settings.embedder
    return OpenAIEmbedder(
        api_key=cfg.openai_api_key,
        model=cfg.openai_model,
        base_url=cfg.openai_base_url,
        dimensions=cfg.openai_dimensions,
        timeout_s=cfg.openai_timeout_seconds,
    )


ADAPTERS: dict[str, EmbedderFactory] = {
    "minilm-onnx": _minilm_onnx,
    "minilm": _minilm,
    "mpnet": _mpnet,
    "mpnet-onnx": _mpnet_onnx,
    "openai": _openai,
}


def adapter_name(settings: Settings) -> str:
    return settings.embedder.provider


# Read-only: which module defines each lazily exported name.
_LAZY = MappingProxyType(
    {
        "CachedEmbedder": "memoryd.stores.embeddings.cache",
        "CacheStats": "memoryd.stores.embeddings.port",
        "MiniLMEmbedder": "memoryd.stores.embeddings.minilm",
        "MiniLMOnnxEmbedder": "memoryd.stores.embeddings.minilm_onnx",
        "MPNetEmbedder": "memoryd.stores.embeddings.mpnet",
        "MPNetOnnxEmbedder": "memoryd.stores.embeddings.mpnet",
        "OpenAIEmbedder": "memoryd.stores.embeddings.openai_embedder",
    }
)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
