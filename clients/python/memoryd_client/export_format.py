"""The export stream as docs/reference/export-format.md specifies it, client side: the
`item-jcs-v1` checksum, the framing Import expects (header, items, trailer) and the JSON
lines of `memoryd export -o` files. A stream written here imports into memoryd with its
checksum verified, and a stream memoryd exported checks out here.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

import rfc8785
from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp

from memoryd_client.v1 import memory_pb2 as pb

__all__ = [
    "CHECKSUM_FORMAT",
    "FORMAT_VERSION",
    "Checksum",
    "canonical_item",
    "checksum",
    "frame",
    "from_json_line",
    "read_jsonl",
    "to_json_line",
    "write_jsonl",
]

FORMAT_VERSION = "1"
CHECKSUM_FORMAT = "item-jcs-v1"


def _float32(value: float) -> str:
    # The binary32 bits as hex: exact in every language, where decimal text is not.
    if math.isnan(value):
        return "7fc00000"
    return struct.pack(">f", value if value != 0 else 0.0).hex()


def _enum(wrapper: Any, value: int) -> str | int:
    try:
        return str(wrapper.Name(value))
    except ValueError:
        return value


def _timestamp(item: pb.MemoryItem, name: str) -> dict[str, Any] | None:
    if not item.HasField(name):  # type: ignore[arg-type]
        return None
    ts: Timestamp = getattr(item, name)
    return {"seconds": str(ts.seconds), "nanos": ts.nanos}


def _value(item: pb.MemoryItem) -> dict[str, Any]:
    e, r = item.episode, item.relation
    return {
        "id": item.id,
        "tier": _enum(pb.Tier, item.tier),
        "kind": _enum(pb.Kind, item.kind),
        "content": item.content,
        "key": item.key,
        "score": _float32(item.score),
        "metadata": dict(item.metadata),
        "importance": _float32(item.importance),
        "created_at": _timestamp(item, "created_at"),
        "updated_at": _timestamp(item, "updated_at"),
        "expires_at": _timestamp(item, "expires_at"),
        "source": _enum(pb.Source, item.source),
        "role": _enum(pb.Role, item.role),
        "agent_id": item.agent_id,
        "session_id": item.session_id,
        "task_id": item.task_id,
        "episode": {
            "task": e.task,
            "steps": [{"action": s.action, "observation": s.observation} for s in e.steps],
            "outcome": e.outcome,
            "success": e.success,
        }
        if item.HasField("episode")
        else None,
        "relation": {"subject": r.subject, "predicate": r.predicate, "object": r.object}
        if item.HasField("relation")
        else None,
        "document_json": item.document_json,
        "archived": item.archived,
        "deleted": item.deleted,
    }


def canonical_item(item: pb.MemoryItem) -> bytes:
    """One item's `item-jcs-v1` form: RFC 8785 JSON of every field, then a newline."""
    return rfc8785.dumps(_value(item)) + b"\n"


class Checksum:
    """The running `item-jcs-v1` sha256 over items in stream order."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.count = 0

    def add(self, item: pb.MemoryItem) -> None:
        self._sha.update(canonical_item(item))
        self.count += 1

    def hexdigest(self) -> str:
        return self._sha.hexdigest()

    def trailer(self) -> pb.ExportTrailer:
        return pb.ExportTrailer(
            item_count=self.count, checksum_sha256=self.hexdigest(), checksum_format=CHECKSUM_FORMAT
        )

    def matches(self, trailer: pb.ExportTrailer) -> bool:
        """Whether a trailer's count and (item-jcs-v1) checksum are those of the items seen."""
        return (
            trailer.item_count == self.count
            and trailer.checksum_format == CHECKSUM_FORMAT
            and trailer.checksum_sha256 == self.hexdigest()
        )


def checksum(items: Iterable[pb.MemoryItem]) -> str:
    """`checksum_sha256` of these items in this order."""
    total = Checksum()
    for item in items:
        total.add(item)
    return total.hexdigest()


def frame(user_id: str, items: Iterable[pb.MemoryItem]) -> Iterator[pb.ImportRequest]:
    """The Import stream for `items`: the scope and a header, every item, then a trailer
    with their count and checksum (so the server verifies what it received)."""
    header = pb.ExportHeader(user_id=user_id, format_version=FORMAT_VERSION)
    yield pb.ImportRequest(scope=pb.Scope(user_id=user_id), header=header)
    total = Checksum()
    for item in items:
        total.add(item)
        yield pb.ImportRequest(item=item)
    yield pb.ImportRequest(trailer=total.trailer())


def to_json_line(message: pb.ExportResponse) -> str:
    """One message as a line of an export file (no newline), as `memoryd export` writes."""
    return json.dumps(json_format.MessageToDict(message), separators=(",", ":"))


def from_json_line(line: str) -> pb.ExportResponse:
    return json_format.ParseDict(json.loads(line), pb.ExportResponse())


def write_jsonl(messages: Iterable[pb.ExportResponse], out: TextIO) -> int:
    """Write a stream as JSON lines; returns the number of items."""
    items = 0
    for message in messages:
        out.write(to_json_line(message) + "\n")
        items += message.WhichOneof("payload") == "item"
    return items


def read_jsonl(lines: Iterable[str]) -> Iterator[pb.ExportResponse]:
    """The messages of an export file (blank lines skipped)."""
    for line in lines:
        if line.strip():
            yield from_json_line(line)
