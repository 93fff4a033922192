"""The export stream: a header (counts), the items, a trailer (their count and checksum).

The Export RPC sends it, Import receives it, and backups and `memoryd export -o` store it
as JSON lines. This is the only module that frames the stream, computes its checksum or
encodes its lines; docs/reference/export-format.md specifies all three, so that clients in
other languages can write and check streams too.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import rfc8785
from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp

from memoryd.core.errors import InvalidArgument
from memoryd.core.models import Tier
from memoryd.transport import convert
from memoryd.v1 import memory_pb2 as pb

# header.format_version: the framing (header, items, trailer), independent of the checksum.
FORMAT_VERSION = "1"
# trailer.checksum_format of every stream written now.
CHECKSUM_FORMAT = "item-jcs-v1"
# A trailer without checksum_format: written before it existed; read, never written.
LEGACY_CHECKSUM_FORMAT = ""

_CANONICAL_NAN = "7fc00000"


def header(user_id: str, exported_at: float, counts: Mapping[Tier, int]) -> pb.ExportHeader:
    """The header: per tier counts and their total (informative; the trailer is checked)."""
    message = pb.ExportHeader(
        user_id=user_id,
        counts=[
            pb.TierCount(tier=convert.enum_to_proto(t), count=c)  # type: ignore[arg-type]
            for t, c in counts.items()
        ],
        total=sum(counts.values()),
        format_version=FORMAT_VERSION,
    )
    message.exported_at.FromNanoseconds(round(exported_at * 1e9))
    return message


# --- the checksum's item forms -------------------------------------------------------


def _float32(value: float) -> str:
    """The IEEE-754 binary32 bits, 8 lowercase hex digits: exact in every language, unlike
    decimal text. Both zeros and every NaN have one form, as JSON text cannot keep them."""
    if math.isnan(value):
        return _CANONICAL_NAN
    return struct.pack(">f", value if value != 0 else 0.0).hex()


def _enum(wrapper: Any, value: int) -> str | int:
    """The value's name in memory.proto; a number it does not name stays a number."""
    try:
        return str(wrapper.Name(value))
    except ValueError:
        return value


def _timestamp(item: pb.MemoryItem, field: str) -> dict[str, Any] | None:
    if not item.HasField(field):  # type: ignore[arg-type]
        return None
    ts: Timestamp = getattr(item, field)
    # int64 as a decimal string (as in proto JSON): exact beyond 2**53; int32 as a number.
    return {"seconds": str(ts.seconds), "nanos": ts.nanos}


def canonical_value(item: pb.MemoryItem) -> dict[str, Any]:
    """Every field of MemoryItem, always present, as the JSON value the checksum covers."""
    episode = None
    if item.HasField("episode"):
        episode = {
            "task": item.episode.task,
            "steps": [
                {"action": s.action, "observation": s.observation} for s in item.episode.steps
            ],
            "outcome": item.episode.outcome,
            "success": item.episode.success,
        }
    relation = None
    if item.HasField("relation"):
        relation = {
            "subject": item.relation.subject,
            "predicate": item.relation.predicate,
            "object": item.relation.object,
        }
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
        "episode": episode,
        "relation": relation,
        "document_json": item.document_json,
        "archived": item.archived,
        "deleted": item.deleted,
    }


def canonical_item(item: pb.MemoryItem) -> bytes:
    """The bytes of `item-jcs-v1`: RFC 8785 (JCS) JSON of `canonical_value`, then a newline.
    JCS fixes key order, escaping and spacing; the value holds no float to format."""
    return rfc8785.dumps(canonical_value(item)) + b"\n"


def _legacy_item(item: pb.MemoryItem) -> bytes:
    # Python's deterministic serialization; protobuf promises it in no other language.
    return item.SerializeToString(deterministic=True)


_ITEM_FORMS: dict[str, Callable[[pb.MemoryItem], bytes]] = {
    CHECKSUM_FORMAT: canonical_item,
    LEGACY_CHECKSUM_FORMAT: _legacy_item,
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
                    f"unknown {trailer.checksum_format!r}; use one of {known}",
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
