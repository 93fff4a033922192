"""What every tier offers the engine. The engine routes requests; tiers hold the behaviour."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from memoryd.core.models import (
    AddCommand,
    AddResult,
    GetResult,
    Lookup,
    MemoryRecord,
    PruneCommand,
    RetrieveQuery,
    Scope,
    Tier,
)
from memoryd.core.validation import Violations


@dataclass
class TierHits:
    items: list[MemoryRecord]
    total: int
    embedding_ms: float = 0.0


class TierHandler(Protocol):
    tier: Tier

    def check_add(self, cmd: AddCommand, v: Violations) -> None:
        """Tier-specific request checks, added to `v`."""
        ...

    def can_retrieve(self, scope: Scope) -> bool:
        """Whether the scope names what this tier needs (e.g. a task for working memory)."""
        ...

    async def add(self, cmd: AddCommand) -> AddResult: ...

    async def retrieve(self, query: RetrieveQuery, top_k: int) -> TierHits: ...

    async def get(self, lookup: Lookup) -> GetResult: ...

    async def delete(self, lookup: Lookup) -> int: ...

    async def prune(self, cmd: PruneCommand) -> int:
        """Returns how many entries went (or would go, on dry_run)."""
        ...
