"""Prune for the hot tiers, whose entries live until their task or session ends: only
ALL (task/session end) and BY_FILTER remove anything."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from memoryd.core.models import PruneCommand, PruneStrategy
from memoryd.core.tiers.hot_errors import hot_store_calls

E = TypeVar("E")

# The strategies that remove anything from a hot tier; the others leave it as it is.
HOT_STRATEGIES = frozenset({PruneStrategy.ALL, PruneStrategy.BY_FILTER})


def metadata_matches(metadata: Mapping[str, str], filters: Mapping[str, str]) -> bool:
    return all(metadata.get(k) == v for k, v in filters.items())


async def prune_hot(
    cmd: PruneCommand,
    listing: Callable[[], Awaitable[Sequence[E]]],
    metadata_of: Callable[[E], Mapping[str, str]],
    name_of: Callable[[E], str],
    clear: Callable[[], Awaitable[int]],
    delete: Callable[[list[str]], Awaitable[int]],
) -> int:
    """How many entries went (or would go, on dry_run)."""
    with hot_store_calls():
        if cmd.strategy is PruneStrategy.ALL:
            return len(await listing()) if cmd.dry_run else await clear()
        if cmd.strategy is PruneStrategy.BY_FILTER:
            doomed = [
                name_of(e) for e in await listing() if metadata_matches(metadata_of(e), cmd.filters)
            ]
            return len(doomed) if cmd.dry_run else await delete(doomed)
    return 0
