"""Export and Import streams for both clients: checking what the server sends, and
shaping what the caller passes into the Import stream."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from memoryd_client import export_format
from memoryd_client.errors import ExportCorrupt
from memoryd_client.results import MemoryItem
from memoryd_client.v1 import memory_pb2 as pb

ItemLike = MemoryItem | pb.MemoryItem


class ExportChecker:
    """Follows an Export stream: keeps the header, sums the items and, at the trailer,
    checks their count and checksum. Anything after the trailer, or no trailer, is
    ExportCorrupt."""

    def __init__(self) -> None:
        self.header: pb.ExportHeader | None = None
        self.trailer: pb.ExportTrailer | None = None
        self.verified = False
        self._checksum = export_format.Checksum()

    def see(self, message: pb.ExportResponse) -> None:
        if self.trailer is not None:
            raise ExportCorrupt("a message follows the trailer")
        kind = message.WhichOneof("payload")
        if kind == "header":
            self.header = message.header
        elif kind == "item":
            self._checksum.add(message.item)
        elif kind == "trailer":
            self.trailer = message.trailer
            self._check(message.trailer)

    def _check(self, trailer: pb.ExportTrailer) -> None:
        if trailer.item_count != self._checksum.count:
            raise ExportCorrupt(
                f"the trailer counts {trailer.item_count} items; {self._checksum.count} arrived"
            )
        if not trailer.checksum_sha256:
            return  # the server sent no checksum: nothing to verify
        if trailer.checksum_format != export_format.CHECKSUM_FORMAT:
            return  # a format this client cannot compute: left unverified
        if trailer.checksum_sha256 != self._checksum.hexdigest():
            raise ExportCorrupt("the checksum does not match the items received")
        self.verified = True

    def finish(self) -> None:
        if self.trailer is None:
            raise ExportCorrupt("the stream ended without its trailer")


class ExportStreamBase:
    """What `ExportStream` and `AsyncExportStream` share: the call, its checker and what
    the checker has seen so far."""

    def __init__(self, call: Any, request_id: str) -> None:
        self._call = call
        self._request_id = request_id
        self._checker = ExportChecker()
        self._started = False

    @property
    def header(self) -> pb.ExportHeader | None:
        return self._checker.header

    @property
    def trailer(self) -> pb.ExportTrailer | None:
        return self._checker.trailer

    @property
    def verified(self) -> bool:
        return self._checker.verified

    def _start(self) -> None:
        if self._started:
            raise RuntimeError("an export stream can be read once")
        self._started = True

    def cancel(self) -> None:
        self._call.cancel()


def import_requests(
    user_id: str,
    items: Iterable[ItemLike] | None,
    messages: Iterable[pb.ExportResponse] | None,
) -> Iterator[pb.ImportRequest]:
    """The Import stream: either `items`, framed with a fresh header and trailer, or the
    `messages` of an export (e.g. read from a file) as they are, trailer included."""
    if (items is None) == (messages is None):
        raise ValueError("pass exactly one of items= or messages=")
    if items is not None:
        yield from export_format.frame(
            user_id, (i.proto if isinstance(i, MemoryItem) else i for i in items)
        )
        return
    assert messages is not None
    first = True
    for message in messages:
        request = pb.ImportRequest()
        kind = message.WhichOneof("payload")
        if kind is not None:
            getattr(request, kind).CopyFrom(getattr(message, kind))
        if first:
            request.scope.user_id = user_id
            first = False
        yield request
