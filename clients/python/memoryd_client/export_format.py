"""The export stream as docs/reference/export-format.md specifies it, client side: the
`item-jcs-v1` checksum, the framing Import expects (header, items, trailer) and the JSON
lines of `memoryd export -o` files. A stream written here imports into memoryd with its
checksum verified, and a stream memoryd exported checks out here.

The canonical form is the server's (service/memoryd/transport/export_stream.py), kept
here because a client cannot import the server; a test asserts both give the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import struct
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TextIO, TypeAlias

import rfc8785
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from memoryd_client.v1 import memory_pb2 as pb

if TYPE_CHECKING:
    from google._upb._message import FieldDescriptor as _UpbFieldDescriptor

    # The stubs type a generic message's fields as either class; at run time they are one.
    _Field: TypeAlias = FieldDescriptor | _UpbFieldDescriptor

__all__ = [
    "CHECKSUM_FORMAT",
    "FORMAT_VERSION",
    "Checksum",
    "canonical_item",
    "canonical_value",
    "checksum",
    "frame",
    "from_json_line",
    "read_jsonl",
    "to_json_line",
    "write_jsonl",
]

FORMAT_VERSION = "1"
CHECKSUM_FORMAT = "item-jcs-v1"


# Written as decimal strings, as proto JSON writes them: exact beyond 2**53 everywhere.
_DECIMAL_STRINGS = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


def _bits(value: float, layout: str, nan: str) -> str:
    # IEEE-754 bits as big-endian hex: exact in every language, unlike decimal text. One
    # form for both zeros and for every NaN, as JSON text keeps neither distinction.
    if math.isnan(value):
        return nan
    return struct.pack(layout, value if value != 0 else 0.0).hex()


def _single(field: _Field, value: Any) -> Any:
    """One value of `field` (a singular value, a list element or a map value)."""
    kind = field.type
    if kind == FieldDescriptor.TYPE_MESSAGE:
        return canonical_value(value)
    if kind == FieldDescriptor.TYPE_ENUM and field.enum_type is not None:
        named = field.enum_type.values_by_number.get(value)
        return value if named is None else named.name
    if kind == FieldDescriptor.TYPE_FLOAT:
        return _bits(value, ">f", "7fc00000")
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return _bits(value, ">d", "7ff8000000000000")
    if kind == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    if kind in _DECIMAL_STRINGS:
        return str(value)
    return value  # string, bool, 32-bit integers


def _map_key(key: str | int | bool) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def _is_set(message: Message, field: _Field) -> bool:
    if field.has_presence:  # a message, a proto3 `optional` scalar, a oneof member
        return message.HasField(field.name)
    # Otherwise set means not the default: 0, -0.0, "", b"", false, no elements.
    return bool(getattr(message, field.name))


def canonical_value(message: Message) -> dict[str, Any]:
    """The JSON value `item-jcs-v1` covers, derived from the message's descriptor: its set
    fields by proto name, recursively. A field at its default is left out, so adding a
    field to the contract changes no digest of an item that leaves it unset."""
    value: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        if not _is_set(message, field):
            continue
        held = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            of = field.message_type.fields_by_name["value"]
            value[field.name] = {_map_key(k): _single(of, v) for k, v in held.items()}
        elif field.is_repeated:
            value[field.name] = [_single(field, v) for v in held]
        else:
            value[field.name] = _single(field, held)
    return value


def canonical_item(item: pb.MemoryItem) -> bytes:
    """One item's `item-jcs-v1` form: RFC 8785 (JCS) JSON of `canonical_value`, then a
    newline."""
    return rfc8785.dumps(canonical_value(item)) + b"\n"


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
