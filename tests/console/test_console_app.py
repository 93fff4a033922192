"""The console app in process (httpx through ASGI) against a real memoryd with API keys:
sign-in and sessions, the guards in front of every POST, the security headers, and what
each page shows. The browser suite (test_console_browser.py) drives the same pages."""

from __future__ import annotations

import logging

import httpx
import pytest
from cryptography.fernet import Fernet

from memoryd.console.app import CSP, Console, create_app
from memoryd.console.sessions import COOKIE
from memoryd.v1 import memory_pb2 as pb
from tests.support.console_stack import SESSION_KEY, Stack, csrf_of, signed_in, stack, web

__all__ = ["stack"]  # the fixture, imported for the tests below


def browser_of(console: Console, cookie: str) -> httpx.AsyncClient:
    """A client of `console` holding the session cookie `cookie`."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(console)),
        base_url="http://console.test",
        cookies={COOKIE: cookie},
    )


async def test_pages_need_a_sign_in_and_a_bad_credential_is_refused(stack: Stack) -> None:
    client = await web(stack)
    assert (await client.get("/")).headers["location"] == "/signin"
    form = await client.get("/signin")
    bad = await client.post("/signin", data={"csrf": csrf_of(form.text), "credential": "mk_nope"})
    assert bad.status_code == 401 and "does not accept this credential" in bad.text
    assert (await client.get("/")).status_code == 303


async def test_the_session_cookie_is_httponly_strict_and_holds_no_credential(
    stack: Stack,
) -> None:
    client = await web(stack)
    form = await client.get("/signin")
    reply = await client.post(
        "/signin", data={"csrf": csrf_of(form.text), "credential": stack.admin}
    )
    cookie = reply.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert stack.admin not in cookie
    # A new session id at sign-in: the pre-sign-in one is worth nothing.
    assert form.cookies[COOKIE] != reply.cookies[COOKIE]


async def test_every_answer_carries_the_security_headers(stack: Stack) -> None:
    client = await signed_in(stack, stack.admin)
    for path in ("/", "/signin", "/users/ana", "/static/console.css"):
        reply = await client.get(path)
        assert reply.headers["content-security-policy"] == CSP, path
        assert "script-src 'none'" in CSP and "default-src 'self'" in CSP
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["x-frame-options"] == "DENY"
        assert reply.headers["referrer-policy"] == "same-origin"
    page = (await client.get("/")).text
    assert "<script" not in page and "style=" not in page


async def test_the_overview_lists_the_tenants_users_with_usage_and_never_another_tenants(
    stack: Stack,
) -> None:
    client = await signed_in(stack, stack.admin)
    page = (await client.get("/")).text
    assert 'href="/users/ana"' in page and 'href="/users/bob"' in page
    assert "zoe" not in page
    assert "<meter" in page and 'low="80" high="95"' in page
    only_a = (await client.get("/", params={"q": "a"})).text
    assert 'href="/users/ana"' in only_a and 'href="/users/bob"' not in only_a
    other = await signed_in(stack, stack.other_admin)
    theirs = (await other.get("/")).text
    assert 'href="/users/zoe"' in theirs and "ana" not in theirs


async def test_the_overview_pages_through_users_with_the_tenants_totals(stack: Stack) -> None:
    client = await signed_in(stack, stack.admin)
    first = (await client.get("/", params={"size": "1"})).text
    assert 'href="/users/ana"' in first and 'href="/users/bob"' not in first
    # The totals are the tenant's, on every page: ana's 4 long-term memories and bob's 1.
    footer = first.split("<tfoot>")[1].split("</tfoot>")[0]
    assert "Tenant totals" in footer and "<td>5 · " in footer
    next_link = first.split('<a href="/?')[-1].split('"')[0].replace("&amp;", "&")
    second = (await client.get(f"/?{next_link}")).text
    assert 'href="/users/bob"' in second and 'href="/users/ana"' not in second
    assert "<td>5 · " in second.split("<tfoot>")[1]


async def test_a_users_page_lists_every_stored_tier_with_filters(stack: Stack) -> None:
    client = await signed_in(stack, stack.reader)
    page = (await client.get("/users/ana")).text
    for text in ("ana enjoys skiing", "Ana lives in Lyon", "<b>city</b>"):
        assert text in page, text
    messages = (await client.get("/users/ana", params={"kind": "message"})).text
    assert "ana said hello" in messages and "ana enjoys skiing" not in messages
    assert "<td>message</td>" in messages  # the source column
    assert (
        "<td>explicit add</td>"
        in (await client.get("/users/ana", params={"kind": "preference"})).text
    )
    by_meta = (await client.get("/users/ana", params={"meta": "channel=chat"})).text
    assert "ana said hello" in by_meta and "skiing" not in by_meta
    persona = (await client.get("/users/ana", params={"tier": "persona"})).text
    assert "<b>city</b>" in persona and "skiing" not in persona


async def test_a_users_live_session_and_task_are_listed_with_their_hot_memories(
    stack: Stack,
) -> None:
    # The conversation's long-term copy would list the message among the stored tiers:
    # not made here (it races the page otherwise).
    await stack.memoryd.app.copier.stop()
    acme = stack.caller(stack.admin)
    task = pb.Scope(user_id="ana", agent_id="planner", task_id="trip")
    await acme.Add(pb.AddRequest(scope=task, tier=pb.TIER_WORKING, key="seat", content="aisle"))
    chat = pb.Scope(user_id="ana", session_id="s1")
    await acme.Add(
        pb.AddRequest(scope=chat, tier=pb.TIER_SHORT_TERM, content="hola Rumi", role=pb.ROLE_USER)
    )
    client = await signed_in(stack, stack.reader)
    page = (await client.get("/users/ana")).text
    assert 'href="?session=s1"' in page and 'href="?task=trip&amp;agent=planner"' in page
    assert "hola Rumi" not in page and "aisle" not in page
    window = (await client.get("/users/ana", params={"session": "s1"})).text
    assert "<td>short_term</td>" in window and "hola Rumi" in window
    working = (await client.get("/users/ana", params={"task": "trip", "agent": "planner"})).text
    assert "<td>working</td>" in working and "<b>seat</b>: aisle" in working
    link = working.split('href="/users/ana/memories/working/')[1].split('"')[0]
    detail = await client.get(f"/users/ana/memories/working/{link.replace('&amp;', '&')}")
    assert detail.status_code == 200 and "aisle" in detail.text


async def test_a_memorys_detail_and_the_entity_graph(stack: Stack) -> None:
    client = await signed_in(stack, stack.reader)
    page = (await client.get("/users/ana", params={"tier": "persona"})).text
    link = page.split('href="/users/ana/memories/')[1].split('"')[0]
    detail = (await client.get(f"/users/ana/memories/{link}")).text
    assert "Lyon" in detail and "city" in detail
    picture = (await client.get("/users/ana/graph")).text
    assert "<svg" in picture and "Ana (person)" in picture
    assert 'class="edge closed"' in picture and "lives_in (closed)" in picture


async def test_ask_shows_hits_with_their_score_and_the_memory_block_with_its_tokens(
    stack: Stack,
) -> None:
    client = await signed_in(stack, stack.reader)
    page = (await client.get("/users/ana/ask", params={"q": "skiing", "budget": "200"})).text
    assert "ana enjoys skiing" in page
    assert "&lt;memory&gt;" in page and "tokens</span> of 200" in page


async def test_ask_shows_the_cosine_a_named_speaker_was_ranked_without(stack: Stack) -> None:
    acme = stack.caller(stack.admin)
    chat = pb.Scope(user_id="ana", session_id="trips")
    for turn in ("Thandiwe: Ha, of course you did.", "Thandiwe: Back from Marrakech!"):
        await acme.Add(
            pb.AddRequest(scope=chat, tier=pb.TIER_LONG_TERM, content=turn, kind=pb.KIND_MESSAGE)
        )
    client = await signed_in(stack, stack.reader)
    asked = {"q": "Which places has Thandiwe travelled to?"}
    page = (await client.get("/users/ana/ask", params=asked)).text
    assert "Back from Marrakech" in page and 'class="unnamed"' in page
    assert 'class="own"' in page  # the second turn's own text, without the first (ADR 0409)
    plain = (await client.get("/users/ana/ask", params={"q": "skiing"})).text
    assert "ana enjoys skiing" in plain and 'class="unnamed"' not in plain
    assert 'class="own"' not in plain


async def test_a_reader_gets_no_erase_form_and_its_forged_post_is_refused(stack: Stack) -> None:
    client = await signed_in(stack, stack.reader)
    form = await client.get("/users/ana/erase")
    assert form.status_code == 403 and "may not erase" in form.text
    assert 'name="confirm"' not in form.text
    token = csrf_of(form.text)  # the sign-out form's: a valid token of this session
    forged = await client.post("/users/ana/erase", data={"csrf": token, "confirm": "ana"})
    assert forged.status_code == 403
    admin = await signed_in(stack, stack.admin)
    assert "ana enjoys skiing" in (await admin.get("/users/ana")).text


async def test_a_post_without_the_sessions_csrf_token_or_from_another_site_is_refused(
    stack: Stack,
) -> None:
    client = await signed_in(stack, stack.admin)
    no_token = await client.post("/users/bob/erase", data={"confirm": "bob"})
    assert no_token.status_code == 403 and "CSRF" in no_token.text
    form = await client.get("/users/bob/erase")
    cross = await client.post(
        "/users/bob/erase",
        data={"csrf": csrf_of(form.text), "confirm": "bob"},
        headers={"origin": "https://evil.example"},
    )
    assert cross.status_code == 403
    stranger = await web(stack)  # no session at all (what SameSite=Strict leaves a forger)
    assert (await stranger.post("/users/bob/erase", data={"confirm": "bob"})).status_code == 403
    assert "bob owns a red bicycle" in (await client.get("/users/bob")).text


async def test_erase_needs_the_typed_user_id_then_proves_nothing_is_left(stack: Stack) -> None:
    client = await signed_in(stack, stack.admin)
    form = await client.get("/users/bob/erase")
    assert "long_term: 1" in form.text
    token = csrf_of(form.text)
    wrong = await client.post("/users/bob/erase", data={"csrf": token, "confirm": "bo"})
    assert wrong.status_code == 400
    done = await client.post("/users/bob/erase", data={"csrf": token, "confirm": "bob"})
    assert done.status_code == 200
    assert "long_term: 1" in done.text and "Nothing of this user is left" in done.text
    assert 'href="/users/bob"' not in (await client.get("/")).text


async def test_export_downloads_the_jsonl_stream(stack: Stack) -> None:
    client = await signed_in(stack, stack.reader)
    reply = await client.get("/users/ana/export")
    assert reply.headers["content-disposition"] == 'attachment; filename="ana.jsonl"'
    lines = reply.text.splitlines()
    assert '"header"' in lines[0] and '"trailer"' in lines[-1]
    assert any("ana enjoys skiing" in line for line in lines)


async def test_an_admin_imports_an_export_back_after_an_erasure(stack: Stack) -> None:
    client = await signed_in(stack, stack.admin)
    exported = (await client.get("/users/ana/export")).content
    form = await client.get("/users/ana/erase")
    await client.post("/users/ana/erase", data={"csrf": csrf_of(form.text), "confirm": "ana"})
    assert "ana enjoys skiing" not in (await client.get("/users/ana")).text

    form = await client.get("/users/ana/import")
    assert form.status_code == 200 and 'type="file"' in form.text
    done = await client.post(
        "/users/ana/import",
        data={"csrf": csrf_of(form.text)},
        files={"file": ("ana.jsonl", exported, "application/x-ndjson")},
    )
    assert done.status_code == 200, done.text
    assert "Imported 10, skipped 0" in done.text and "checksum verified" in done.text
    # The file holds ana's 4 long-term memories, her persona fact, 3 entities, 2 relations.
    for sent in ("long_term: 4", "persona: 1", "entity: 5"):
        assert sent in done.text, sent
    page = (await client.get("/users/ana", params={"tier": "long_term"})).text
    assert "ana enjoys skiing" in page and "<td>import</td>" in page
    assert "<td>explicit add</td>" not in page


async def test_an_import_of_a_damaged_file_writes_nothing_and_names_the_fault(
    stack: Stack,
) -> None:
    client = await signed_in(stack, stack.admin)
    lines = (await client.get("/users/ana/export")).text.splitlines()
    token = csrf_of((await client.get("/users/carl/import")).text)

    def upload(body: str) -> dict[str, tuple[str, bytes, str]]:
        return {"file": ("x.jsonl", body.encode(), "application/x-ndjson")}

    bad_line = await client.post(
        "/users/carl/import", data={"csrf": token}, files=upload(lines[0] + "\nnot json\n")
    )
    assert (
        bad_line.status_code == 400 and "line 2 is not a line of a memoryd export" in bad_line.text
    )
    tampered = "\n".join(lines).replace("ana enjoys skiing", "ana enjoys diving")
    refused = await client.post("/users/carl/import", data={"csrf": token}, files=upload(tampered))
    assert refused.status_code == 400 and "checksum" in refused.text
    assert 'href="/users/carl"' not in (await client.get("/")).text


async def test_a_reader_gets_no_import_form_and_an_import_needs_the_csrf_token(
    stack: Stack,
) -> None:
    reader = await signed_in(stack, stack.reader)
    form = await reader.get("/users/ana/import")
    assert form.status_code == 403 and "may not import" in form.text
    assert 'type="file"' not in form.text
    exported = (await reader.get("/users/ana/export")).content
    upload = {"file": ("ana.jsonl", exported, "application/x-ndjson")}
    forged = await reader.post("/users/bob/import", data={"csrf": csrf_of(form.text)}, files=upload)
    assert forged.status_code == 403
    admin = await signed_in(stack, stack.admin)
    no_token = await admin.post("/users/bob/import", files=upload)
    assert no_token.status_code == 403 and "CSRF" in no_token.text
    assert "ana enjoys skiing" not in (await admin.get("/users/bob")).text


async def test_health_shows_each_store_and_the_services_metrics(stack: Stack) -> None:
    client = await signed_in(stack, stack.reader)
    await client.get("/")
    page = (await client.get("/health")).text
    assert "memoryd.vector_store" in page and "SERVING" in page
    assert "ListUsers" in page and "p99" in page


async def test_sign_out_and_idle_expiry_end_the_session(stack: Stack) -> None:
    client = await signed_in(stack, stack.reader)
    page = await client.get("/")
    out = await client.post("/signout", data={"csrf": csrf_of(page.text)})
    assert out.headers["location"] == "/signin"
    assert (await client.get("/")).status_code == 303
    again = await signed_in(stack, stack.reader)
    stack.clock.advance(14 * 60)  # 14 minutes idle: still signed in, the cookie renewed
    assert (await again.get("/")).status_code == 200
    stack.clock.advance(16 * 60)  # then 16 more: past the 15 minutes of idle expiry
    assert (await again.get("/")).status_code == 303


async def test_a_session_is_its_encrypted_cookie_read_by_any_console_with_the_key(
    stack: Stack,
) -> None:
    """No console holds sessions: another replica with the same key (or this one after a
    restart) reads the cookie; one with another key, or a cookie altered, reads nothing."""
    client = await signed_in(stack, stack.reader)
    cookie = client.cookies[COOKIE]
    assert stack.reader not in cookie and stack.reader[-12:] not in cookie
    replica = Console(stack.console.service, session_key=SESSION_KEY, clock=stack.clock)
    page = await browser_of(replica, cookie).get("/users/ana")
    assert page.status_code == 200 and "ana enjoys skiing" in page.text
    stranger = Console(stack.console.service, session_key=Fernet.generate_key())
    assert (await browser_of(stranger, cookie).get("/")).status_code == 303
    altered = cookie[:-8] + ("A" * 8 if not cookie.endswith("A" * 8) else "B" * 8)
    assert (await browser_of(replica, altered).get("/")).status_code == 303


async def test_the_console_logs_no_query_content_or_credential(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memoryd.console")
    client = await signed_in(stack, stack.admin)
    await client.get("/users/ana/ask", params={"q": "secret ski question"})
    await client.get("/users/ana")
    # The console's own records (the test's HTTP client logs its URLs under httpx).
    own = [r for r in caplog.records if r.name.startswith(("memoryd.console", "uvicorn"))]
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in own)
    assert "console request" in logged
    for secret in ("secret ski question", "skiing", stack.admin, "ana"):
        assert secret not in logged, secret
