"""Export and Import: a user's memories of every tier leave as a checksummed stream and
come back with their ids, content, metadata and times; importing is idempotent by id."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from memoryd.transport.export_stream import canonical_item
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer
from tests.support.rpc import bad_request_fields, rpc_error, scope

ALL_TIERS = [pb.TIER_WORKING, pb.TIER_SHORT_TERM, pb.TIER_LONG_TERM, pb.TIER_PERSONA]


@dataclass
class Export:
    header: pb.ExportHeader
    items: list[pb.MemoryItem]
    trailer: pb.ExportTrailer

    def by_id(self) -> dict[str, pb.MemoryItem]:
        return {i.id: i for i in self.items}

    def contents(self) -> set[str]:
        return {i.content for i in self.items}


async def export(s: RunningServer, user: str, tiers: Iterable[pb.Tier.ValueType] = ()) -> Export:
    header: list[pb.ExportHeader] = []
    items: list[pb.MemoryItem] = []
    trailers: list[pb.ExportTrailer] = []
    async for reply in s.stub.Export(pb.ExportRequest(scope=scope(user), tiers=list(tiers))):
        kind = reply.WhichOneof("payload")
        assert not trailers, "nothing follows the trailer"
        if kind == "header":
            assert not header and not items, "the header comes first, once"
            header.append(reply.header)
        elif kind == "item":
            items.append(reply.item)
        else:
            trailers.append(reply.trailer)
    assert len(header) == 1 and len(trailers) == 1
    return Export(header[0], items, trailers[0])


def checksum(items: Iterable[pb.MemoryItem]) -> str:
    """sha256 over the items' canonical forms (docs/reference/export-format.md)."""
    return hashlib.sha256(b"".join(canonical_item(i) for i in items)).hexdigest()


def stream(user: str, dump: Export, **trailer: Any) -> Iterator[pb.ImportRequest]:
    """The dump as an Import stream; `trailer` overrides fields of its trailer."""
    yield pb.ImportRequest(scope=scope(user), header=dump.header)
    for item in dump.items:
        yield pb.ImportRequest(item=item)
    last = pb.ExportTrailer()
    last.CopyFrom(dump.trailer)
    for field, value in trailer.items():
        setattr(last, field, value)
    yield pb.ImportRequest(trailer=last)


async def fill(s: RunningServer, user: str) -> None:
    """Two working entries, two messages, three long-term memories (one soft-deleted),
    a persona fact; then wait for the messages' durable long-term copies."""
    task = scope(user, agent_id="planner", task_id="trip")
    session = scope(user, session_id="chat-1")
    for key, value in [("destination", "Paris"), ("budget", "1200 EUR")]:
        await s.stub.Add(
            pb.AddRequest(
                scope=task, tier=pb.TIER_WORKING, key=key, content=value, metadata={"step": "1"}
            )
        )
    await s.stub.Add(
        pb.AddRequest(scope=session, tier=pb.TIER_SHORT_TERM, content="Book me a flight")
    )
    await s.stub.Add(
        pb.AddRequest(
            scope=session,
            tier=pb.TIER_SHORT_TERM,
            content="Which dates?",
            role=pb.ROLE_ASSISTANT,
            metadata={"turn": "2"},
        )
    )
    ids = []
    for content in ["User prefers window seats", "User is vegetarian", "User lives in Lyon"]:
        reply = await s.stub.Add(
            pb.AddRequest(
                scope=scope(user),
                tier=pb.TIER_LONG_TERM,
                content=content,
                kind=pb.KIND_PREFERENCE,
                metadata={"source": "chat"},
                importance=0.8,
            )
        )
        ids.append(reply.memory_id)
    await s.stub.Delete(pb.DeleteRequest(scope=scope(user), tier=pb.TIER_LONG_TERM, ids=ids[2:]))
    await s.stub.Add(
        pb.AddRequest(scope=scope(user), tier=pb.TIER_PERSONA, key="name", content="Ana")
    )
    await s.app.copier.drain()


async def prune_everything(s: RunningServer, user: str) -> None:
    everywhere = scope(user, agent_id="planner", task_id="trip", session_id="chat-1")
    await s.stub.Prune(
        pb.PruneRequest(scope=everywhere, tiers=ALL_TIERS, strategy=pb.PRUNE_STRATEGY_ALL)
    )


