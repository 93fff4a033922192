"""Adapter registries: each store port names its adapters in one place, the settings pick
one by name, and nothing heavy is imported until an adapter is opened."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest

from memoryd.settings import EmbedderSettings, Settings, VectorSettings
from memoryd.stores import embeddings, hot, locks, queue, ratelimit, usage, vectors
from memoryd.stores.hot.memory_store import InProcessHotStore
from memoryd.stores.queue.file_queue import FileQueue

SERVICE = Path(vectors.__file__).resolve().parents[3]


def test_every_vector_backend_the_settings_accept_has_an_adapter() -> None:
    accepted = get_args(VectorSettings.model_fields["backend"].annotation)
    assert sorted(accepted) == sorted(vectors.ADAPTERS)


def test_every_embedder_provider_the_settings_accept_has_an_adapter() -> None:
    accepted = get_args(EmbedderSettings.model_fields["provider"].annotation)
    assert sorted(accepted) == sorted(embeddings.ADAPTERS)


@pytest.mark.parametrize(
    ("overrides", "hot_name", "queue_name", "vector_name", "embedder_name"),
    [
        ({}, "in_process", "file", "edge", "minilm-onnx"),
        (
            {
                "redis_url": "redis://127.0.0.1:1/0",
                "vectors": {"backend": "qdrant"},
                "embedder": {"provider": "openai"},
            },
            "redis",
            "redis",
            "qdrant",
            "openai",
        ),
        (
            {"redis_url": "redis://127.0.0.1:1", "redis_cluster": True},
            "redis_cluster",
            "redis_cluster",
            "edge",
            "minilm-onnx",
        ),
    ],
)
def test_the_settings_choose_the_adapters(
    overrides: dict[str, Any], hot_name: str, queue_name: str, vector_name: str, embedder_name: str
) -> None:
    settings = Settings.explicit(**overrides)

    assert hot.adapter_name(settings) == hot_name
    assert queue.adapter_name(settings) == queue_name
    # Rate-limit buckets live where the hot tiers do.
    assert ratelimit.adapter_name(settings) == hot_name
    assert hot_name in ratelimit.ADAPTERS
    # So do the usage counters and the user locks: every replica shares them.
    assert usage.adapter_name(settings) == locks.adapter_name(settings) == hot_name
    assert hot_name in usage.ADAPTERS and hot_name in locks.ADAPTERS
    assert vectors.adapter_name(settings) == vector_name
    assert embeddings.adapter_name(settings) == embedder_name
    assert hot_name in hot.ADAPTERS
    assert queue_name in queue.ADAPTERS
    assert vector_name in vectors.ADAPTERS
    assert embedder_name in embeddings.ADAPTERS


async def test_the_embedded_factories_open_their_adapter_under_the_data_dir(
    tmp_path: Path,
) -> None:
    settings = Settings.explicit(data_dir=tmp_path)

    store = hot.ADAPTERS["in_process"](settings)
    journal = queue.ADAPTERS["file"](settings)
    try:
        assert isinstance(store, InProcessHotStore)
        assert isinstance(journal, FileQueue)
        await journal.put({"n": 1})
        assert (tmp_path / "queue").is_dir()
    finally:
        await store.close()
        await journal.close()


def test_redis_adapters_refuse_settings_without_a_url(tmp_path: Path) -> None:
    settings = Settings.explicit(data_dir=tmp_path)

    with pytest.raises(ValueError, match="redis_url"):
        hot.ADAPTERS["redis"](settings)
    with pytest.raises(ValueError, match="redis_url"):
        queue.ADAPTERS["redis"](settings)
    for registry in (
        hot.ADAPTERS,
        queue.ADAPTERS,
        ratelimit.ADAPTERS,
        usage.ADAPTERS,
        locks.ADAPTERS,
    ):
        for name in ("redis", "redis_cluster"):
            with pytest.raises(ValueError, match="redis_url"):
                registry[name](settings)


def test_importing_the_ports_and_registries_loads_no_adapter_library() -> None:
    script = (
        "import sys\n"
        "import memoryd.stores.hot.port, memoryd.stores.queue.port\n"
        "import memoryd.stores.vectors.port, memoryd.stores.embeddings.port\n"
        "import memoryd.stores.ratelimit.port, memoryd.stores.usage.port\n"
        "import memoryd.stores.locks.port\n"
        "from memoryd.stores import embeddings, hot, locks, queue, ratelimit, usage, vectors\n"
        "heavy = {'qdrant_edge', 'qdrant_client', 'torch', 'sentence_transformers', 'openai',"
        " 'redis', 'onnxruntime', 'tokenizers'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": str(SERVICE)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"
