"""The fast layer: the core on its embedded stores, with no server, no Redis and no model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memoryd.app import App, build_app
from memoryd.core.engine import MemoryEngine
from memoryd.settings import Settings
from tests.support.clock import MovableClock
from tests.unit.unit_kit import AppFactory, HashEmbedder


@pytest.fixture
def clock() -> MovableClock:
    return MovableClock()


@pytest.fixture
async def make_app(tmp_path: Path, clock: MovableClock) -> AsyncIterator[AppFactory]:
    """Builds the real composition (embedded stores, in-process hot store) with settings
    overrides; every app is closed at the end of the test."""
    apps: list[App] = []

    async def make(**overrides: Any) -> App:
        values: dict[str, Any] = {"data_dir": tmp_path / f"data{len(apps)}"}
        values.update(overrides)
        app = await build_app(Settings.explicit(**values), clock=clock, embedder=HashEmbedder())
        apps.append(app)
        return app

    yield make
    for app in apps:
        await app.close()


@pytest.fixture
async def engine(make_app: AppFactory) -> MemoryEngine:
    app: App = await make_app()
    return app.engine
