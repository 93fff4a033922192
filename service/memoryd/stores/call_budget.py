"""How long the store calls made for the request being served may still take.

The transport records the caller's deadline once per call (`start`); the network store
adapters run each call through `bounded`, so that a store that does not answer (a frozen
Redis) costs a request at most its caller's time, never one timeout per store call in
series: after one call of a request timed out, the request's later calls fail at once
(`trip`). Each call is also bounded by its client's own timeout (`redis_timeout_seconds`).

Outside any request (background work: the conversation copier, maintenance, health
probes) there is no budget and only the clients' own timeouts apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

# The share of the caller's time kept for answering: the server gives up on its stores
# this much before the caller does, so the caller reads UNAVAILABLE, not its own
# DEADLINE_EXCEEDED.
_ANSWER_SHARE = 0.1


class BudgetSpent(TimeoutError):
    """A store call of this request did not finish within the request's time."""


class CallBudget:
    """One request's: its deadline (event-loop time; None when the caller set none) and
    whether a store call of it already timed out. Shared by the tasks the request spawns
    (a context copy holds the same object)."""

    __slots__ = ("deadline", "tripped")

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.tripped = False

    def check(self) -> None:
        if self.tripped:
            raise BudgetSpent("a store did not answer earlier in this request")
        if self.deadline is not None and asyncio.get_running_loop().time() >= self.deadline:
            raise BudgetSpent("the caller's deadline leaves no time for the store")

    def trip(self) -> None:
        self.tripped = True


_budget: contextvars.ContextVar[CallBudget | None] = contextvars.ContextVar(
    "memoryd_call_budget", default=None
)


def start(time_remaining_s: float | None) -> contextvars.Token[CallBudget | None]:
    """The request being served (in this task and the tasks it spawns) must answer within
    `time_remaining_s` (None: no deadline)."""
    deadline = None
    if time_remaining_s is not None:
        kept = max(0.0, time_remaining_s) * (1 - _ANSWER_SHARE)
        deadline = asyncio.get_running_loop().time() + kept
    return _budget.set(CallBudget(deadline))


def end(token: contextvars.Token[CallBudget | None]) -> None:
    # A streaming call may end in another context than it began.
    with contextlib.suppress(ValueError):
        _budget.reset(token)


def detach() -> None:
    """Work started by a request that outlives it or serves others (a lock's keeper) runs
    with no budget: call this first in its task."""
    _budget.set(None)


async def bounded(
    op: Callable[[], Awaitable[T]], timeouts: tuple[type[BaseException], ...] = ()
) -> T:
    """Run a store call within the current request's budget: `BudgetSpent` (a
    TimeoutError) when it is spent or runs out during the call. That, or one of the
    client's own `timeouts`, trips the budget for the request's later calls."""
    budget = _budget.get()
    if budget is None:
        return await op()
    budget.check()
    try:
        async with asyncio.timeout_at(budget.deadline):
            return await op()
    except TimeoutError as exc:
        budget.trip()
        if isinstance(exc, BudgetSpent):
            raise
        raise BudgetSpent("no answer within the caller's deadline") from exc
    except timeouts:
        budget.trip()
        raise
