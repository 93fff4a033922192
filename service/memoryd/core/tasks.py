"""Background task helpers."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` and wait for it to end.

    A cancel can be swallowed when it lands just as an inner wait completes (Python 3.11's
    wait_for, client libraries), so it is repeated until the task is really done.
    """
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    with contextlib.suppress(asyncio.CancelledError):
        task.result()
