"""ListUsers and ListMemories (the console's RPCs): a tenant's users with their usage, a
user's memories across tiers, each a page at a time; the tenant from the credential, the
roles that may list, and a second tenant's users never listed."""

from __future__ import annotations

from pathlib import Path

import grpc

from memoryd.transport import export_stream
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.grants import Caller, new_key
from tests.support.rpc import bad_request_fields, rpc_error, scope

LT, PE, EN = pb.TIER_LONG_TERM, pb.TIER_PERSONA, pb.TIER_ENTITY


async def add(caller: object, user: str, content: str, **kw: object) -> pb.AddResponse:
    request = pb.AddRequest(scope=scope(user), tier=kw.pop("tier", LT), content=content, **kw)  # type: ignore[arg-type]
    return await caller.Add(request)  # type: ignore[attr-defined, no-any-return]


async def list_all_users(caller: object, prefix: str = "", page_size: int = 2) -> list[str]:
    found: list[str] = []
    token = ""
    while True:
        reply = await caller.ListUsers(  # type: ignore[attr-defined]
            pb.ListUsersRequest(user_id_prefix=prefix, page_size=page_size, page_token=token)
        )
        found += [u.user_id for u in reply.users]
        token = reply.next_page_token
        if not token:
            return found


async def test_a_tenants_users_are_listed_in_id_order_with_their_usage_page_by_page(
    start_server: ServerFactory,
) -> None:
    s = await start_server()
    for user in ("carol", "alice", "bob", "alfred"):
        await add(s.stub, user, f"{user} likes green tea")
    await add(s.stub, "alice", "alice plays the cello")
    assert await list_all_users(s.stub) == ["alfred", "alice", "bob", "carol"]
    assert await list_all_users(s.stub, prefix="al") == ["alfred", "alice"]
    first = await s.stub.ListUsers(pb.ListUsersRequest(user_id_prefix="alice"))
    [alice] = first.users
    usage = {t.tier: t for t in alice.tiers}
    assert usage[LT].count == 2 and usage[LT].bytes > 0 and usage[LT].max_count > 0
    assert alice.last_active_at.seconds > 0
    assert first.next_page_token == ""


async def test_an_erased_user_is_no_longer_listed(start_server: ServerFactory) -> None:
    s = await start_server()
    await add(s.stub, "gone", "gone likes tea")
    await add(s.stub, "kept", "kept likes tea")
    await s.stub.Prune(pb.PruneRequest(scope=scope("gone"), strategy=pb.PRUNE_STRATEGY_ALL))
    assert await list_all_users(s.stub) == ["kept"]


async def test_the_embedded_directory_lists_the_users_stored_before_a_restart(
    start_server: ServerFactory,
) -> None:
    first = await start_server()
    await add(first.stub, "before-restart", "remembered across a restart")
    await first.server.stop(grace_s=0)
    again = await start_server()  # the same data directory, an empty in-process directory
    [user] = (await again.stub.ListUsers(pb.ListUsersRequest())).users
    assert user.user_id == "before-restart"
    assert {t.tier: t.count for t in user.tiers}[LT] == 1


