"""A gRPC stub to the server under evaluation: a running one, or one started in-process."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memoryd.v1 import memory_pb2_grpc

RPC_TIMEOUT_S = 30.0


@contextlib.asynccontextmanager
async def open_target(target: str | None) -> AsyncIterator[memory_pb2_grpc.MemoryServiceAsyncStub]:
    """A stub to a running server, or to an in-process one on a fresh temporary data dir."""
    import grpc

    from memoryd.v1 import memory_pb2_grpc

    if target:
        async with grpc.aio.insecure_channel(target) as channel:
            yield memory_pb2_grpc.MemoryServiceStub(channel)
        return

    from memoryd.app import build_app
    from memoryd.settings import MetricsSettings, Settings
    from memoryd.transport.server import MemorydServer

    with tempfile.TemporaryDirectory(prefix="memoryd-eval-") as tmp:
        settings = Settings(
            listen="127.0.0.1:0",
            data_dir=Path(tmp) / "data",
            metrics=MetricsSettings(listen=""),  # no /metrics listener for a one-off run
        )
        started = time.perf_counter()
        app = await build_app(settings)
        server = MemorydServer(settings, app)
        port = await server.start()
        print(f"in-process server on port {port} ({time.perf_counter() - started:.1f} s to start)")
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                yield memory_pb2_grpc.MemoryServiceStub(channel)
        finally:
            await server.stop(grace_s=0)