def counts(header: pb.ExportHeader) -> dict[int, int]:
    return {c.tier: c.count for c in header.counts}


async def test_export_has_a_header_every_item_of_every_tier_and_a_trailer(
    memoryd: RunningServer, user_id: str
) -> None:
    await fill(memoryd, user_id)
    dump = await export(memoryd, user_id)
    assert dump.header.user_id == user_id and dump.header.format_version == "1"
    assert dump.header.exported_at.seconds > 0
    # Long-term holds the three memories and the two messages' durable copies.
    assert counts(dump.header) == {
        pb.TIER_WORKING: 2,
        pb.TIER_SHORT_TERM: 2,
        pb.TIER_LONG_TERM: 5,
        pb.TIER_PERSONA: 1,
        pb.TIER_EPISODIC: 0,
        pb.TIER_ENTITY: 0,
        pb.TIER_STRUCTURED: 0,
    }
    assert dump.header.total == len(dump.items) == dump.trailer.item_count == 10
    assert dump.trailer.checksum_format == "item-jcs-v1"
    assert dump.trailer.checksum_sha256 == checksum(dump.items)
    [deleted] = [i for i in dump.items if i.deleted]
    assert deleted.content == "User lives in Lyon" and deleted.tier == pb.TIER_LONG_TERM
    working = {i.key: i for i in dump.items if i.tier == pb.TIER_WORKING}
    assert working["budget"].content == "1200 EUR"
    assert (working["budget"].agent_id, working["budget"].task_id) == ("planner", "trip")
    assert dict(working["budget"].metadata) == {"step": "1"}
    messages = [i for i in dump.items if i.tier == pb.TIER_SHORT_TERM]
    assert [m.content for m in messages] == ["Book me a flight", "Which dates?"]
    assert messages[1].role == pb.ROLE_ASSISTANT and messages[1].session_id == "chat-1"
    assert all(i.created_at.seconds > 0 for i in dump.items)


async def test_export_of_named_tiers_holds_only_those(memoryd: RunningServer, user_id: str) -> None:
    await fill(memoryd, user_id)
    dump = await export(memoryd, user_id, tiers=[pb.TIER_PERSONA])
    assert counts(dump.header) == {pb.TIER_PERSONA: 1}
    assert [(i.key, i.content) for i in dump.items] == [("name", "Ana")]


async def test_export_prune_import_export_gives_back_the_same_items(
    memoryd: RunningServer, user_id: str
) -> None:
    await fill(memoryd, user_id)
    before = await export(memoryd, user_id)
    await prune_everything(memoryd, user_id)
    assert (await export(memoryd, user_id)).header.total == 0

    reply = await memoryd.stub.Import(stream(user_id, before))
    assert (reply.imported_count, reply.skipped_count) == (10, 0)
    assert reply.checksum_verified

    after = await export(memoryd, user_id)
    assert after.by_id() == before.by_id()  # ids, content, metadata, times, flags
    assert counts(after.header) == counts(before.header)


async def test_importing_twice_skips_everything_the_second_time(
    memoryd: RunningServer, user_id: str
) -> None:
    await fill(memoryd, user_id)
    dump = await export(memoryd, user_id)
    await prune_everything(memoryd, user_id)
    await memoryd.stub.Import(stream(user_id, dump))
    again = await memoryd.stub.Import(stream(user_id, dump))
    assert (again.imported_count, again.skipped_count) == (0, 10)
    assert (await export(memoryd, user_id)).by_id() == dump.by_id()


