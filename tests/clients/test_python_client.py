"""The Python client against a live memoryd: one snake_case method per RPC, keyword
arguments in, results with attributes out, typed exceptions with the server's details.

The server runs in-process on the test's event loop, so the sync client is driven from a
worker thread (a blocking call on the loop's thread would stall the server)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import grpc
import pytest

from memoryd.cli.client_commands import add_client_commands, run_client_command
from memoryd.transport import export_stream
from memoryd.v1 import memory_pb2 as server_pb
from memoryd_client import (
    AsyncMemoryClient,
    Episode,
    EpisodeStep,
    InvalidArgument,
    Kind,
    MemoryClient,
    MemoryItem,
    Operation,
    QuotaExceeded,
    Tier,
    export_format,
    pb,
)
from memoryd_client._requests import ScopeArgs
from tests.conftest import RunningServer, ServerFactory
from tests.support.limited_server import limited_server


def target(s: RunningServer) -> str:
    return f"127.0.0.1:{s.port}"


async def test_sync_client_adds_retrieves_gets_and_deletes(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()

    def scenario() -> None:
        with MemoryClient(target(s)) as client:
            added = client.add(
                user_id=user_id,
                content="Ana prefers window seats on long flights",
                tier="long_term",
                kind="preference",
                metadata={"src": "chat"},
                importance=0.8,
            )
            assert added.operation is Operation.ADD and added.tier is Tier.LONG_TERM
            client.add(user_id=user_id, content="Ana owns a red bicycle", tier=Tier.LONG_TERM)

            hits = client.retrieve(user_id=user_id, query="which seat does Ana like?", top_k=1)
            assert len(hits.items) == 1
            best = hits.items[0]
            assert best.id == added.memory_id
            assert best.content == "Ana prefers window seats on long flights"
            assert best.kind is Kind.PREFERENCE and best.metadata == {"src": "chat"}
            assert 0 < best.score <= 1 and best.created_at is not None
            assert isinstance(best.proto, pb.MemoryItem)  # the wire type stays at hand

            got = client.get(user_id=user_id, tier="long_term", ids=[added.memory_id, "nope"])
            assert [i.id for i in got.items] == [added.memory_id] and got.missing == ["nope"]
            deleted = client.delete(user_id=user_id, tier="long_term", ids=[added.memory_id])
            assert deleted.deleted_count == 1
            users = client.list_users(user_id_prefix=user_id, page_size=1)
            assert [u.user_id for u in users.users] == [user_id]
            assert (
                client.list_memories(user_id=user_id).items[0].content == "Ana owns a red bicycle"
            )

    await asyncio.to_thread(scenario)


async def test_tiers_and_kinds_by_any_name_or_number(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    async with AsyncMemoryClient(target(s)) as client:
        scope: ScopeArgs = {"user_id": user_id, "agent_id": "planner", "task_id": "trip"}
        for tier in ("working", "WORKING", "TIER_WORKING", "working", pb.TIER_WORKING):
            await client.add(**scope, tier=tier, key="step", content=f"tier given as {tier!r}")
        got = await client.get(**scope, tier=Tier.WORKING, keys=["step"])
        assert got.items[0].content == f"tier given as {pb.TIER_WORKING!r}"
        assert got.items[0].tier is Tier.WORKING
        with pytest.raises(ValueError, match="unknown tier 'longterm'; one of working"):
            await client.add(user_id=user_id, content="x", tier="longterm")


async def test_async_client_covers_every_rpc(start_server: ServerFactory, user_id: str) -> None:
    s = await start_server()
    async with AsyncMemoryClient(target(s)) as client:
        await client.add(user_id=user_id, tier="persona", key="name", content="Ana")
        await client.add(user_id=user_id, content="Ana is learning the cello", kind=Kind.FACT)
        session: ScopeArgs = {"user_id": user_id, "session_id": "chat-1"}
        await client.add(**session, tier="short_term", role="user", content="I moved to Lyon")
        episode = Episode("book a flight", [EpisodeStep("search", "3 fares")], "booked", True)
        await client.add(user_id=user_id, agent_id="planner", tier="episodic", episode=episode)
        await client.add(user_id=user_id, tier="structured", document={"city": "Lyon", "n": 2})

        hits = await client.retrieve(user_id=user_id, query="what instrument?", top_k=3)
        assert hits.items[0].content == "Ana is learning the cello"
        rendered = await client.render_context(user_id=user_id, query="cello")
        assert rendered.context.startswith("<memory>") and rendered.item_count >= 1
        assert '<item tier="persona" kind="fact">name: Ana</item>' in rendered.context

        usage = await client.usage(user_id=user_id)
        long_term = usage.tier("long_term")
        assert long_term is not None and long_term.count >= 1 and long_term.max_count > 0

        explained = await client.retrieve(user_id=user_id, query="cello", top_k=1, explain=True)
        assert explained.items[0].explain is not None
        assert explained.items[0].explain.final == explained.items[0].score
        listed = await client.list_users(user_id_prefix=user_id)
        assert [u.user_id for u in listed.users] == [user_id] and not listed.next_page_token
        assert listed.users[0].last_active_at is not None
        page = await client.list_memories(user_id=user_id, tiers=["persona"], page_size=10)
        assert [(m.tier, m.key, m.content) for m in page.items] == [(Tier.PERSONA, "name", "Ana")]

        ended = await client.end_session(**session)
        # This server has no extractor configured: the session is closed all the same.
        assert ended.extraction_skipped and ended.extraction_skipped_reason
        assert ended.messages_processed >= 1

        dry = await client.prune(
            user_id=user_id,
            strategy="oldest_percent",
            percent=100,
            tiers=["long_term"],
            dry_run=True,
        )
        assert dry.dry_run and dry.per_tier.get(Tier.LONG_TERM) == long_term.count
        everything = await client.prune(user_id=user_id, strategy="all")
        assert everything.deleted_count >= 4
        assert (await client.retrieve(user_id=user_id, query="cello")).items == []
        assert await client.health() == "SERVING"


async def test_errors_are_typed_and_carry_the_details(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(long_term={"max_memories": 1})
    async with AsyncMemoryClient(target(s)) as client:
        with pytest.raises(InvalidArgument) as bad:
            await client.retrieve(user_id=user_id, query="q", top_k=500, request_id="req-42")
        assert bad.value.field == "top_k" and bad.value.reason == "INVALID_ARGUMENT"
        assert bad.value.request_id == "req-42"
        assert [v.field for v in bad.value.violations] == ["top_k"]

        await client.add(user_id=user_id, content="the only memory that fits")
        with pytest.raises(QuotaExceeded) as full:
            await client.add(user_id=user_id, content="one too many")
        assert full.value.max == 1 and full.value.limit_name == "long_term.max_memories"
        assert full.value.request_id  # a fresh x-request-id was sent


async def test_export_checks_the_stream_and_import_restores_it(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    async with AsyncMemoryClient(target(s)) as client:
        for content in ("User likes jazz", "User owns a bicycle", "Naïve <b>é</b> \u2028 😀"):
            await client.add(user_id=user_id, content=content, metadata={"😀": "\uff21", "é": "1"})
        await client.add(user_id=user_id, tier="persona", key="name", content="Ana")

        stream = client.export(user_id=user_id)
        items: list[MemoryItem] = [item async for item in stream]
        assert len(items) == 4 and stream.verified  # the client recomputed the checksum
        assert stream.trailer is not None and stream.trailer.checksum_format == "item-jcs-v1"

        copy = f"{user_id}-copy"
        restored = await client.import_(user_id=copy, items=items)
        assert (restored.imported_count, restored.checksum_verified) == (4, True)
        again = await client.import_(user_id=copy, items=items)
        assert (again.imported_count, again.skipped_count) == (0, 4)  # idempotent by id
        contents = {i.content async for i in client.export(user_id=copy)}
        assert contents == {i.content for i in items}


def _cli(*argv: str) -> int | None:
    import argparse

    parser = argparse.ArgumentParser(prog="memoryd")
    add_client_commands(parser.add_subparsers(dest="command", required=True))
    return run_client_command(parser.parse_args(list(argv)))


async def test_export_files_move_between_the_client_and_the_memoryd_cli(
    start_server: ServerFactory, user_id: str, tmp_path: Path
) -> None:
    s = await start_server()

    def scenario() -> None:
        with MemoryClient(target(s)) as client:
            client.add(user_id=user_id, content="Ana flies to Lyon on Friday", importance=0.3)
            client.add(user_id=user_id, tier="persona", key="city", content="Lyon")
            by_client = tmp_path / "by-client.jsonl"
            with by_client.open("w") as out:
                assert (
                    export_format.write_jsonl(client.export(user_id=user_id).messages(), out) == 2
                )
            # the server's own CLI imports the client's file, checksum verified
            assert _cli("import", "--target", target(s), "--user", "u2", "-q", str(by_client)) == 0

            by_cli = tmp_path / "by-cli.jsonl"
            assert (
                _cli("export", "--target", target(s), "--user", "u2", "-q", "-o", str(by_cli)) == 0
            )
            with by_cli.open() as lines:
                reply = client.import_(user_id="u3", messages=export_format.read_jsonl(lines))
            assert (reply.imported_count, reply.checksum_verified) == (2, True)
            assert json.loads(by_cli.read_text().splitlines()[-1])["trailer"]["itemCount"] == "2"

    await asyncio.to_thread(scenario)


def _documented_golden_vector() -> tuple[list[str], list[bytes]]:
    """The golden vector of docs/reference/export-format.md: its export lines (items) and
    the canonical forms it states for them."""
    doc = (Path(__file__).resolve().parents[2] / "docs/reference/export-format.md").read_text()
    lines = [line for line in doc.splitlines() if line.startswith('{"item":')]
    text_block = doc.split("```text\n", 1)[1].split("```", 1)[0]
    forms = [(line + "\n").encode("utf-8") for line in text_block.splitlines()]
    return lines, forms


def test_the_client_checksum_is_the_documented_golden_vector() -> None:
    lines, forms = _documented_golden_vector()
    items = [export_format.from_json_line(line).item for line in lines]
    assert len(items) == len(forms) == 2
    assert [export_format.canonical_item(i) for i in items] == forms
    assert export_format.checksum(items[:1]) == (
        "1e050c6d7553703131186e61f7db0b0f632c92e0827f7942546e99a663bcbf51"
    )
    assert export_format.checksum(items) == (
        "e72ce64de91cf9cebe8ce2f9f7f4de4dc5fb594a5ef716eeea79f1f121da8a49"
    )
    out = io.StringIO()
    export_format.write_jsonl([pb.ExportResponse(item=i) for i in items], out)
    assert [export_format.from_json_line(x).item for x in out.getvalue().splitlines()] == items


def test_the_client_and_the_server_give_identical_canonical_bytes() -> None:
    """The client re-implements the server's form (it cannot import the server): the same
    bytes for the golden items, an empty item and items setting a few fields."""
    lines, _ = _documented_golden_vector()
    client_items = [export_format.from_json_line(line).item for line in lines]
    client_items += [
        pb.MemoryItem(),
        pb.MemoryItem(id="m1", content="x", metadata={"k": ""}, importance=float("-inf")),
        pb.MemoryItem(
            tier=pb.TIER_EPISODIC,
            episode=pb.Episode(steps=[pb.EpisodeStep(), pb.EpisodeStep(action="a")]),
            history=[pb.FactVersion()],
        ),
    ]
    for item in client_items:
        server_item = server_pb.MemoryItem.FromString(item.SerializeToString())
        assert export_format.canonical_item(item) == export_stream.canonical_item(server_item)
    server_items = [server_pb.MemoryItem.FromString(i.SerializeToString()) for i in client_items]
    server_sum = export_stream.Checksum()
    for server_item in server_items:
        server_sum.add(server_item)
    assert export_format.checksum(client_items) == server_sum.hexdigest()


async def test_add_batch_reports_each_item_sync_and_async(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    items: list[dict[str, object]] = [
        {"user_id": user_id, "content": "Ana plays chess on Sundays"},
        {"user_id": user_id, "content": "  "},
        {"user_id": user_id, "content": "ana plays CHESS on sundays"},
    ]

    def scenario() -> None:
        with MemoryClient(target(s)) as client:
            batch = client.add_batch(items)  # type: ignore[arg-type]
            first, empty, repeat = batch.results
            assert first.ok and first.operation is Operation.ADD and first.tier is Tier.LONG_TERM
            assert empty.error is not None and not empty.ok
            assert empty.error.code is grpc.StatusCode.INVALID_ARGUMENT
            assert (empty.error.field, empty.error.reason) == ("content", "INVALID_ARGUMENT")
            assert repeat.operation is Operation.DEDUPLICATED
            assert repeat.memory_id == first.memory_id
            assert (batch.succeeded_count, batch.failed_count) == (2, 1)

    await asyncio.to_thread(scenario)
    async with AsyncMemoryClient(target(s)) as client:
        batch = await client.add_batch(
            [{"user_id": user_id, "content": f"Async fact {i}", "kind": "fact"} for i in range(3)]
        )
        assert [r.index for r in batch.results] == [0, 1, 2]
        assert all(r.ok and r.operation is Operation.ADD for r in batch.results)
        with pytest.raises(InvalidArgument):
            await client.add_batch([])


async def test_a_rate_limited_query_says_so_in_both_clients_results(
    start_server: ServerFactory, tmp_path: Path, user_id: str
) -> None:
    limited = await limited_server(start_server, tmp_path, user_id)
    async with AsyncMemoryClient(limited.target, api_key=limited.key) as client:
        await client.add(user_id=user_id, content="Ana prefers window seats", tier="long_term")
        answered = await client.retrieve(user_id=user_id, query="seats", tiers=["long_term"])
        assert answered.rate_limited is False and len(answered.items) == 1
        # Past the one query a minute: no items, and the result says why.
        limited_hits = await client.retrieve(user_id=user_id, query="bikes", tiers=["long_term"])
        assert limited_hits.rate_limited is True and limited_hits.items == []
        rendered = await client.render_context(user_id=user_id, query="bikes")
        assert rendered.rate_limited is True and rendered.context == ""

    def sync_scenario() -> None:
        with MemoryClient(limited.target, api_key=limited.key) as client:
            hits = client.retrieve(user_id=user_id, query="trains", tiers=["long_term"])
            assert hits.rate_limited is True and hits.items == []
            assert client.render_context(user_id=user_id, query="trains").rate_limited is True

    await asyncio.to_thread(sync_scenario)
