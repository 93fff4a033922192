"""A real memoryd (API keys on, two tenants) and a real console in front of it, both on
the test's event loop: the console served by uvicorn on a free port (for the browser), or
called in process through httpx's ASGI transport (for the app's own tests)."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from cryptography.fernet import Fernet

from memoryd.console.app import Console, create_app
from memoryd.console.service import Service
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.clock import MovableClock
from tests.support.grants import Caller, new_key
from tests.support.redis_server import free_port

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
# The key every console of a test shares (as replicas given one --session-key-file).
SESSION_KEY = Fernet.generate_key()


@dataclass
class Stack:
    memoryd: RunningServer
    console: Console
    admin: str  # acme's admin key
    reader: str  # acme's reader key
    agent: str  # an agent key of acme bound to user "ana"
    other_admin: str  # globex's admin key
    clock: MovableClock  # the console's
    url: str = ""

    def caller(self, key: str) -> Caller:
        return Caller(self.memoryd.channel, key)


async def seed(stack: Stack) -> None:
    """acme: ana (long-term facts, a persona fact, entities with an open and a closed
    relation) and bob; globex: zoe. Every memory of acme names its owner."""
    acme = stack.caller(stack.admin)
    lt, me = pb.TIER_LONG_TERM, pb.Scope(user_id="ana")
    for content in ("ana enjoys skiing", "ana avoids advanced slopes", "ana drinks green tea"):
        await acme.Add(pb.AddRequest(scope=me, tier=lt, content=content, kind=pb.KIND_PREFERENCE))
    await acme.Add(
        pb.AddRequest(scope=me, tier=lt, content="ana said hello", kind=pb.KIND_MESSAGE,
                      metadata={"channel": "chat"})
    )  # fmt: skip
    await acme.Add(pb.AddRequest(scope=me, tier=pb.TIER_PERSONA, key="city", content="Lyon"))
    for name, kind in (("Ana", "person"), ("Lyon", "place"), ("Paris", "place")):
        await acme.Add(
            pb.AddRequest(scope=me, tier=pb.TIER_ENTITY, entity=pb.Entity(name=name, type=kind))
        )
    for city in ("Paris", "Lyon"):  # the second closes the first
        relation = pb.Relation(subject="Ana", predicate="lives_in", object=city)
        await acme.Add(pb.AddRequest(scope=me, tier=pb.TIER_ENTITY, relation=relation))
    await acme.Add(
        pb.AddRequest(scope=pb.Scope(user_id="bob"), tier=lt, content="bob owns a red bicycle")
    )
    globex = stack.caller(stack.other_admin)
    await globex.Add(
        pb.AddRequest(scope=pb.Scope(user_id="zoe"), tier=lt, content="zoe plays cello")
    )


async def start_stack(start_server: ServerFactory, tmp_path: Path) -> Stack:
    keys = tmp_path / "keys.jsonl"
    keys.touch()
    memoryd = await start_server(auth={"keys_file": keys})
    clock = MovableClock()
    console = Console(
        Service(f"127.0.0.1:{memoryd.port}"),
        metrics_url=f"http://127.0.0.1:{memoryd.server.metrics_port}/metrics",
        session_key=SESSION_KEY,
        clock=clock,
    )
    stack = Stack(
        memoryd,
        console,
        admin=new_key(keys, "acme", "admin"),
        reader=new_key(keys, "acme", "reader"),
        agent=new_key(keys, "acme", "agent", ("ana",)),
        other_admin=new_key(keys, "globex", "admin"),
        clock=clock,
    )
    await seed(stack)
    return stack


@pytest.fixture
async def stack(start_server: ServerFactory, tmp_path: Path) -> AsyncIterator[Stack]:
    s = await start_stack(start_server, tmp_path)
    yield s
    await s.console.service.close()


class _Server(uvicorn.Server):
    """uvicorn's server, saying when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.up = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.up.set()


@pytest.fixture
async def served(stack: Stack) -> AsyncIterator[Stack]:
    """The stack with the console listening on a free port (for a browser)."""
    port = free_port()
    config = uvicorn.Config(
        create_app(stack.console), host="127.0.0.1", port=port, access_log=False,
        log_config=None, lifespan="off",
    )  # fmt: skip
    server = _Server(config)
    task = asyncio.create_task(server.serve())
    await server.up.wait()
    stack.url = f"http://127.0.0.1:{port}"
    yield stack
    server.should_exit = True
    await task


async def web(stack: Stack) -> httpx.AsyncClient:
    """A client of the console app in process (its own cookie jar: one browser)."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(stack.console)),
        base_url="http://console.test",
        follow_redirects=False,
    )


async def signed_in(stack: Stack, key: str) -> httpx.AsyncClient:
    client = await web(stack)
    form = await client.get("/signin")
    reply = await client.post("/signin", data={"csrf": csrf_of(form.text), "credential": key})
    assert reply.status_code == 303 and reply.headers["location"] == "/", reply.text
    return client


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, "the page has no CSRF token"
    return found.group(1)
