"""What the core reports about its own work, as a port.

The core calls an `Observer`; the transport supplies the implementations (Prometheus
metrics in telemetry/metrics.py, OpenTelemetry spans in telemetry/tracing.py) and the
composition root wires them in. `NullObserver` is the default, so core code and its tests
need neither. Nothing here may carry a user id, key or content into what it reports: the
arguments are tiers, store names, operations and counts.

The request id of the call being served lives here too, because work done later on a
request's behalf (the write-behind copy) must carry it in what it queues.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar, cast

from memoryd.core.models import Scope, Tier

T = TypeVar("T")


class Observer(Protocol):
    def embedding(self, batch_size: int) -> AbstractContextManager[None]:
        """Wraps one call of the embedder on `batch_size` texts."""
        ...

    def store_call(self, store: str, operation: str) -> AbstractContextManager[None]:
        """Wraps one call of a store adapter (`store`: "redis", "qdrant_edge", ...)."""
        ...

    def fusion(self, stage: str) -> AbstractContextManager[None]:
        """Wraps the merging of ranked lists: "signals" within a tier, "tiers" across."""
        ...

    def quota_alert(self, tier: Tier, level: str) -> None:
        """A quota alert was raised: "warning", "critical" (Usage) or "exceeded" (a
        write refused)."""
        ...

    def archived(self, tier: Tier, count: int) -> None:
        """`count` memories went to the cold archive."""
        ...

    def deleted(self, tier: Tier, reason: str, count: int) -> None:
        """`count` memories were removed, for `reason` (see docs/reference/metrics.md)."""
        ...

    def stored_bytes(self, tier: Tier, size: int) -> None:
        """The content bytes a tier holds over all users, as of a storage survey."""
        ...

    def ages(self, tier: Tier, days: Sequence[float]) -> None:
        """Ages in days of stored memories, seen by a storage survey."""
        ...

    def backlog(self, queue: str, pending: int, oldest_age_s: float) -> None:
        """A queue's entries not yet done, and how long the oldest has waited."""
        ...


class NullObserver:
    """Reports nothing."""

    def embedding(self, batch_size: int) -> AbstractContextManager[None]:
        return nullcontext()

    def store_call(self, store: str, operation: str) -> AbstractContextManager[None]:
        return nullcontext()

    def fusion(self, stage: str) -> AbstractContextManager[None]:
        return nullcontext()

    def quota_alert(self, tier: Tier, level: str) -> None:
        return None

    def archived(self, tier: Tier, count: int) -> None:
        return None

    def deleted(self, tier: Tier, reason: str, count: int) -> None:
        return None

    def stored_bytes(self, tier: Tier, size: int) -> None:
        return None

    def ages(self, tier: Tier, days: Sequence[float]) -> None:
        return None

    def backlog(self, queue: str, pending: int, oldest_age_s: float) -> None:
        return None


class Observers:
    """Hands every report to each of several observers (metrics and traces)."""

    def __init__(self, *parts: Observer) -> None:
        self._parts = parts

    @contextmanager
    def _around(self, enter: Callable[[Observer], AbstractContextManager[None]]) -> Iterator[None]:
        with ExitStack() as stack:
            for part in self._parts:
                stack.enter_context(enter(part))
            yield

    def embedding(self, batch_size: int) -> AbstractContextManager[None]:
        return self._around(lambda o: o.embedding(batch_size))

    def store_call(self, store: str, operation: str) -> AbstractContextManager[None]:
        return self._around(lambda o: o.store_call(store, operation))

    def fusion(self, stage: str) -> AbstractContextManager[None]:
        return self._around(lambda o: o.fusion(stage))

    def quota_alert(self, tier: Tier, level: str) -> None:
        for part in self._parts:
            part.quota_alert(tier, level)

    def archived(self, tier: Tier, count: int) -> None:
        for part in self._parts:
            part.archived(tier, count)

    def deleted(self, tier: Tier, reason: str, count: int) -> None:
        for part in self._parts:
            part.deleted(tier, reason, count)

    def stored_bytes(self, tier: Tier, size: int) -> None:
        for part in self._parts:
            part.stored_bytes(tier, size)

    def ages(self, tier: Tier, days: Sequence[float]) -> None:
        for part in self._parts:
            part.ages(tier, days)

    def backlog(self, queue: str, pending: int, oldest_age_s: float) -> None:
        for part in self._parts:
            part.backlog(queue, pending, oldest_age_s)


