"""A memory on its way into the vector store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memoryd.core.memory.payload import with_lead
from memoryd.core.models import MemoryRecord


@dataclass(frozen=True)
class NewPoint:
    """A memory to insert: its record, its payload, the text its keyword terms and vector
    come from, the `lead` its vector also sees (the turn before it; ADR 0400), and the
    `vector`, when the caller embedded `dense_text` beforehand; `own_vector`: `embed_text`
    embedded alone, for a point with a lead (ADR 0409), when the caller did that too."""

    record: MemoryRecord
    payload: dict[str, Any]
    embed_text: str
    vector: list[float] | None = None
    lead: str = ""
    own_vector: list[float] | None = None

    @property
    def dense_text(self) -> str:
        return with_lead(self.lead, self.embed_text)
