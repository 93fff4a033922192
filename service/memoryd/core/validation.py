"""Request checks shared by every tier. Each failure names the request field at fault."""

from __future__ import annotations

import re
from collections.abc import Mapping

from memoryd.core.errors import FieldViolation, InvalidArgument, echo
from memoryd.core.models import Scope
from memoryd.core.text import utf8_len
from memoryd.settings import LimitSettings


class Violations:
    """Collects every problem of a request, so the caller learns them all at once."""

    def __init__(self) -> None:
        self._items: list[FieldViolation] = []

    def add(self, field: str, description: str) -> None:
        self._items.append(FieldViolation(field, description))

    def raise_if_any(self) -> None:
        if self._items:
            raise InvalidArgument(self._items)


# C0 controls and DEL. One regex scan, not a Python loop per character: every Add checks
# several ids and a key.
_CONTROL_CHAR = re.compile("[\x00-\x1f\x7f]")


def _has_control_chars(value: str) -> bool:
    return _CONTROL_CHAR.search(value) is not None


def check_id(v: Violations, field: str, value: str, limits: LimitSettings, required: bool) -> None:
    if not value:
        if required:
            v.add(field, "is required")
        return
    if utf8_len(value) > limits.max_id_bytes:
        v.add(field, f"is longer than {limits.max_id_bytes} bytes")
    if _has_control_chars(value):
        v.add(field, "must not contain control characters")


def check_scope(
    v: Violations,
    scope: Scope,
    limits: LimitSettings,
    *,
    need_session: bool = False,
    need_task: bool = False,
) -> None:
    check_id(v, "scope.user_id", scope.user_id, limits, required=True)
    check_id(v, "scope.agent_id", scope.agent_id, limits, required=False)
    check_id(v, "scope.session_id", scope.session_id, limits, required=need_session)
    check_id(v, "scope.task_id", scope.task_id, limits, required=need_task)


def check_content(v: Violations, content: str, limits: LimitSettings) -> None:
    if not content.strip():
        v.add("content", "must not be empty")
    elif (size := utf8_len(content)) > limits.max_content_bytes:
        v.add("content", f"is {size:,} bytes; the limit is {limits.max_content_bytes:,}")


def check_key(v: Violations, key: str, limits: LimitSettings, *, required: bool) -> None:
    if not key:
        if required:
            v.add("key", "is required for this tier")
        return
    if utf8_len(key) > limits.max_key_bytes:
        v.add("key", f"is longer than {limits.max_key_bytes} bytes")
    if _has_control_chars(key):
        v.add("key", "must not contain control characters")


def check_metadata(
    v: Violations, field: str, metadata: Mapping[str, str], limits: LimitSettings
) -> None:
    if len(metadata) > limits.max_metadata_entries:
        v.add(field, f"has {len(metadata)} entries; the limit is {limits.max_metadata_entries}")
        return
    for key, value in metadata.items():
        if not key or utf8_len(key) > limits.max_metadata_key_bytes:
            v.add(
                f"{field}[{echo(key)!r}]", f"keys must be 1..{limits.max_metadata_key_bytes} bytes"
            )
        elif utf8_len(value) > limits.max_metadata_value_bytes:
            v.add(
                f"{field}[{echo(key)!r}]", f"value is over {limits.max_metadata_value_bytes} bytes"
            )


# The key alphabet: the metadata keys a Retrieve/Prune filter may name, and the document
# fields it matches (structured tier). Stores match such a key literally, never as a path
# into nested values (see stores.vectors.port.field_path).
FILTER_KEY_RULE = "1..64 letters, digits, '_', '-', '.' or ':'"
_FILTER_KEY = re.compile(r"[\w.:-]{1,64}")


def is_filter_key(key: str) -> bool:
    return _FILTER_KEY.fullmatch(key) is not None


def check_filters(
    v: Violations, field: str, filters: Mapping[str, str], limits: LimitSettings
) -> None:
    """Metadata equality filters: the metadata limits, and keys of the key alphabet."""
    check_metadata(v, field, filters, limits)
    for key in filters:
        sized = 0 < utf8_len(key) <= limits.max_metadata_key_bytes  # else refused above
        if sized and not is_filter_key(key):
            v.add(f"{field}[{echo(key)!r}]", f"keys must be {FILTER_KEY_RULE}")


def check_fraction(v: Violations, field: str, value: float | None) -> None:
    if value is not None and not 0.0 <= value <= 1.0:
        v.add(field, "must be between 0 and 1")


def resolve_top_k(v: Violations, top_k: int, limits: LimitSettings) -> int:
    if top_k == 0:
        return limits.default_top_k
    if not 1 <= top_k <= limits.max_top_k:
        v.add("top_k", f"must be between 1 and {limits.max_top_k} (0 means {limits.default_top_k})")
    return top_k


def check_batch(v: Violations, ids: list[str], keys: list[str], limits: LimitSettings) -> None:
    if not ids and not keys:
        v.add("ids", "name at least one id or key")
    if len(ids) + len(keys) > limits.max_batch_ids:
        v.add("ids", f"at most {limits.max_batch_ids} ids and keys per request")
    for i, memory_id in enumerate(ids):
        if not memory_id or utf8_len(memory_id) > limits.max_id_bytes:
            v.add(f"ids[{i}]", f"must be 1..{limits.max_id_bytes} bytes")
