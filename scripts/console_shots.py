"""Screenshots of each console page for docs/console.md (`make console-shots`).

    PYTHONPATH=service:. .venv/bin/python scripts/console_shots.py docs/console

Starts an in-process memoryd with API keys (the real MiniLM embedder), seeds it as the
console's browser tests do (tests/support/console_stack.py), serves the console, and has Debian's
chromium (through Playwright; never a downloaded browser) take one PNG per page.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

import grpc
import uvicorn
from playwright.async_api import Page, async_playwright
from tests.support.clock import MovableClock
from tests.support.console_stack import Stack, _Server, seed
from tests.support.grants import new_key
from tests.support.redis_server import free_port

from memoryd.app import build_app
from memoryd.console.app import Console, create_app
from memoryd.console.service import Service
from memoryd.settings import MetricsSettings, Settings
from memoryd.transport.server import MemorydServer

WIDTH, HEIGHT = 1280, 860


class _Running:
    """Only what `seed` uses of a RunningServer: the channel."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel


async def shots(out: Path, data: Path) -> list[Path]:
    keys = data / "keys.jsonl"
    settings = Settings(
        data_dir=data / "data",
        listen="127.0.0.1:0",
        metrics=MetricsSettings(listen="127.0.0.1:0"),
        auth={"keys_file": keys},
    )
    app = await build_app(settings)
    server = MemorydServer(settings, app)
    port = await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    console = Console(
        Service(f"127.0.0.1:{port}"),
        metrics_url=f"http://127.0.0.1:{server.metrics_port}/metrics",
    )
    stack = Stack(
        _Running(channel),  # type: ignore[arg-type]
        console,
        admin=new_key(keys, "acme", "admin"),
        reader=new_key(keys, "acme", "reader"),
        agent=new_key(keys, "acme", "agent", ("ana",)),
        other_admin=new_key(keys, "globex", "admin"),
        clock=MovableClock(),
    )
    await seed(stack)
    web_port = free_port()
    web = _Server(uvicorn.Config(create_app(console), host="127.0.0.1", port=web_port,
                                 access_log=False, log_config=None))  # fmt: skip
    task = asyncio.create_task(web.serve())
    await web.up.wait()
    base = f"http://127.0.0.1:{web_port}"
    written: list[Path] = []
    try:
        async with async_playwright() as p:
            chromium = shutil.which("chromium") or "/usr/bin/chromium"
            browser = await p.chromium.launch(executable_path=chromium, headless=True)
            context = await browser.new_context(
                base_url=base, viewport={"width": WIDTH, "height": HEIGHT}
            )
            page = await context.new_page()

            async def shot(name: str) -> None:
                path = out / f"{name}.png"
                await page.screenshot(path=str(path), full_page=True)
                written.append(path)

            await page.goto("/signin")
            await shot("signin")
            await sign_in(page, stack.admin)
            await shot("overview")
            await page.goto("/users/ana")
            await shot("user")
            await page.get_by_text("ana said hello").click()
            await shot("memory")
            await page.goto("/users/ana/graph")
            await shot("graph")
            await page.goto("/users/ana/ask?q=skiing+preferences&budget=300")
            await shot("ask")
            await page.goto("/users/bob")
            async with page.expect_download() as download:
                await page.get_by_role("link", name="Export (JSONL)").click()
            exported = data / "bob.jsonl"
            await (await download.value).save_as(exported)
            await page.goto("/users/bob/erase")
            await page.get_by_label("Type the user id").fill("bob")
            await shot("erase")
            await page.get_by_role("button", name="Erase this user").click()
            await shot("erased")
            await page.goto("/users/bob/import")
            await page.get_by_label("Export file (JSONL)").set_input_files(exported)
            await shot("import")
            await page.get_by_role("button", name="Import this file").click()
            await shot("imported")
            await page.goto("/health")
            await page.goto("/health")  # the second read shows the call rate
            await shot("health")
            await browser.close()
    finally:
        web.should_exit = True
        await task
        await console.service.close()
        await channel.close(None)
        await server.stop(grace_s=0)
    return written


async def sign_in(page: Page, key: str) -> None:
    await page.get_by_label("API key or JWT").fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url("**/")


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/console")
    out.mkdir(parents=True, exist_ok=True)
    data = Path(tempfile.mkdtemp(prefix="memoryd-shots-"))
    (data / "keys.jsonl").touch()
    for path in asyncio.run(shots(out, data)):
        print(path)


if __name__ == "__main__":
    main()
