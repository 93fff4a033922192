"""The contract's enums by their lower-case names, and parsing of what callers pass for
them: a member, its name in any case (with or without the proto prefix) or the number."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeVar

from memoryd_client.v1 import memory_pb2 as pb


class _ProtoEnum(StrEnum):
    """A member's value is the proto name without its prefix, lower-cased. Each subclass
    names its proto enum and that enum's prefix: `class Tier(_ProtoEnum, proto=pb.Tier,
    prefix="TIER_")`."""

    _proto: Any
    _proto_prefix: str

    def __init_subclass__(cls, *, proto: Any = None, prefix: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._proto = proto
        cls._proto_prefix = prefix

    @property
    def number(self) -> int:
        """The proto enum number."""
        return int(self._proto.Value(self._proto_prefix + str(self.value).upper()))


class Tier(_ProtoEnum, proto=pb.Tier, prefix="TIER_"):
    UNSPECIFIED = "unspecified"
    WORKING = "working"
    SHORT_TERM = "short_term"
    LONG_TERM = "long_term"
    PERSONA = "persona"
    EPISODIC = "episodic"
    ENTITY = "entity"
    STRUCTURED = "structured"


class Kind(_ProtoEnum, proto=pb.Kind, prefix="KIND_"):
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


class Role(_ProtoEnum, proto=pb.Role, prefix="ROLE_"):
    UNSPECIFIED = "unspecified"
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class Source(_ProtoEnum, proto=pb.Source, prefix="SOURCE_"):
    UNSPECIFIED = "unspecified"
    EXPLICIT = "explicit"
    AUTO = "auto"


class Operation(_ProtoEnum, proto=pb.Operation, prefix="OPERATION_"):
    UNSPECIFIED = "unspecified"
    ADD = "add"
    ADD_WITH_PRUNE = "add_with_prune"
    DEDUPLICATED = "deduplicated"
    UPDATED = "updated"


class PruneStrategy(_ProtoEnum, proto=pb.PruneStrategy, prefix="PRUNE_STRATEGY_"):
    UNSPECIFIED = "unspecified"
    OLDEST_PERCENT = "oldest_percent"
    EXPIRED = "expired"
    ARCHIVE_OLDER_THAN = "archive_older_than"
    BY_FILTER = "by_filter"
    ALL = "all"


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
    name = value.strip().lower().replace("-", "_").removeprefix(cls._proto_prefix.lower())
    try:
        return cls(name).number
    except ValueError:
        names = ", ".join(m.value for m in cls if m.value != "unspecified")
        raise ValueError(f"unknown {cls.__name__.lower()} {value!r}; one of {names}") from None


def of_number(cls: type[E], number: int) -> E:
    """The member for a proto number; one this client does not know is UNSPECIFIED
    (the raw number stays on the result's `proto`)."""
    try:
        name = str(cls._proto.Name(number))
    except ValueError:
        return cls("unspecified")
    return cls(name.removeprefix(cls._proto_prefix).lower())
