"""Embeddings: the ``Embedder`` port and its adapters (local MiniLM, OpenAI-compatible
API) plus a caching decorator.

Adapters are imported lazily (PEP 562) so that importing the port does not pull in
torch, openai or redis.
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from memoryd.stores.embeddings.port import Embedder, EmbedderUnavailable

if TYPE_CHECKING:
    from memoryd.stores.embeddings.cache import CachedEmbedder, CacheStats
    from memoryd.stores.embeddings.minilm import MiniLMEmbedder
    from memoryd.stores.embeddings.openai_embedder import OpenAIEmbedder

__all__ = [
    "CacheStats",
    "CachedEmbedder",
    "Embedder",
    "EmbedderUnavailable",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
]

# Read-only: which module defines each lazily exported name.
_LAZY = MappingProxyType(
    {
        "CachedEmbedder": "memoryd.stores.embeddings.cache",
        "CacheStats": "memoryd.stores.embeddings.cache",
        "MiniLMEmbedder": "memoryd.stores.embeddings.minilm",
        "OpenAIEmbedder": "memoryd.stores.embeddings.openai_embedder",
    }
)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
