"""The base of the contract's enums (their classes are generated into `_enums.py` from the
proto's descriptors) and parsing of what callers pass for them: a member, its name in any
case (with or without the proto prefix) or the number."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeVar


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