async def test_listing_users_is_for_readers_and_admins_of_the_credentials_tenant_only(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.jsonl"
    keys.touch()
    s = await start_server(auth={"keys_file": keys})
    acme_admin = Caller(s.channel, new_key(keys, "acme", "admin"))
    globex_admin = Caller(s.channel, new_key(keys, "globex", "admin"))
    for user in ("ann", "ben"):
        await add(acme_admin, f"acme-{user}", "likes tea")
    await add(globex_admin, "globex-zoe", "likes coffee")
    # The same user id in both tenants is two users, each listed by its own tenant only.
    await add(globex_admin, "acme-ann", "another tenant's namesake")

    assert await list_all_users(acme_admin) == ["acme-ann", "acme-ben"]
    assert await list_all_users(globex_admin) == ["acme-ann", "globex-zoe"]
    [namesake] = (await globex_admin.ListUsers(pb.ListUsersRequest(user_id_prefix="acme"))).users
    assert {t.tier: t.count for t in namesake.tiers}[LT] == 1

    reader = Caller(s.channel, new_key(keys, "acme", "reader"))
    assert await list_all_users(reader) == ["acme-ann", "acme-ben"]
    bound_reader = Caller(s.channel, new_key(keys, "acme", "reader", ("acme-ben",)))
    assert await list_all_users(bound_reader) == ["acme-ben"]

    agent = Caller(s.channel, new_key(keys, "acme", "agent", ("acme-ann",)))
    err = await rpc_error(agent.ListUsers(pb.ListUsersRequest()))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    err = await rpc_error(s.stub.ListUsers(pb.ListUsersRequest()))
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_users_memories_across_tiers_come_page_by_page_with_their_filters(
    start_server: ServerFactory,
) -> None:
    s = await start_server()
    me = "paged"
    for i in range(5):
        await add(s.stub, me, f"memory number {i} about tea", metadata={"topic": "tea"})
    await add(
        s.stub,
        me,
        "said in a session",
        kind=pb.KIND_MESSAGE,
        metadata={"topic": "chat"},
    )
    await s.stub.Add(
        pb.AddRequest(
            scope=scope(me, session_id="s1"), tier=LT, content="turn of s1", kind=pb.KIND_MESSAGE
        )
    )
    await s.stub.Add(pb.AddRequest(scope=scope(me), tier=PE, key="drink", content="tea"))
    await add(s.stub, "someone-else", "not mine")

    seen: list[pb.MemoryItem] = []
    token = ""
    pages = 0
    while True:
        reply = await s.stub.ListMemories(
            pb.ListMemoriesRequest(scope=scope(me), page_size=3, page_token=token)
        )
        assert len(reply.items) <= 3
        seen += reply.items
        pages += 1
        token = reply.next_page_token
        if not token:
            break
    assert pages >= 3
    assert len(seen) == len({i.id for i in seen}) == 8
    assert {i.tier for i in seen} == {LT, PE}
    assert "not mine" not in {i.content for i in seen}

    async def contents(**kw: object) -> set[str]:
        reply = await s.stub.ListMemories(pb.ListMemoriesRequest(scope=scope(me), **kw))  # type: ignore[arg-type]
        return {i.content for i in reply.items}

    assert await contents(tiers=[PE]) == {"tea"}
    assert await contents(kinds=[pb.KIND_MESSAGE]) == {"said in a session", "turn of s1"}
    assert await contents(filters={"topic": "chat"}) == {"said in a session"}
    session = await s.stub.ListMemories(pb.ListMemoriesRequest(scope=scope(me, session_id="s1")))
    assert [i.content for i in session.items] == ["turn of s1"]


async def test_bad_listing_requests_name_their_field(memoryd: RunningServer) -> None:
    for request, field in [
        (pb.ListMemoriesRequest(scope=scope("u"), page_size=1000), "page_size"),
        (pb.ListMemoriesRequest(scope=scope("u"), page_token="not a token"), "page_token"),
        (pb.ListMemoriesRequest(scope=scope("u"), tiers=[pb.TIER_WORKING]), "tiers[0]"),
        (pb.ListMemoriesRequest(), "scope.user_id"),
    ]:
        err = await rpc_error(memoryd.stub.ListMemories(request))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in bad_request_fields(err), (field, err.details())
    err = await rpc_error(memoryd.stub.ListUsers(pb.ListUsersRequest(page_size=-1)))
    assert bad_request_fields(err) == ["page_size"]


async def test_retrieve_with_explain_gives_each_hit_the_components_of_its_score(
    memoryd: RunningServer,
) -> None:
    await add(memoryd.stub, "explained", "User enjoys skiing")
    await add(memoryd.stub, "explained", "User likes coffee with a mountain view")
    request = pb.RetrieveRequest(
        scope=scope("explained"), query="skiing", explain=True, min_score=0.0
    )
    hits = (await memoryd.stub.Retrieve(request)).items
    assert hits[0].content == "User enjoys skiing"
    for hit in hits:
        parts = hit.explain
        assert parts.final == hit.score and parts.dense > 0
        # The score is the cosine, raised by the keyword share, lifted by its conversation.
        total = parts.dense + parts.keyword + parts.lifts["conversation"]
        assert abs(total - min(1.0, parts.final)) < 1e-3, (hit.content, parts)
    skiing, coffee = hits[0].explain, hits[1].explain
    assert skiing.keyword > 0 and coffee.keyword == 0  # only one holds the query's keyword
    plain = pb.RetrieveRequest(scope=scope("explained"), query="skiing", min_score=0.0)
    assert not any(h.HasField("explain") for h in (await memoryd.stub.Retrieve(plain)).items)


async def test_every_page_carries_the_tenants_totals_per_tier_not_the_pages(
    start_server: ServerFactory,
) -> None:
    s = await start_server()
    for user, memories in (("ann", 1), ("ben", 2), ("cy", 3)):
        for n in range(memories):
            await add(s.stub, user, f"{user} memory number {n}")
    await add(s.stub, "cy", "Lyon", tier=PE, key="city")
    usage = [await s.stub.Usage(pb.UsageRequest(scope=scope(u))) for u in ("ann", "ben", "cy")]
    expected = {
        tier: (sum(t.count for u in usage for t in u.tiers if t.tier == tier),
               sum(t.bytes for u in usage for t in u.tiers if t.tier == tier))
        for tier in (LT, PE)
    }  # fmt: skip
    assert expected[LT][0] == 6 and expected[PE][0] == 1
    token = ""
    pages = 0
    while True:
        reply = await s.stub.ListUsers(pb.ListUsersRequest(page_size=1, page_token=token))
        pages += 1
        totals = {t.tier: (t.count, t.bytes) for t in reply.totals}
        assert {t: totals[t] for t in (LT, PE)} == expected
        token = reply.next_page_token
        if not token:
            break
    assert pages == 3


async def test_listed_memories_tell_an_import_and_a_persona_command_from_an_add(
    start_server: ServerFactory,
) -> None:
    s = await start_server()
    await add(s.stub, "ana", "ana enjoys skiing")
    await s.stub.Add(
        pb.AddRequest(
            scope=pb.Scope(user_id="ana", session_id="s1"),
            tier=pb.TIER_SHORT_TERM,
            content="remember that my city is Lyon",
            role=pb.ROLE_USER,
        )
    )
    exported = [m async for m in s.stub.Export(pb.ExportRequest(scope=scope("ana"), tiers=[LT]))]
    # An export holds the memories, not how they came in here (an Import gives its own).
    assert not any(m.item.origin for m in exported if m.WhichOneof("payload") == "item")
    requests = [export_stream.import_request(m) for m in exported]
    requests[0].scope.CopyFrom(scope("ivy"))
    await s.stub.Import(iter(requests))

    def origins(reply: pb.ListMemoriesResponse) -> dict[str, tuple[int, int]]:
        return {i.content: (i.origin, i.source) for i in reply.items}

    ana = origins(await s.stub.ListMemories(pb.ListMemoriesRequest(scope=scope("ana"))))
    assert ana["ana enjoys skiing"] == (pb.ORIGIN_UNSPECIFIED, pb.SOURCE_EXPLICIT)
    assert ana["Lyon"] == (pb.ORIGIN_COMMAND, pb.SOURCE_EXPLICIT)
    ivy = origins(await s.stub.ListMemories(pb.ListMemoriesRequest(scope=scope("ivy"))))
    # Imported, and still explicit: the item's own source is kept.
    assert ivy["ana enjoys skiing"] == (pb.ORIGIN_IMPORT, pb.SOURCE_EXPLICIT)


async def test_a_named_task_or_session_lists_its_hot_tier_and_the_first_page_names_them(
    start_server: ServerFactory,
) -> None:
    s = await start_server()
    task = pb.Scope(user_id="ana", agent_id="planner", task_id="trip")
    await s.stub.Add(pb.AddRequest(scope=task, tier=pb.TIER_WORKING, key="seat", content="window"))
    chat = pb.Scope(user_id="ana", session_id="s1")
    await s.stub.Add(
        pb.AddRequest(scope=chat, tier=pb.TIER_SHORT_TERM, content="hi there", role=pb.ROLE_USER)
    )
    await add(s.stub, "ana", "ana enjoys skiing")

    plain = await s.stub.ListMemories(pb.ListMemoriesRequest(scope=scope("ana")))
    assert {i.tier for i in plain.items} <= {LT}  # the hot tiers only for a named scope
    assert [(t.agent_id, t.task_id) for t in plain.tasks] == [("planner", "trip")]
    assert list(plain.session_ids) == ["s1"]

    working = await s.stub.ListMemories(pb.ListMemoriesRequest(scope=task, tiers=[pb.TIER_WORKING]))
    assert [(i.tier, i.key, i.content) for i in working.items] == [
        (pb.TIER_WORKING, "seat", "window")
    ]
    session = await s.stub.ListMemories(pb.ListMemoriesRequest(scope=chat))
    window = [i for i in session.items if i.tier == pb.TIER_SHORT_TERM]
    assert [(i.content, i.session_id) for i in window] == [("hi there", "s1")]
    assert "ana enjoys skiing" not in {i.content for i in session.items}  # another session's

    err = await rpc_error(
        s.stub.ListMemories(pb.ListMemoriesRequest(scope=scope("ana"), tiers=[pb.TIER_SHORT_TERM]))
    )
    assert bad_request_fields(err) == ["tiers[0]"]


async def test_a_bound_readers_totals_cover_its_users_only(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.jsonl"
    keys.touch()
    s = await start_server(auth={"keys_file": keys})
    admin = Caller(s.channel, new_key(keys, "acme", "admin"))
    for user, memories in (("ana", 2), ("bob", 5)):
        for n in range(memories):
            await add(admin, user, f"{user} memory number {n}")
    bound = Caller(s.channel, new_key(keys, "acme", "reader", ("ana",)))
    mine = await bound.ListUsers(pb.ListUsersRequest())
    assert [u.user_id for u in mine.users] == ["ana"]
    assert {t.tier: t.count for t in mine.totals}[LT] == 2
    everyone = await admin.ListUsers(pb.ListUsersRequest(page_size=1))
    assert {t.tier: t.count for t in everyone.totals}[LT] == 7
