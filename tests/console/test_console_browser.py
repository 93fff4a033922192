"""The console in a real browser (Debian's chromium driven by Playwright) against a real
memoryd and console: sign in, browse, ask with explain, erase with proof, a reader refused
the erase form, a forged cross-site POST refused, a second tenant's users never listed,
every action reachable from the keyboard. Skipped where chromium is not installed
(`make chromium`, which .ci/run calls)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import uvicorn
from playwright.async_api import Browser, Page, async_playwright, expect
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from memoryd.v1 import memory_pb2 as pb
from tests.support.console_stack import Stack, _Server, served, stack
from tests.support.redis_server import free_port

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(
    shutil.which("chromium") is None, reason="chromium is not installed (make chromium)"
)
__all__ = ["served", "stack"]  # the fixtures, imported for the tests below


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    """One chromium for the module (a launch costs about a second of CPU); each test
    signs in in a context of its own (cookies and storage of their own)."""
    async with async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield chromium
        await chromium.close()


async def sign_in(browser: Browser, stack: Stack, key: str) -> Page:
    context = await browser.new_context(base_url=stack.url)
    page = await context.new_page()
    await page.goto("/")
    assert page.url.endswith("/signin")
    await page.get_by_label("API key or JWT").fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{stack.url}/")
    return page


async def test_sign_in_browse_a_user_a_memory_and_the_entity_graph(
    served: Stack, browser: Browser
) -> None:
    page = await sign_in(browser, served, served.admin)
    await expect(page.get_by_role("link", name="ana", exact=True)).to_be_visible()
    await expect(page.get_by_role("link", name="bob", exact=True)).to_be_visible()
    await page.get_by_role("link", name="ana", exact=True).click()
    await expect(page.get_by_role("heading", name="User ana")).to_be_visible()
    await expect(page.get_by_text("ana enjoys skiing")).to_be_visible()
    await page.get_by_label("Kind").select_option("message")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.get_by_text("ana said hello")).to_be_visible()
    await expect(page.get_by_text("ana enjoys skiing")).to_have_count(0)
    await page.get_by_text("ana said hello").click()
    await expect(page.get_by_role("heading", name="Memory")).to_be_visible()
    await expect(page.get_by_text("channel=chat")).to_be_visible()
    await page.get_by_role("link", name="← ana").click()
    await page.get_by_role("link", name="Entity graph").click()
    await expect(page.locator("svg.graph .node")).to_have_count(3)
    await expect(page.locator("svg.graph .edge.closed")).to_have_count(1)
    await expect(page.get_by_text("Ana — lives_in → Lyon", exact=True)).to_be_visible()


async def test_ask_shows_the_hits_with_their_scores_and_the_memory_block(
    served: Stack, browser: Browser
) -> None:
    page = await sign_in(browser, served, served.reader)
    await page.goto("/users/ana/ask")
    await page.get_by_label("Query").fill("skiing preferences")
    await page.get_by_label("Token budget").fill("300")
    await page.get_by_role("button", name="Ask").click()
    first = page.locator("table.hits tbody tr").first
    await expect(first).to_contain_text("ana enjoys skiing")
    await expect(page.locator("pre.block")).to_contain_text("<memory>")
    await expect(page.locator(".tokens")).to_contain_text("tokens")


async def test_an_admin_erases_a_user_and_sees_the_proof(served: Stack, browser: Browser) -> None:
    page = await sign_in(browser, served, served.admin)
    await page.goto("/users/bob/erase")
    button = page.get_by_role("button", name="Erase this user")
    await page.get_by_label("Type the user id").fill("bob")
    await button.click()
    await expect(page.get_by_role("heading", name="User bob erased")).to_be_visible()
    await expect(page.locator("ul.removed")).to_contain_text("long_term: 1")
    await expect(page.get_by_role("status")).to_have_text("Nothing of this user is left.")
    await page.goto("/")
    await expect(page.get_by_role("link", name="bob", exact=True)).to_have_count(0)


async def test_an_admin_exports_erases_and_imports_a_user_back(
    served: Stack, browser: Browser, tmp_path: Path
) -> None:
    page = await sign_in(browser, served, served.admin)
    await page.goto("/users/bob")
    async with page.expect_download() as download:
        await page.get_by_role("link", name="Export (JSONL)").click()
    exported = tmp_path / "bob.jsonl"
    await (await download.value).save_as(exported)
    await page.goto("/users/bob/erase")
    await page.get_by_label("Type the user id").fill("bob")
    await page.get_by_role("button", name="Erase this user").click()
    await expect(page.get_by_role("status")).to_have_text("Nothing of this user is left.")

    await page.goto("/users/bob")
    await page.get_by_role("link", name="Import (JSONL)…").click()
    await page.get_by_label("Export file (JSONL)").set_input_files(exported)
    await page.get_by_role("button", name="Import this file").click()
    await expect(page.get_by_role("status")).to_contain_text("Imported 1, skipped 0")
    await expect(page.locator("ul.sent")).to_contain_text("long_term: 1")
    await page.get_by_role("link", name="See the memories").click()
    await expect(page.get_by_text("bob owns a red bicycle")).to_be_visible()


async def test_a_live_session_is_picked_from_the_keyboard_and_its_window_listed(
    served: Stack, browser: Browser
) -> None:
    chat = pb.Scope(user_id="ana", session_id="s1")
    await served.caller(served.admin).Add(
        pb.AddRequest(scope=chat, tier=pb.TIER_SHORT_TERM, content="hola Rumi", role=pb.ROLE_USER)
    )
    page = await sign_in(browser, served, served.reader)
    await page.goto("/users/ana")
    window = page.locator("table.memories tbody tr td:first-child", has_text="short_term")
    await expect(window).to_have_count(0)  # a session's window only when it is picked
    for _ in range(60):
        await page.keyboard.press("Tab")
        if await page.evaluate("() => document.activeElement.innerText") == "s1":
            break
    await page.keyboard.press("Enter")
    await page.wait_for_url("**/users/ana?session=s1")
    await expect(window).to_have_count(1)
    await expect(page.locator("table.memories tbody tr", has_text="short_term")).to_contain_text(
        "hola Rumi"
    )


async def test_a_reader_is_refused_the_import_form(served: Stack, browser: Browser) -> None:
    page = await sign_in(browser, served, served.reader)
    await page.goto("/users/ana/import")
    await expect(page.get_by_role("alert")).to_contain_text("may not import")
    await expect(page.get_by_role("button", name="Import this file")).to_have_count(0)


async def test_a_reader_is_refused_the_erase_form(served: Stack, browser: Browser) -> None:
    page = await sign_in(browser, served, served.reader)
    await page.goto("/users/ana/erase")
    await expect(page.get_by_role("alert")).to_contain_text("may not erase")
    await expect(page.get_by_role("button", name="Erase this user")).to_have_count(0)


async def test_a_forged_cross_site_post_is_refused(served: Stack, browser: Browser) -> None:
    """A page on another site whose form posts to the console's erase URL, submitted in the
    browser where the operator is signed in: no session cookie goes with it (SameSite
    Strict) and it has no CSRF token; the user is still there."""
    target = f"{served.url}/users/bob/erase"
    evil = Starlette(
        routes=[
            Route(
                "/",
                lambda request: HTMLResponse(
                    f'<form method="post" action="{target}"><input name="confirm" value="bob">'
                    '<button type="submit">Win a prize</button></form>'
                ),
            )
        ]
    )
    port = free_port()
    server = _Server(uvicorn.Config(evil, host="127.0.0.1", port=port, log_config=None))
    task = asyncio.create_task(server.serve())
    await server.up.wait()
    try:
        page = await sign_in(browser, served, served.admin)
        await page.goto(f"http://localhost:{port}/")  # another site than 127.0.0.1
        await page.get_by_role("button", name="Win a prize").click()
        await page.wait_for_load_state()
        assert "erased" not in (await page.content())
        await page.goto(f"{served.url}/users/bob")
        await expect(page.get_by_text("bob owns a red bicycle")).to_be_visible()
    finally:
        server.should_exit = True
        await task


async def test_a_second_tenants_users_are_never_listed(served: Stack, browser: Browser) -> None:
    page = await sign_in(browser, served, served.other_admin)
    await expect(page.get_by_role("link", name="zoe", exact=True)).to_be_visible()
    await expect(page.locator("table.users tbody tr")).to_have_count(1)
    await page.get_by_label("User id starts with").fill("a")
    await page.get_by_role("button", name="Search").click()
    await expect(page.get_by_text("No users match.")).to_be_visible()


async def test_every_action_of_a_user_is_reachable_from_the_keyboard(
    served: Stack, browser: Browser
) -> None:
    page = await sign_in(browser, served, served.admin)
    await page.goto("/users/ana")
    reached: list[str] = []
    for _ in range(40):
        await page.keyboard.press("Tab")
        reached.append(
            await page.evaluate(
                "() => (document.activeElement.innerText || document.activeElement.name || '')"
            )
        )
    for action in ("Overview", "Health", "Sign out", "Ask as the agent", "Entity graph",
                   "Export (JSONL)", "Import (JSONL)…", "Erase…", "Filter"):  # fmt: skip
        assert action in reached, (action, reached)
    # Enter on a focused link follows it.
    await page.goto("/users/ana")
    while (await page.evaluate("() => document.activeElement.innerText")) != "Ask as the agent":
        await page.keyboard.press("Tab")
    await page.keyboard.press("Enter")
    await page.wait_for_url("**/users/ana/ask")
