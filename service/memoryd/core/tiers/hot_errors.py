"""Translate hot-store signals into domain errors, in one place for both hot tiers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from memoryd.core.errors import StoreUnavailable
from memoryd.stores.hot.port import HotStoreDown


@contextmanager
def hot_store_calls() -> Iterator[None]:
    try:
        yield
    except HotStoreDown as exc:
        raise StoreUnavailable("hot store", str(exc)) from exc
