"""Background task helpers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

# Set in a task that works for no waiting caller (the conversation copy): what it asks of
# shared resources may wait behind requests (the embedding batcher's background lane).
_BACKGROUND: ContextVar[bool] = ContextVar("memoryd_background", default=False)


@contextlib.contextmanager
def in_background() -> Iterator[None]:
    """The work inside is done for no waiting caller: it yields the cores to requests."""
    token = _BACKGROUND.set(True)
    try:
        yield
    finally:
        _BACKGROUND.reset(token)


def is_background() -> bool:
    """Whether the running code is background work (`in_background`)."""
    return _BACKGROUND.get()


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
