"""`memoryd mcp` driven by the official MCP SDK's own client, over stdio and streamable
HTTP, in front of a live memoryd."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from conftest import ServerFactory
from memoryd.v1 import memory_pb2 as pb
from redis_server import free_port

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
    assert proc.returncode == 2 and b"--user-id required" in err