class _Observed:
    """A store adapter whose public methods each report one `store_call`."""

    def __init__(
        self, target: object, store: str, observer: Observer, skip: frozenset[str]
    ) -> None:
        self._target = target
        self._store = store
        self._observer = observer
        self._skip = skip
        # Wrappers made once per method (by its function: a method replaced on the target
        # gets a new one); building one costs more than a call of an in-process store.
        self._wrappers: dict[str, tuple[object, Any]] = {}

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        function = getattr(value, "__func__", None)
        cached = self._wrappers.get(name)
        if cached is not None and function is not None and cached[0] is function:
            return cached[1]
        if name.startswith("_") or name in self._skip or not callable(value):
            return value
        wrapper = self._wrap(name, value)
        if function is not None:
            self._wrappers[name] = (function, wrapper)
        return wrapper

    def _wrap(self, name: str, value: Any) -> Any:
        store, observer = self._store, self._observer
        if inspect.iscoroutinefunction(value):

            async def call_async(*args: Any, **kwargs: Any) -> Any:
                with observer.store_call(store, name):
                    return await value(*args, **kwargs)

            return functools.update_wrapper(call_async, value)
        if inspect.isasyncgenfunction(value) or inspect.isgeneratorfunction(value):
            return value  # a stream's time is its consumer's, not the store's

        def call(*args: Any, **kwargs: Any) -> Any:
            with observer.store_call(store, name):
                return value(*args, **kwargs)

        return functools.update_wrapper(call, value)


def observed(target: T, store: str, observer: Observer, skip: Collection[str] = ()) -> T:
    """`target` (a store adapter) with each public method call reported to `observer` as a
    `store_call(store, method name)`, except the methods named in `skip`."""
    if type(observer) is NullObserver:  # nothing to report: no indirection
        return target
    return cast(T, _Observed(target, store, observer, frozenset(skip)))


# ---------------------------------------------------------------------- correlation

_request_id: ContextVar[str] = ContextVar("memoryd_request_id", default="")


def request_id() -> str:
    """The id of the request being served ("" outside any request)."""
    return _request_id.get()


@contextmanager
def correlated(rid: str) -> Iterator[str]:
    """Everything inside (log lines, queued work) belongs to request `rid`; a new id is
    made when `rid` is empty."""
    rid = rid or new_request_id()
    token = _request_id.set(rid)
    try:
        yield rid
    finally:
        # A streaming call may end in another context than it began (grpc.aio runs a
        # request stream's reader apart); that context dies with the call anyway.
        with contextlib.suppress(ValueError):
            _request_id.reset(token)


def bind_request_id(rid: str) -> str:
    """`correlated` without the reset, for a call that runs in a task of its own (a grpc.aio
    unary call: its context copy dies with it); returns the id, made new when `rid` is
    empty."""
    rid = rid or new_request_id()
    _request_id.set(rid)
    return rid


def new_request_id() -> str:
    # 32 random hex digits, as uuid4().hex but without building a UUID on every call.
    return os.urandom(16).hex()


# ---------------------------------------------------------------------- log-safe digests


def user_hash(scope: Scope) -> str:
    """Names a user in logs without naming them: 16 hex digits of the SHA-256 of tenant
    and user id (stable, so one user's lines can be followed)."""
    return hashlib.sha256(f"{scope.tenant}\x00{scope.user_id}".encode()).hexdigest()[:16]


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
