"""The isolation suite of test_tenant_isolation.py on qdrant-client's local mode (standing
in for a Qdrant server) and Redis. A module of its own: `pytest --dist loadfile` gives
each module to one worker, and the two adapters' runs are among the longest tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ServerFactory
from tests.service.test_tenant_isolation import run_suite
from tests.support.redis_server import RedisServer


@pytest.mark.slow
async def test_a_thousand_random_calls_never_cross_a_tenant_or_a_user(
    start_server: ServerFactory, redis_server: RedisServer, tmp_path: Path
) -> None:
    """The same suite, shorter (CALLS["qdrant"]): local mode answers a hybrid query ~20x
    slower than the embedded engine."""
    await run_suite(start_server, redis_server, tmp_path, "qdrant")
