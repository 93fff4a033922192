"""The CLI's client commands (export, import, prune, usage) against a running server."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest

from conftest import RunningServer, ServerFactory
from memoryd.client_commands import add_client_commands, run_client_command
from memoryd.v1 import memory_pb2 as pb
from rpc import scope


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="memoryd")
    add_client_commands(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(list(argv))


def target(s: RunningServer) -> str:
    return f"127.0.0.1:{s.port}"


async def run(*argv: str) -> int | None:
    # A sync gRPC client must not block the event loop that serves the server.
    return await asyncio.to_thread(run_client_command, parse(*argv))


async def fill(s: RunningServer, user: str) -> None:
    for content in ("User likes jazz", "User owns a bicycle", "User reads Borges"):
        await s.stub.Add(pb.AddRequest(scope=scope(user), tier=pb.TIER_LONG_TERM, content=content))
    await s.stub.Add(
        pb.AddRequest(scope=scope(user), tier=pb.TIER_PERSONA, key="name", content="Ana")
    )


async def test_export_to_a_file_import_into_another_user_and_see_it_in_usage(
    start_server: ServerFactory, user_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = await start_server()
    await fill(s, user_id)
    dump = tmp_path / "dump.jsonl"

    assert await run("export", "--target", target(s), "--user", user_id, "-o", str(dump)) == 0
    lines = [json.loads(line) for line in dump.read_text().splitlines()]
    assert "header" in lines[0] and "trailer" in lines[-1]
    assert sum("item" in line for line in lines) == 4
    assert "exported 4 items" in capsys.readouterr().err

    other = f"{user_id}-copy"
    assert await run("import", "--target", target(s), "--user", other, str(dump)) == 0
    assert "imported 4 items, skipped 0 (checksum verified)" in capsys.readouterr().out

    assert await run("usage", "--target", target(s), "--user", other) == 0
    table = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line}
    assert table["long_term"][1] == "3" and table["long_term"][2] == "10,000"
    assert table["persona"][1] == "1"
    assert table["quota"] == ["quota", "profile:", "default"]


async def test_export_of_named_tiers_holds_only_those(
    start_server: ServerFactory, user_id: str, tmp_path: Path
) -> None:
    s = await start_server()
    await fill(s, user_id)
    dump = tmp_path / "persona.jsonl"
    argv = ("export", "--target", target(s), "--user", user_id, "--tiers", "persona")
    assert await run(*argv, "-o", str(dump)) == 0
    lines = [json.loads(x) for x in dump.read_text().splitlines()]
    items = [line["item"] for line in lines if "item" in line]
    assert [i["tier"] for i in items] == ["TIER_PERSONA"]


async def test_prune_dry_run_reports_a_count_and_changes_nothing(
    start_server: ServerFactory, user_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    s = await start_server()
    await fill(s, user_id)
    argv = ("prune", "--target", target(s), "--user", user_id, "--tiers", "long_term")
    assert await run(*argv, "--strategy", "all", "--dry-run") == 0
    assert "would delete 3" in capsys.readouterr().out

    assert await run(*argv, "--strategy", "oldest_percent", "--percent", "50") == 0
    assert "deleted 2" in capsys.readouterr().out
    reply = await s.stub.Usage(pb.UsageRequest(scope=scope(user_id)))
    assert [t.count for t in reply.tiers if t.tier == pb.TIER_LONG_TERM] == [1]


async def test_a_refused_call_prints_the_status_and_exits_1(
    start_server: ServerFactory, user_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    s = await start_server()
    argv = ("prune", "--target", target(s), "--user", user_id, "--strategy", "by_filter")
    assert await run(*argv) == 1  # BY_FILTER needs at least one filter
    err = capsys.readouterr().err
    assert err.startswith("memoryd prune: INVALID_ARGUMENT: ") and "filters" in err


async def test_an_unreachable_server_prints_unavailable_and_exits_1(
    user_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Port 1 on loopback: nothing listens there.
    assert await run("usage", "--target", "127.0.0.1:1", "--user", user_id) == 1
    assert capsys.readouterr().err.startswith("memoryd usage: UNAVAILABLE: ")


async def test_a_corrupted_export_file_is_refused_with_its_line(
    start_server: ServerFactory, user_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = await start_server()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"header": {}}\nnot json\n')
    assert await run("import", "--target", target(s), "--user", user_id, str(bad)) == 1
    assert f"{bad}:2: not an export line" in capsys.readouterr().err


def test_commands_of_others_are_left_alone() -> None:
    assert run_client_command(argparse.Namespace(command="serve")) is None
