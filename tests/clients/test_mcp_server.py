"""`memoryd mcp` driven by the official MCP SDK's own client, over stdio and streamable
HTTP, in front of a live memoryd."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from memoryd.v1 import memory_pb2 as pb
from memoryd_client import __version__
from tests.conftest import ServerFactory
from tests.support.limited_server import limited_server
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / p) for p in ("service", "clients/python"))
    return {**env, **extra}


def _text(result: Any) -> str:
    assert not result.is_error, result
    return "".join(part.text for part in result.content)


async def test_the_tools_and_the_memory_block_over_stdio(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    # Target and user from the environment, as an MCP host's config would set them.
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryd", "mcp"],
        env=_env(MEMORYD_TARGET=f"127.0.0.1:{s.port}", MEMORYD_USER_ID=user_id),
        cwd=str(ROOT),
    )
    async with Client(server) as client:
        listed = await client.list_tools()
        assert {t.name for t in listed.tools} == {"query_memory", "remember", "forget"}
        remember = next(t for t in listed.tools if t.name == "remember")
        assert set(remember.input_schema["required"]) == {"key", "value"}

        fact = {"key": "editor", "value": "Uses Neovim"}
        saved = json.loads(_text(await client.call_tool("remember", fact)))
        assert saved["status"] == "ok" and saved["operation"] == "add"

        block = _text(await client.call_tool("query_memory", {"query": "which editor?"}))
        assert '<item tier="persona" kind="fact">editor: Uses Neovim</item>' in block

        resources = await client.list_resources()
        assert "memory://context" in {str(r.uri) for r in resources.resources}
        read = await client.read_resource("memory://context")
        assert "editor: Uses Neovim" in read.contents[0].text  # type: ignore[union-attr]

        gone = json.loads(_text(await client.call_tool("forget", {"key": "editor"})))
        assert gone == {"status": "ok", "forgotten": 1}
        read = await client.read_resource("memory://context")
        assert read.contents[0].text == '<memory status="empty"></memory>'  # type: ignore[union-attr]

    # The fact really left memoryd.
    stored = await s.stub.Get(
        pb.GetRequest(scope=pb.Scope(user_id=user_id), tier=pb.TIER_PERSONA, keys=["editor"])
    )
    assert list(stored.missing) == ["editor"]


async def test_streamable_http_and_flags_instead_of_the_environment(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    port = free_port()
    argv = [sys.executable, "-m", "memoryd", "mcp", "--target", f"127.0.0.1:{s.port}"]
    argv += ["--user-id", user_id, "--http", f"127.0.0.1:{port}"]
    proc = await asyncio.create_subprocess_exec(
        *argv, env=_env(), cwd=str(ROOT), stderr=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stderr is not None
        while b"Uvicorn running" not in (line := await proc.stderr.readline()):
            assert line, "memoryd mcp --http exited before serving"
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            await client.call_tool("remember", {"key": "pet", "value": "Has a cat named Michi"})
            block = _text(await client.call_tool("query_memory", {"query": "pets", "top_k": 3}))
        assert "pet: Has a cat named Michi" in block
    finally:
        proc.terminate()
        await proc.wait()


async def test_without_a_user_it_refuses_to_start() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "memoryd",
        "mcp",
        "--target",
        "127.0.0.1:1",
        env=_env(),
        cwd=str(ROOT),
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2 and b"--user required" in err


@asynccontextmanager
async def mcp_over_http(*argv: str) -> AsyncIterator[tuple[int, list[bytes]]]:
    """`memoryd mcp ... --http HOST:PORT` running until the block ends: its port, and the
    stderr lines it wrote before serving."""
    port = free_port()
    host = next((a for a in argv if a.startswith("--http=")), "--http=127.0.0.1").split("=")[1]
    args = [a for a in argv if not a.startswith("--http=")]
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "memoryd", "mcp", *args, "--http", f"{host}:{port}"],
        env=_env(),
        cwd=str(ROOT),
        stderr=asyncio.subprocess.PIPE,
    )
    lines: list[bytes] = []
    try:
        assert proc.stderr is not None
        while b"Uvicorn running" not in (line := await proc.stderr.readline()):
            assert line, b"".join(lines).decode()
            lines.append(line)
        yield port, lines
    finally:
        proc.terminate()
        await proc.wait()


async def test_with_an_http_token_only_requests_bearing_it_are_served(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    flags = ("--target", f"127.0.0.1:{s.port}", "--user", user_id, "--http-token", "t0ken")
    async with mcp_over_http(*flags) as (port, _):
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx2.AsyncClient() as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                answer = await http.post(url, json={}, headers=headers)
                assert answer.status_code == 401
        bearer = httpx2.AsyncClient(headers={"Authorization": "Bearer t0ken"})
        async with bearer, Client(streamable_http_client(url, http_client=bearer)) as client:
            saved = await client.call_tool("remember", {"key": "pet", "value": "Has a cat"})
            assert json.loads(_text(saved))["status"] == "ok"


async def test_listening_beyond_loopback_without_a_token_warns_at_start(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    flags = ("--target", f"127.0.0.1:{s.port}", "--user", user_id, "--http=0.0.0.0")
    async with mcp_over_http(*flags) as (_, lines):
        said = b"".join(lines).decode()
    assert "WARNING" in said and "has no authentication" in said and "--http-token" in said
    async with mcp_over_http(*flags[:4]) as (_, lines):  # loopback: nothing to warn about
        assert b"no authentication" not in b"".join(lines)


async def test_server_info_names_memoryd_and_its_version(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryd", "mcp", "--target", f"127.0.0.1:{s.port}", "--user", user_id],
        env=_env(),
        cwd=str(ROOT),
    )
    async with Client(server) as client:
        info = client.server_info
        assert info is not None and info.name == "memoryd"
        assert info.version == __version__ != ""


async def test_a_missing_key_and_a_rate_limited_query_are_named_to_the_model(
    start_server: ServerFactory, tmp_path: Path, user_id: str
) -> None:
    limited = await limited_server(start_server, tmp_path, user_id)
    # The old spellings of the flags still work.
    argv = ["-m", "memoryd", "mcp", "--target", limited.target, "--user-id", user_id]
    keyless = StdioServerParameters(command=sys.executable, args=argv, env=_env(), cwd=str(ROOT))
    async with Client(keyless) as client:
        block = _text(await client.call_tool("query_memory", {"query": "pets"}))
    assert block.startswith('<memory status="error" reason="unauthenticated">')
    assert "this call needs a credential" in block and "MEMORYD_API_KEY" in block

    keyed = StdioServerParameters(
        command=sys.executable,
        args=argv,
        env=_env(MEMORYD_API_KEY=limited.key),
        cwd=str(ROOT),
    )
    async with Client(keyed) as client:
        # Nothing is stored: "empty"; then past the one query a minute: "rate_limited".
        empty = _text(await client.call_tool("query_memory", {"query": "a"}))
        assert empty == '<memory status="empty"></memory>'
        limited_block = _text(await client.call_tool("query_memory", {"query": "b"}))
    assert limited_block.startswith('<memory status="rate_limited">rate limited:')
