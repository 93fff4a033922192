"""Shared fixtures: a private Redis, hot stores of both kinds, and an in-process server."""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis

from memoryd.app import App, build_app, build_embedder
from memoryd.core.retrieval.token_budget import TokenCounter
from memoryd.settings import MetricsSettings, Settings
from memoryd.stores import hot
from memoryd.stores.embeddings.port import Embedder
from memoryd.stores.hot.port import HotStore
from memoryd.telemetry import Telemetry
from memoryd.transport.logs import HANDLER_NAME as LOG_HANDLER_NAME
from memoryd.transport.server import MemorydServer
from memoryd.v1 import memory_pb2_grpc
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer

# The longest test files, longest first (their tests' sum, measured with --durations on a
# 2-CPU machine). `pytest -n auto --dist loadfile` gives each file to one worker, and
# xdist would queue the files by their number of tests, most first: these (few tests,
# each long) would come last, one worker running them while the others have nothing left.
# Under xdist they are queued first, then every other file as xdist would order it.
LONG_FILES = (  # test seconds on a 2 vCPU AVX2 box, session 20 (`--durations=0`, per file)
    "tests/test_benchmark_smoke.py",  # ~120 s
    "tests/test_deploy_files.py",  # ~95 s
    "tests/service/test_tenant_isolation.py",  # ~95 s
    "tests/stores/test_onnx_embedder.py",  # ~55 s
    "tests/stores/test_mpnet_embedder.py",  # ~55 s
    "tests/service/test_replica_processes.py",  # ~50 s
    "tests/service/test_scale_out_quotas.py",  # ~45 s
    "tests/console/test_console_browser.py",  # ~30 s
    "tests/clients/test_mcp_server.py",  # ~25 s
    "tests/service/test_tenant_isolation_qdrant.py",  # ~25 s
    "tests/stores/test_term_counts_through_writes.py",  # ~25 s
    "tests/service/test_operability.py",  # ~20 s
    "tests/service/test_crash_recovery.py",  # ~20 s
    "tests/service/test_faults.py",  # ~20 s
)


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "dist", None) == "loadfile":  # the xdist controller
        config.option.loadscopereorder = False  # files are queued in the items' order


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker (whose collection is the controller's queue): LONG_FILES first,
    then the other files by their number of tests, most first."""
    if not hasattr(config, "workerinput"):
        return
    tests_in = Counter(item.nodeid.split("::")[0] for item in items)

    def rank(item: pytest.Item) -> tuple[int, int]:
        file = item.nodeid.split("::")[0]
        if file in LONG_FILES:
            return LONG_FILES.index(file), 0
        return len(LONG_FILES), -tests_in[file]

    items.sort(key=rank)  # stable: a file's tests keep their order


@pytest.fixture(autouse=True)
def _no_log_handler_left_behind() -> Iterator[None]:
    """A test that runs the `memoryd` command installs memoryd's log handler on the root
    logger; remove it afterwards so later tests' output stays theirs."""
    yield
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == LOG_HANDLER_NAME]:
        root.removeHandler(handler)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """A private 3-master Redis Cluster, started once (a few seconds) for the whole run."""
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    yield cluster
    cluster.stop()


def redis_settings(request: pytest.FixtureRequest, adapter: str, **values: Any) -> Settings:
    """Settings pointing a Redis adapter at its private Redis: the cluster for the
    `redis_cluster` adapter, the single server otherwise."""
    if adapter == "redis_cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return Settings.explicit(redis_url=cluster.url, redis_cluster=True, **values)
    server: RedisServer = request.getfixturevalue("redis_server")
    return Settings.explicit(redis_url=server.url, **values)


@pytest.fixture(params=["in_process", "redis", "redis_cluster"])
def redis_family(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Server settings for each place the Redis-family stores (hot tiers, write-behind
    queue, usage counters, user locks) live: the server's own, one Redis, a Redis Cluster."""
    if request.param == "redis":
        return {"redis_url": request.getfixturevalue("redis_server").url}
    if request.param == "redis_cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return {"redis_url": cluster.url, "redis_cluster": True}
    return {}


@pytest.fixture
async def redis_client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


@pytest.fixture(params=sorted(hot.ADAPTERS))
async def hot_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[HotStore]:
    """Every registered hot store adapter; each may use the private Redis or Cluster."""
    settings = redis_settings(request, request.param, data_dir=tmp_path)
    store = hot.ADAPTERS[request.param](settings)
    yield store
    await store.close()


@pytest.fixture
def user_id() -> str:
    """A fresh user per test, so tests sharing a Redis never see each other's data."""
    return f"user-{uuid.uuid4().hex[:12]}"


class RunningServer:
    def __init__(
        self, server: MemorydServer, app: App, channel: grpc.aio.Channel, port: int = 0
    ) -> None:
        self.server = server
        self.port = port
        self.app = app
        self.channel = channel
        self.stub = memory_pb2_grpc.MemoryServiceStub(channel)


ServerFactory = Callable[..., Awaitable[RunningServer]]


@pytest.fixture(scope="session")
def counter() -> TokenCounter:
    """The offline cl100k token counter (immutable: one serves the whole run)."""
    return TokenCounter()


@pytest.fixture(scope="session")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    """The embedder a server builds from default settings (MiniLM, int8 on ONNX Runtime:
    what ships), loaded once for the whole run."""
    model = build_embedder(Settings.explicit(data_dir=tmp_path_factory.mktemp("embedder")))
    model.warm()
    return model


@pytest.fixture
async def start_server(tmp_path: Path, embedder: Embedder) -> AsyncIterator[ServerFactory]:
    """Start in-process servers on port 0; all are stopped at the end of the test."""
    running: list[RunningServer] = []

    async def start(
        clock: Callable[[], float] = time.time,
        telemetry: Telemetry | None = None,
        model: Embedder | None = None,
        **overrides: Any,
    ) -> RunningServer:
        values: dict[str, Any] = {
            "listen": "127.0.0.1:0",
            "data_dir": tmp_path / "data",
            "metrics": MetricsSettings(listen="127.0.0.1:0"),
        }
        values.update(overrides)
        settings = Settings.explicit(**values)
        app = await build_app(
            settings, clock=clock, embedder=model or embedder, telemetry=telemetry
        )
        server = MemorydServer(settings, app, health_interval_s=0.2)
        port = await server.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        handle = RunningServer(server, app, channel, port)
        running.append(handle)
        return handle

    yield start
    for handle in running:
        await handle.channel.close(None)
        await handle.server.stop(grace_s=0)


async def server_on(
    request: pytest.FixtureRequest, start_server: ServerFactory, hot_store: str
) -> RunningServer:
    """A server whose hot tiers (and queue, buckets) are in-process, on the private Redis,
    or on the private Redis Cluster."""
    if hot_store == "redis_cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return await start_server(redis_url=cluster.url, redis_cluster=True)
    if hot_store == "redis":
        return await start_server(redis_url=request.getfixturevalue("redis_server").url)
    return await start_server()


@pytest.fixture(params=["in_process", "redis"])
async def memoryd(request: pytest.FixtureRequest, start_server: ServerFactory) -> RunningServer:
    """A server on each hot store kind; tests using it run once per kind. The hot-tier
    suites override it to run on a Redis Cluster as well."""
    return await server_on(request, start_server, request.param)
