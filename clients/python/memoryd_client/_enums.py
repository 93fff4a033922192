"""The contract's enums by their lower-case names, and parsing of what callers pass for
them: a member, its name in any case (with or without the proto prefix) or the number."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeVar

from memoryd_client.v1 import memory_pb2 as pb


class _ProtoEnum(StrEnum):
    """A member's value is the proto name without its prefix, lower-cased."""

    @classmethod
    def _wrapper(cls) -> Any:
        raise NotImplementedError

    @classmethod
    def _prefix(cls) -> str:
        raise NotImplementedError

    @property
    def number(self) -> int:
        """The proto enum number."""
        return int(self._wrapper().Value(self._prefix() + str(self.value).upper()))


class Tier(_ProtoEnum):
    UNSPECIFIED = "unspecified"
    WORKING = "working"
    SHORT_TERM = "short_term"
    LONG_TERM = "long_term"
    PERSONA = "persona"
    EPISODIC = "episodic"
    ENTITY = "entity"
    STRUCTURED = "structured"

    @classmethod
    def _wrapper(cls) -> Any:
        return pb.Tier

    @classmethod
    def _prefix(cls) -> str:
        return "TIER_"


class Kind(_ProtoEnum):
    UNSPECIFIED = "unspecified"
    FACT = "fact"
    PREFERENCE = "preference"
    DECISION = "decision"
    NOTE = "note"
    MESSAGE = "message"
    EPISODE = "episode"
    ENTITY = "entity"
    RELATION = "relation"
    DOCUMENT = "document"

    @classmethod
    def _wrapper(cls) -> Any:
        return pb.Kind

    @classmethod
    def _prefix(cls) -> str:
        return "KIND_"


class Role(_ProtoEnum):
    UNSPECIFIED = "unspecified"
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"

    @classmethod
    def _wrapper(cls) -> Any:
        return pb.Role

    @classmethod
    def _prefix(cls) -> str:
        return "ROLE_"


class Source(_ProtoEnum):
    UNSPECIFIED = "unspecified"
    EXPLICIT = "explicit"
    AUTO = "auto"

    @classmethod
    def _wrapper(cls) -> Any:
        return pb.Source

    @classmethod
    def _prefix(cls) -> str:
        return "SOURCE_"


class Operation(_ProtoEnum):
    UNSPECIFIED = "unspecified"
    ADD = "add"
    ADD_WITH_PRUNE = "add_with_prune"
    DEDUPLICATED = "deduplicated"
    UPDATED = "updated"

    @classmethod
    def _wrapper(cls) -> Any:
        return pb.Operation

    @classmethod
    def _prefix(cls) -> str:
        return "OPERATION_"


class PruneStrategy(_ProtoEnum):
    UNSPECIFIED = "unspecified"
    OLDEST_PERCENT = "oldest_percent"
    EXPIRED = "expired"
    ARCHIVE_OLDER_THAN = "archive_older_than"
    BY_FILTER = "by_filter"
    ALL = "all"

    @classmethod
    def _wrapper(cls) -> Any:
        return pb.PruneStrategy

    @classmethod
    def _prefix(cls) -> str:
        return "PRUNE_STRATEGY_"


E = TypeVar("E", bound=_ProtoEnum)

# What a caller may pass for an enum argument: Tier.LONG_TERM, "long_term", "LONG_TERM",
# "TIER_LONG_TERM", "long-term" or pb.TIER_LONG_TERM (3).
EnumLike = _ProtoEnum | str | int


def to_number(cls: type[E], value: EnumLike) -> int:
    """The proto number for `value`; a number passes through (the server validates it)."""
    if isinstance(value, _ProtoEnum):
        if not isinstance(value, cls):
            raise ValueError(f"expected a {cls.__name__}, got {value!r}")
        return value.number
    if isinstance(value, int):
        return value
    name = value.strip().lower().replace("-", "_").removeprefix(cls._prefix().lower())
    try:
        return cls(name).number
    except ValueError:
        names = ", ".join(m.value for m in cls if m.value != "unspecified")
        raise ValueError(f"unknown {cls.__name__.lower()} {value!r}; one of {names}") from None


def of_number(cls: type[E], number: int) -> E:
    """The member for a proto number; one this client does not know is UNSPECIFIED
    (the raw number stays on the result's `proto`)."""
    try:
        name = str(cls._wrapper().Name(number))
    except ValueError:
        return cls("unspecified")
    return cls(name.removeprefix(cls._prefix()).lower())
