"""Whether a port `Filter` selects one point, decided in Python as the engines decide it.

Used to keep what is derived from a user's points through a write instead of voiding it
(`term_counts`: does a new point count for a kept filter?). So it must never be wrong, and
it may decline: `selects` answers None where the engines' semantics are not pinned down
here (paths through arrays, an integer match against a float, arrays holding nulls or
objects...), and the caller then does what it did before (voids the entry). The contract
suite (tests/stores) compares it with every adapter on random filters and payloads.

Semantics (Qdrant's, both adapters):

* a field path is dotted keys, a key in double quotes taken literally (`field_path`);
* a field holding an array has each element as a value (any element may match);
* `MatchValue`/`MatchAny` compare typed: a string with strings, an integer with integers
  (never a boolean), a boolean with booleans; null or missing matches nothing;
* `Range` compares numbers (integers and floats, not booleans);
* `IsEmpty`: missing, null or `[]`; `IsNull`: present and null;
* a `Filter`: all of `must`, one of `should` (if any), none of `must_not`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memoryd.stores.vectors.port import (
    Condition,
    Filter,
    HasId,
    IsEmpty,
    IsNull,
    MatchAny,
    MatchValue,
    Range,
    canonical_id,
)

# What `_lookup` finds besides a value: the field is missing; the path cannot be followed
# here.
_MISSING = object()
_UNKNOWN = object()


def selects(flt: Filter, point_id: str, payload: Mapping[str, Any]) -> bool | None:
    """True when `flt` selects the point (`point_id`, `payload`), False when it does not,
    None when this evaluator cannot tell (the caller must not rely on either answer)."""
    return _group(flt, point_id, payload)


def _group(flt: Filter, point_id: str, payload: Mapping[str, Any]) -> bool | None:
    # Three-valued (Kleene): a definite False (True for must_not) decides even when another
    # condition cannot be told.
    answers = [_condition(c, point_id, payload) for c in flt.must]
    if flt.should:
        answers.append(_any([_condition(c, point_id, payload) for c in flt.should]))
    if flt.must_not:
        excluded = _any([_condition(c, point_id, payload) for c in flt.must_not])
        answers.append(None if excluded is None else not excluded)
    return _all(answers)


def _all(answers: Sequence[bool | None]) -> bool | None:
    if False in answers:
        return False
    return None if None in answers else True


def _any(answers: Sequence[bool | None]) -> bool | None:
    if True in answers:
        return True
    return None if None in answers else False


def _condition(condition: Condition, point_id: str, payload: Mapping[str, Any]) -> bool | None:
    if isinstance(condition, Filter):
        return _group(condition, point_id, payload)
    if isinstance(condition, HasId):
        try:
            return canonical_id(point_id) in {canonical_id(i) for i in condition.ids}
        except ValueError:
            return None
    found = _lookup(payload, condition.field)
    if found is _UNKNOWN:
        return None
    if isinstance(condition, IsEmpty):
        return _is_empty(found)
    if isinstance(condition, IsNull):
        return _is_null(found)
    values = _values(found)
    if values is None:
        return None
    if isinstance(condition, MatchValue):
        return _any([_equal(v, condition.value) for v in values])
    if isinstance(condition, MatchAny):
        if not condition.values:
            return None
        return _any([_equal(v, w) for v in values for w in condition.values])
    if isinstance(condition, Range):
        return _any([_in_range(v, condition) for v in values])
    return None  # a condition this evaluator does not know


def _lookup(payload: Mapping[str, Any], path: str) -> object:
    """The value at `path` (or _MISSING); _UNKNOWN when the path or the way to it is beyond
    this evaluator (array syntax, an array on the way: engines flatten those)."""
    keys = _keys(path)
    if keys is None:
        return _UNKNOWN
    value: object = payload
    for key in keys:
        if isinstance(value, list):
            return _UNKNOWN
        if not isinstance(value, Mapping):
            return _MISSING
        if key not in value:
            return _MISSING
        value = value[key]
    return value


def _keys(path: str) -> list[str] | None:
    keys: list[str] = []
    rest = path
    while True:
        if rest.startswith('"'):
            end = rest.find('"', 1)
            if end < 0:
                return None
            key, rest = rest[1:end], rest[end + 1 :]
        else:
            end = rest.find(".")
            key, rest = (rest, "") if end < 0 else (rest[:end], rest[end:])
            if not key or "[" in key or "]" in key or '"' in key:
                return None
        keys.append(key)
        if not rest:
            return keys
        if not rest.startswith("."):
            return None
        rest = rest[1:]


def _values(found: object) -> list[object] | None:
    """The scalar values a field holds (an array: its elements); None if they are not all
    scalars."""
    if found is _MISSING or found is None:
        return []
    items = found if isinstance(found, list) else [found]
    if any(isinstance(v, list | Mapping) for v in items):
        return None
    return [v for v in items if v is not None]


def _is_empty(found: object) -> bool | None:
    if found is _MISSING or found is None or found == []:
        return True
    if isinstance(found, list):
        return None if any(v is None or isinstance(v, list | Mapping) for v in found) else False
    return None if isinstance(found, Mapping) else False


def _is_null(found: object) -> bool | None:
    if found is None:
        return True
    if isinstance(found, list):
        return None if any(v is None for v in found) else False
    return None if isinstance(found, Mapping) else False


def _equal(value: object, wanted: object) -> bool | None:
    if isinstance(wanted, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(wanted, bool) and value == wanted
    if isinstance(wanted, int):
        if isinstance(value, float):
            return None  # an integer match against a float: not pinned down here
        return isinstance(value, int) and value == wanted
    if isinstance(wanted, str):
        return isinstance(value, str) and value == wanted
    return None


def _in_range(value: object, bounds: Range) -> bool | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None if isinstance(value, str) else False
    x = float(value)
    if x != x:  # NaN
        return None
    return (
        (bounds.gt is None or x > bounds.gt)
        and (bounds.gte is None or x >= bounds.gte)
        and (bounds.lt is None or x < bounds.lt)
        and (bounds.lte is None or x <= bounds.lte)
    )
