"""The extractor port: a chat model asked for JSON that follows a schema.

The core writes the prompt and reads the reply (core/sessions/extraction.py); an adapter
only carries them to a model. Stores know nothing of policy: whether a reply is usable is
the core's call, so an adapter returns the reply text as it came.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol


@dataclass(frozen=True)
class ChatMessage:
    role: Literal["system", "user"]
    content: str


class ExtractorUnavailable(Exception):
    """The model could not answer: timeout, rate limit, server error, no connection, or
    too many extractions already running. `retry_after_s` is the provider's hint, if any."""

    def __init__(
        self, message: str, *, retry_after_s: float | None = None, status_code: int | None = None
    ) -> None:
        self.retry_after_s = retry_after_s
        self.status_code = status_code
        super().__init__(message)


class StructuredChat(Protocol):
    @property
    def name(self) -> str:
        """Which model at which endpoint, for messages and logs."""
        ...

    async def complete(
        self, messages: Sequence[ChatMessage], schema_name: str, schema: Mapping[str, Any]
    ) -> str:
        """The model's reply to `messages`, asked to follow the JSON `schema` (structured
        output). Raises ExtractorUnavailable when no reply came."""
        ...

    async def close(self) -> None: ...
