"""The export stream: a header (counts), the items, a trailer (their count and checksum).

The Export RPC sends it, Import receives it, and backups and `memoryd export -o` store it
as JSON lines. This is the only module that frames the stream, computes its checksum or
encodes its lines; docs/reference/export-format.md specifies all three, so that clients in
other languages can write and check streams too.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import struct
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import rfc8785
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from memoryd.core.errors import InvalidArgument, echo
from memoryd.core.models import Tier
from memoryd.transport import convert
from memoryd.v1 import memory_pb2 as pb

if TYPE_CHECKING:
    from google._upb._message import FieldDescriptor as _UpbFieldDescriptor

    # The stubs type a generic message's fields as either class; at run time they are one.
    _Field: TypeAlias = FieldDescriptor | _UpbFieldDescriptor

# header.format_version: the framing (header, items, trailer), independent of the checksum.
FORMAT_VERSION = "1"
# trailer.checksum_format: the item form the checksum is computed over.
CHECKSUM_FORMAT = "item-jcs-v1"


def header(
    user_id: str,
    exported_at: float,
    counts: Mapping[Tier, int],
    skipped: Iterable[Tier] = (),
) -> pb.ExportHeader:
    """The header: per tier counts and their total (informative; the trailer is checked),
    and the tiers left out because their store is down."""
    message = pb.ExportHeader(
        user_id=user_id,
        counts=[
            pb.TierCount(tier=convert.enum_to_proto(t), count=c)  # type: ignore[arg-type]
            for t, c in counts.items()
        ],
        total=sum(counts.values()),
        format_version=FORMAT_VERSION,
        skipped_tiers=[convert.enum_to_proto(t) for t in skipped],  # type: ignore[misc]
    )
    message.exported_at.CopyFrom(convert.timestamp_of(exported_at))
    return message


# --- the checksum's item forms -------------------------------------------------------

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
    """IEEE-754 bits as big-endian hex: exact in every language, unlike decimal text. Both
    zeros and every NaN have one form, as JSON text keeps neither a zero's sign nor a NaN's
    payload."""
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
    """The JSON value the checksum covers, derived from the message's descriptor: its set
    fields by proto name, recursively. A field at its default is left out, so that adding a
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


def canonical_item(item: Message) -> bytes:
    """The bytes of `item-jcs-v1`: RFC 8785 (JCS) JSON of `canonical_value`, then a newline.
    JCS fixes key order, escaping and spacing; the value holds no float to format."""
    return rfc8785.dumps(canonical_value(item)) + b"\n"


_ITEM_FORMS: dict[str, Callable[[pb.MemoryItem], bytes]] = {
    CHECKSUM_FORMAT: canonical_item,
}


class Checksum:
    """The running sha256 over items, in stream order, in one checksum format."""

    def __init__(self, checksum_format: str = CHECKSUM_FORMAT) -> None:
        self.format = checksum_format
        self._form = _ITEM_FORMS[checksum_format]
        self._sha = hashlib.sha256()
        self.count = 0

    def add(self, item: pb.MemoryItem) -> None:
        self._sha.update(self._form(item))
        self.count += 1

    def hexdigest(self) -> str:
        return self._sha.hexdigest()

    def trailer(self) -> pb.ExportTrailer:
        return pb.ExportTrailer(
            item_count=self.count, checksum_sha256=self.hexdigest(), checksum_format=self.format
        )


# --- writing and receiving -------------------------------------------------------------


async def frame(
    header: pb.ExportHeader, items: AsyncIterable[pb.MemoryItem]
) -> AsyncIterator[pb.ExportResponse]:
    """The stream: the header, every item as it comes, the trailer."""
    yield pb.ExportResponse(header=header)
    checksum = Checksum()
    async for item in items:
        checksum.add(item)
        yield pb.ExportResponse(item=item)
    yield pb.ExportResponse(trailer=checksum.trailer())


@dataclass
class Received:
    header: pb.ExportHeader | None
    items: list[pb.MemoryItem]
    # False only when the trailer carries no checksum (and none was required).
    verified: bool


class Receiver:
    """Collects a received stream and checks it: nothing after the trailer, at most
    `max_items` items, then (in `finish`) the trailer's count and checksum. The header is
    informative; `header_first` makes it required as the first message. Every failure is
    InvalidArgument naming the field at fault."""

    def __init__(
        self,
        max_items: int | None = None,
        *,
        header_first: bool = False,
        checksum_required: bool = False,
    ) -> None:
        self._max_items = max_items
        self._header_first = header_first
        self._checksum_required = checksum_required
        self._header: pb.ExportHeader | None = None
        self._items: list[pb.MemoryItem] = []
        self._trailer: pb.ExportTrailer | None = None
        self._started = False

    def add(self, message: pb.ExportResponse | pb.ImportRequest) -> None:
        if self._trailer is not None:
            raise InvalidArgument.of("trailer", "must be the last message of the stream")
        kind = message.WhichOneof("payload")
        if self._header_first and not self._started and kind != "header":
            raise InvalidArgument.of("header", "must be the first message of the stream")
        self._started = True
        if kind == "item":
            if self._max_items is not None and len(self._items) >= self._max_items:
                raise InvalidArgument.of("item", f"at most {self._max_items:,} items per import")
            self._items.append(message.item)
        elif kind == "trailer":
            self._trailer = message.trailer
        elif kind == "header":
            self._header = message.header

    def finish(self) -> Received:
        trailer = self._trailer
        if trailer is None:
            raise InvalidArgument.of("trailer", "is required: it ends a complete export")
        if trailer.item_count != len(self._items):
            raise InvalidArgument.of(
                "trailer.item_count", f"says {trailer.item_count} items; {len(self._items)} arrived"
            )
        verified = bool(trailer.checksum_sha256)
        if not verified and self._checksum_required:
            raise InvalidArgument.of("trailer.checksum_sha256", "is required")
        if verified:
            if trailer.checksum_format not in _ITEM_FORMS:
                known = ", ".join(repr(f) for f in _ITEM_FORMS)
                raise InvalidArgument.of(
                    "trailer.checksum_format",
                    f"unknown {echo(trailer.checksum_format)!r}; use one of {known}",
                )
            checksum = Checksum(trailer.checksum_format)
            for item in self._items:
                checksum.add(item)
            if trailer.checksum_sha256 != checksum.hexdigest():
                raise InvalidArgument.of(
                    "trailer.checksum_sha256",
                    "does not match the items received; nothing was written",
                )
        return Received(self._header, self._items, verified)


def import_request(message: pb.ExportResponse) -> pb.ImportRequest:
    """The Import message carrying an Export message's payload (no scope)."""
    request = pb.ImportRequest()
    kind = message.WhichOneof("payload")
    if kind == "header":
        request.header.CopyFrom(message.header)
    elif kind == "item":
        request.item.CopyFrom(message.item)
    elif kind == "trailer":
        request.trailer.CopyFrom(message.trailer)
    return request


# --- JSON lines ----------------------------------------------------------------------


class NotAnExportLine(ValueError):
    """A line that is not one ExportResponse in proto JSON."""


def to_json_line(message: pb.ExportResponse) -> str:
    """One message in proto JSON on one line (no newline): files hold one per line."""
    return json.dumps(json_format.MessageToDict(message), separators=(",", ":"))


def from_json_line(line: str) -> pb.ExportResponse:
    try:
        return json_format.ParseDict(json.loads(line), pb.ExportResponse())
    except (ValueError, json_format.ParseError) as err:
        raise NotAnExportLine(str(err)) from err
