"""The CLI's client commands (export, import, prune, usage) against a running server, and
the progress display of the long commands."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import re
from pathlib import Path

import pytest

from memoryd.cli.client_commands import add_client_commands, run_client_command
from memoryd.cli.main import _parser as main_parser
from memoryd.cli.main import main
from memoryd.cli.progress import Progress
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.clock import MovableClock
from tests.support.rpc import scope


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
    assert lines[-1]["trailer"]["checksumFormat"] == "item-jcs-v1"
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


# -- progress on stderr --


def without_export_time(data: bytes) -> bytes:
    """The export, but for the header's exported_at (the server's wall clock)."""
    return re.sub(rb'"exportedAt":"[^"]*"', b'"exportedAt":""', data, count=1)


async def test_export_to_stdout_is_the_file_byte_for_byte_and_importable(
    start_server: ServerFactory, user_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = await start_server()
    await fill(s, user_id)
    dump = tmp_path / "dump.jsonl"
    assert await run("export", "--target", target(s), "--user", user_id, "-o", str(dump)) == 0
    capsys.readouterr()

    assert await run("export", "--target", target(s), "--user", user_id) == 0
    captured = capsys.readouterr()
    file_bytes = without_export_time(dump.read_bytes())
    assert without_export_time(captured.out.encode()) == file_bytes
    assert "exported 4 items to stdout" in captured.err and "{" not in captured.err
    assert await run("export", "--target", target(s), "--user", user_id, "-o", "-") == 0
    assert without_export_time(capsys.readouterr().out.encode()) == file_bytes

    piped = tmp_path / "piped.jsonl"  # what `memoryd export > piped.jsonl` leaves
    piped.write_text(captured.out)
    other = f"{user_id}-piped"
    assert await run("import", "--target", target(s), "--user", other, str(piped)) == 0
    assert "imported 4 items, skipped 0 (checksum verified)" in capsys.readouterr().out


async def test_off_a_terminal_progress_is_plain_lines_ending_with_the_count(
    start_server: ServerFactory, user_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = await start_server()
    await fill(s, user_id)
    dump = tmp_path / "dump.jsonl"
    # pytest's captured stderr is not a terminal, as under cron, CI or a pipe.
    assert await run("export", "--target", target(s), "--user", user_id, "-o", str(dump)) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and err.endswith("\n")
    assert err.splitlines()[-1].startswith(f"exported 4 items to {dump} [")

    assert await run("import", "--target", target(s), "--user", f"{user_id}-2", str(dump)) == 0
    captured = capsys.readouterr()
    assert "\r" not in captured.err
    assert captured.err.splitlines()[-1].startswith("import: 4/4 items [")
    assert captured.out.startswith("imported 4 items")


async def test_no_progress_leaves_stderr_empty(
    start_server: ServerFactory, user_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = await start_server()
    await fill(s, user_id)
    dump = tmp_path / "dump.jsonl"
    argv = ("--target", target(s), "--user", user_id)
    assert await run("export", *argv, "--no-progress", "-o", str(dump)) == 0
    assert capsys.readouterr().err == ""
    assert await run("export", *argv, "-q") == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert without_export_time(captured.out.encode()) == without_export_time(dump.read_bytes())

    other = ("--target", target(s), "--user", f"{user_id}-2")
    assert await run("import", *other, "--no-progress", str(dump)) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.startswith("imported 4 items")


def test_the_cli_offers_no_progress_on_every_long_command() -> None:
    parser = main_parser()
    for argv in (
        ["export", "--user", "u"],
        ["import", "--user", "u", "f.jsonl"],
        ["backup"],
        ["restore"],
        ["reindex"],
    ):
        assert parser.parse_args([*argv, "--no-progress"]).no_progress is True
        assert parser.parse_args([*argv, "-q"]).no_progress is True
        assert parser.parse_args(argv).no_progress is False


def render(tty: bool, reports: list[tuple[float, int, int]], summary: str | None = None) -> str:
    """What a display writes for `(seconds since start, done, total)` reports."""
    clock = MovableClock(0.0)
    out = io.StringIO()
    with Progress("export", "items", stream=out, tty=tty, columns=100, clock=clock) as bar:
        for at, done, total in reports:
            clock.now = at
            bar(done, total)
        bar.close(summary)
    return out.getvalue()


def test_on_a_terminal_a_bar_is_redrawn_in_place_with_count_percent_rate_and_eta() -> None:
    text = render(True, [(0.0, 0, 1000), (1.0, 100, 1000), (2.0, 500, 1000), (4.0, 1000, 1000)])
    frames = text.split("\r")[1:]
    # four frames, a blank one erasing the bar, then the final line in its place
    assert len(frames) == 6
    assert frames[0].startswith("export:   0%|") and "| 0/1000 [00:00<?, ?items/s]" in frames[0]
    half = frames[2]
    assert half.startswith("export:  50%|") and "| 500/1000 " in half
    assert "[00:02<00:02, 250.00items/s]" in half  # 500 items in 2 s: 250/s, 500 left: 2 s
    bar = half.split("|")[1]
    assert bar.count("#") == len(bar) // 2
    assert frames[3].startswith("export: 100%|") and "| 1000/1000 " in frames[3]
    assert {len(f) for f in frames[:4]} == {100}  # the bar fills what the numbers leave
    assert frames[4].strip() == ""
    assert frames[5] == "export: 1,000/1,000 items [00:04, 250 items/s]\n"


def test_on_a_terminal_frames_are_throttled_but_the_final_line_is_not() -> None:
    reports = [(0.0, i, 1000) for i in range(1000)]  # a thousand reports in no time
    text = render(True, reports, summary="exported 1,000 items")
    frames = text.split("\r")[1:]
    assert len(frames) == 3  # one frame, the erasing blank, the final line
    assert frames[-1] == "exported 1,000 items [00:00]\n"


def test_off_a_terminal_a_short_job_prints_only_its_final_line() -> None:
    text = render(False, [(0.0, 0, 4), (0.1, 2, 4), (0.2, 4, 4)], summary="exported 4 items")
    assert text == "exported 4 items [00:00, 20 items/s]\n"


def test_off_a_terminal_a_long_job_prints_a_few_plain_lines() -> None:
    reports = [(0.0, 0, 1000)] + [(i / 10, i * 10, 1000) for i in range(1, 101)]  # 10 s
    lines = render(False, reports).splitlines(keepends=True)
    assert "\r" not in "".join(lines) and all(line.endswith("\n") for line in lines)
    assert 2 <= len(lines) <= 4  # milestones at least 5 s apart, then the final line
    assert lines[0] == "export: 500/1,000 items (50%) [00:05<00:05, 100 items/s]\n"
    assert lines[-1] == "export: 1,000/1,000 items [00:10, 100 items/s]\n"


def test_an_unknown_or_zero_total_shows_the_count_alone() -> None:
    for total in (0, -1):
        text = render(True, [(0.0, 0, total), (2.0, 30, total)])
        assert "%" not in text and "<" not in text and "|" not in text
        assert "\rexport: 30items [00:02, 15.00items/s]" in text
        assert text.endswith("\rexport: 30 items [00:02, 15 items/s]\n")
        assert render(False, [(0.0, 0, total), (60.0, 30, total)]) == (
            "export: 30 items [01:00, 0.5 items/s]\n"
        )
    empty = render(False, [(0.0, 0, 0)], summary="exported 0 items")
    assert empty == "exported 0 items [00:00]\n"
    # More done than the total announced (items added meanwhile): a count, not 120 %.
    assert render(False, [(0.0, 0, 100), (1.0, 120, 100)]).startswith("export: 120 items [")
    on_terminal = render(True, [(0.0, 0, 100), (1.0, 120, 100)]).split("\r")
    assert on_terminal[2].startswith("export: 120items [00:01,") and "%" not in on_terminal[2]


def test_a_disabled_display_writes_nothing() -> None:
    out = io.StringIO()
    with Progress("export", "items", enabled=False, stream=out, tty=True) as bar:
        bar(1, 2)
        assert bar.total == 2
        bar.close("exported 2 items")
    assert out.getvalue() == ""


def test_a_failure_ends_the_bar_line_without_a_summary() -> None:
    out = io.StringIO()
    with pytest.raises(RuntimeError), Progress("export", "items", stream=out, tty=True) as bar:
        bar(1, 2)
        raise RuntimeError("boom")
    text = out.getvalue()
    assert text.startswith("\rexport:  50%|") and text.endswith("\n") and text.count("\n") == 1
    bar(2, 2)  # a late report (another thread) after the end is ignored
    assert out.getvalue() == text


def test_a_wait_after_the_last_item_is_said_at_once_then_replaced_by_the_final_line() -> None:
    for tty in (False, True):
        clock = MovableClock(0.0)
        out = io.StringIO()
        with Progress("import", "items", stream=out, tty=tty, columns=100, clock=clock) as bar:
            bar(0, 4)
            bar(4, 4)
            bar.wait("sent; memoryd is verifying and storing them")
            waiting = out.getvalue()
            clock.now = 6.0  # the server's work: no milestone line, no frame meanwhile
            bar.close("imported 4 items")
        said = "import: 4/4 items sent; memoryd is verifying and storing them"
        if tty:
            assert waiting.endswith(f"\r{said} ...")
            final = out.getvalue().removeprefix(waiting)
            # Over the waiting line, blanking its rest.
            line = "imported 4 items [00:06, 0.7 items/s]".ljust(len(said) + 4)
            assert final == f"\r{line}\n"
        else:
            assert waiting == f"{said}\n"
            assert out.getvalue() == f"{said}\nimported 4 items [00:06, 0.7 items/s]\n"


async def test_import_says_while_the_server_verifies_and_stores(
    start_server: ServerFactory, user_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = await start_server()
    await fill(s, user_id)
    dump = tmp_path / "dump.jsonl"
    assert await run("export", "--target", target(s), "--user", user_id, "-o", str(dump)) == 0
    capsys.readouterr()
    assert await run("import", "--target", target(s), "--user", f"{user_id}-2", str(dump)) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "import: 4/4 items sent; memoryd is verifying and storing them"
    assert err[-1].startswith("import: 4/4 items [")


SHARED_FLAGS = {"--target", "--user", "--api-key", "--tls", "--tls-ca", "--tls-cert", "--tls-key"}


def _visible_flags(command: str) -> set[str]:
    parser = main_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    return {
        flag
        for action in commands[command]._actions
        if action.help != argparse.SUPPRESS
        for flag in action.option_strings
    }


def test_the_client_commands_and_mcp_spell_their_shared_flags_alike() -> None:
    for command in ("export", "import", "prune", "usage", "mcp"):
        assert _visible_flags(command) >= SHARED_FLAGS, command
        # The old spellings work but are not offered.
        assert not {"--user-id", "--ca-cert", "--client-cert", "--client-key"} & _visible_flags(
            command
        )


def test_the_old_spellings_still_mean_the_same() -> None:
    old = ["--user-id", "u1", "--ca-cert", "ca.pem", "--client-cert", "c.pem"]
    old += ["--client-key", "k.pem"]
    usage = main_parser().parse_args(["usage", *old])
    assert (usage.user, usage.tls_ca, usage.tls_cert, usage.tls_key) == (
        "u1",
        Path("ca.pem"),
        Path("c.pem"),
        Path("k.pem"),
    )
    new = ["--user", "u1", "--tls-ca", "ca.pem", "--tls-cert", "c.pem", "--tls-key", "k.pem"]
    for argv in (old, new):
        mcp = main_parser().parse_args(["mcp", *argv])
        assert (mcp.user_id, mcp.ca_cert, mcp.client_cert, mcp.client_key) == (
            "u1",
            "ca.pem",
            "c.pem",
            "k.pem",
        )


def test_a_client_command_without_a_user_says_so_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_client_command(parse("usage", "--target", "127.0.0.1:1")) == 2
    assert capsys.readouterr().err == "memoryd usage: --user required\n"


def test_a_key_s_profile_is_named_for_what_it_sets_its_rate_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MEMORYD_DATA_DIR", str(tmp_path / "data"))
    keys = ["keys", "create", "--keys-file", str(tmp_path / "keys.jsonl"), "--tenant", "acme"]
    assert main([*keys, "--role", "agent", "--rate-profile", "free"]) == 0
    assert "rate limits of quota profile free" in capsys.readouterr().err
    # The old spelling still works, out of the help.
    assert main([*keys, "--role", "reader", "--profile", "pro"]) == 0
    capsys.readouterr()
    assert main(["keys", "list", "--keys-file", str(tmp_path / "keys.jsonl")]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[4] == "rate_profile"
    assert [row.split()[4] for row in rows] == ["free", "pro"]
    create = next(
        a for a in main_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices["keys"]
    create_help = (
        next(a for a in create._actions if isinstance(a, argparse._SubParsersAction))
        .choices["create"]
        .format_help()
    )
    assert "--rate-profile" in create_help and "--profile " not in create_help