async def test_a_corrupted_checksum_is_refused_and_nothing_is_written(
    memoryd: RunningServer, user_id: str
) -> None:
    await fill(memoryd, user_id)
    dump = await export(memoryd, user_id)
    await prune_everything(memoryd, user_id)
    err = await rpc_error(memoryd.stub.Import(stream(user_id, dump, checksum_sha256="0" * 64)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["trailer.checksum_sha256"]
    assert (await export(memoryd, user_id)).header.total == 0


async def test_a_checksum_without_its_format_is_refused(
    memoryd: RunningServer, user_id: str
) -> None:
    """A checksum says which item form it was computed over; one that says none is not
    guessed at (nothing was ever written that way)."""
    await fill(memoryd, user_id)
    dump = await export(memoryd, user_id)
    await prune_everything(memoryd, user_id)
    err = await rpc_error(memoryd.stub.Import(stream(user_id, dump, checksum_format="")))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["trailer.checksum_format"]
    assert (await export(memoryd, user_id)).header.total == 0


async def test_a_checksum_in_an_unknown_format_is_refused(
    memoryd: RunningServer, user_id: str
) -> None:
    await fill(memoryd, user_id)
    dump = await export(memoryd, user_id)
    err = await rpc_error(memoryd.stub.Import(stream(user_id, dump, checksum_format="crc32")))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["trailer.checksum_format"]


async def test_an_item_changed_in_transit_fails_the_checksum(
    memoryd: RunningServer, user_id: str
) -> None:
    await fill(memoryd, user_id)
    dump = await export(memoryd, user_id)
    dump.items[0].content = "tampered"
    err = await rpc_error(memoryd.stub.Import(stream(user_id, dump)))
    assert bad_request_fields(err) == ["trailer.checksum_sha256"]


async def test_import_without_a_user_id_is_refused(memoryd: RunningServer) -> None:
    requests = iter([pb.ImportRequest(trailer=pb.ExportTrailer())])
    err = await rpc_error(memoryd.stub.Import(requests))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "scope.user_id" in bad_request_fields(err)


async def test_an_item_without_a_tier_is_refused(memoryd: RunningServer, user_id: str) -> None:
    items = [pb.MemoryItem(id="1f0e6a3c-0000-4000-8000-000000000001", content="x")]
    trailer = pb.ExportTrailer(
        item_count=1, checksum_sha256=checksum(items), checksum_format="item-jcs-v1"
    )
    dump = Export(pb.ExportHeader(), items, trailer)
    err = await rpc_error(memoryd.stub.Import(stream(user_id, dump)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["item.tier"]


async def test_a_stream_without_its_trailer_is_refused(
    memoryd: RunningServer, user_id: str
) -> None:
    await fill(memoryd, user_id)
    dump = await export(memoryd, user_id)
    truncated = list(stream(user_id, dump))[:-1]
    err = await rpc_error(memoryd.stub.Import(iter(truncated)))
    assert bad_request_fields(err) == ["trailer"]


async def test_an_import_over_the_item_limit_is_refused(start_server: object, user_id: str) -> None:
    s = await start_server(limits={"max_import_items": 3})  # type: ignore[operator]
    await fill(s, user_id)
    dump = await export(s, user_id)
    err = await rpc_error(s.stub.Import(stream(user_id, dump)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["item"]


async def test_the_export_of_a_user_with_nothing_is_empty(
    memoryd: RunningServer, user_id: str
) -> None:
    dump = await export(memoryd, user_id)
    assert (dump.header.total, dump.items, dump.trailer.item_count) == (0, [], 0)
    assert dump.trailer.checksum_sha256 == hashlib.sha256().hexdigest()


async def test_a_users_export_never_holds_another_users_items(
    memoryd: RunningServer, user_id: str
) -> None:
    other = f"{user_id}-b"
    await fill(memoryd, user_id)
    await memoryd.stub.Add(
        pb.AddRequest(scope=scope(other), tier=pb.TIER_LONG_TERM, content="B likes tea")
    )
    theirs = await export(memoryd, other)
    assert theirs.contents() == {"B likes tea"}
    assert not set(theirs.by_id()) & set((await export(memoryd, user_id)).by_id())


async def test_imported_items_belong_to_the_importing_user(
    memoryd: RunningServer, user_id: str
) -> None:
    other = f"{user_id}-b"
    await fill(memoryd, user_id)
    mine = await export(memoryd, user_id)
    reply = await memoryd.stub.Import(stream(other, mine))
    assert (reply.imported_count, reply.skipped_count) == (10, 0)
    copied = await export(memoryd, other)
    assert copied.contents() == mine.contents()
    assert (await export(memoryd, user_id)).by_id() == mine.by_id()  # A is untouched
    again = await memoryd.stub.Import(stream(other, mine))
    assert (again.imported_count, again.skipped_count) == (0, 10)
