"""What every tier offers the engine. The engine routes requests; tiers hold the behaviour."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from memoryd.core.errors import FieldViolation, MemorydError
from memoryd.core.models import (
    AddCommand,
    AddResult,
    GetResult,
    ImportResult,
    Lookup,
    MemoryRecord,
    PruneCommand,
    RetrieveQuery,
    Scope,
    Tier,
    TierUsage,
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

    async def export_count(self, scope: Scope) -> int:
        """How many items an export of the user holds in this tier (deleted included)."""
        ...

    def export_pages(self, scope: Scope) -> AsyncIterator[list[MemoryRecord]]:
        """Every item of the user in this tier, page by page, ready to restore."""
        ...

    def check_restore(self, record: MemoryRecord) -> list[FieldViolation]:
        """What is wrong with an imported item; fields are relative to the item."""
        ...

    async def check_room(
        self, scope: Scope, records: Sequence[MemoryRecord], auto_prune: bool
    ) -> None:
        """Raise QuotaExceeded if importing `records` would pass one of the tier's quotas
        (unless `auto_prune` may make room); writes nothing."""
        ...

    async def restore(
        self, scope: Scope, records: Sequence[MemoryRecord], auto_prune: bool = False
    ) -> ImportResult:
        """Write imported items under `scope`'s user; ids already there are skipped. The
        quotas are checked again (and with `auto_prune`, room made) as the items go in."""
        ...

    async def usage(self, scope: Scope) -> TierUsage: ...


@runtime_checkable
class BatchAdder(Protocol):
    """A tier that adds several memories at once (one embedding batch, one store write)."""

    async def add_many(self, cmds: Sequence[AddCommand]) -> list[AddResult | MemorydError]:
        """One outcome per command, in order: its result, or the error one Add would raise."""
        ...
