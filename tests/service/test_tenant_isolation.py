"""The isolation suite (v1 FR-005, SC-004: zero cross-user retrievals), randomized.

3 tenants x 10 users, the same user ids in every tenant, each user with a key bound to it
(plus, per tenant, a reader bound to two users and an admin). At least 10,000 calls over
every RPC (ListUsers and ListMemories included), on Redis (hot tiers, rate buckets) and
each vector adapter:

* every memory written carries its owner in its text (`[tenant/user]`), so every item any
  answer carries (Retrieve, Get, Export, the RenderContext text) is checked to be the
  caller's tenant and user;
* every attempt on another user (any RPC), every write by a reader and every erasure or
  import by an agent is PERMISSION_DENIED;
* Get/Delete of other users' memory ids through one's own scope find and remove nothing;
* a revoked key is UNAUTHENTICATED at its very next call, as are missing and forged ones.

The counts are printed at the end (run with -s to see them). The suite on qdrant-client's
local mode runs from test_tenant_isolation_qdrant.py (a module of its own, so that
`pytest --dist loadfile` can run both adapters at once).
"""

from __future__ import annotations

import asyncio
import random
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from memoryd.stores.keys.file import KeysFile
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.grants import Caller, new_key
from tests.support.redis_server import RedisServer
from tests.support.rpc import scope
from tests.support.vector_stores import QDRANT_LOCAL

# Calls per vector adapter: the embedded engine takes the full 10,000; qdrant-client's local
# mode (a pure-Python reference engine standing in for a Qdrant server) answers a hybrid
# query ~20x slower, so it runs a shorter version of the same suite: what differs there is
# the adapter's filter, which 1,000 calls put through every RPC (each one is asserted).
CALLS = {"edge": 10_000, "qdrant": 1_000}
TENANTS, USERS = 3, 10
WK, ST, LT, PE = pb.TIER_WORKING, pb.TIER_SHORT_TERM, pb.TIER_LONG_TERM, pb.TIER_PERSONA
TAG = re.compile(r"\[([\w-]+)/([\w-]+)(?:#\d+)?\]")
PHRASES = [
    "prefers green tea in the morning",
    "is planning a trip to Lisbon",
    "owns a red bicycle",
    "reads Borges on weekends",
    "is allergic to peanuts",
    "works as a nurse",
    "plays the cello",
    "likes jazz concerts",
]
QUERIES = ["tea", "trip to Lisbon", "bicycle", "books", "allergy", "job", "music"]
DENIED, UNAUTHENTICATED = grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED
# Profile of the suite's keys: limits are checked on every call (Redis buckets) but never hit.
SUITE_QUOTAS = {"profiles": {"suite": {"queries_per_minute": 10**7, "writes_per_minute": 10**7}}}

Owner = tuple[str, str]


@dataclass
class Tally:
    calls: int = 0
    by_rpc: Counter[str] = field(default_factory=Counter)
    allowed: int = 0
    denied: int = 0
    unauthenticated: int = 0
    items_checked: int = 0
    foreign_id_probes: int = 0
    revocations: int = 0
    erasures: int = 0
    imports: int = 0


class World:
    def __init__(self, server: RunningServer, keys_file: Path, run: str) -> None:
        self.server = server
        self.keys_file = keys_file
        self.tenants = [f"t{i}-{run}" for i in range(TENANTS)]
        self.users = [f"u{i}" for i in range(USERS)]
        self.tally = Tally()
        self.counter = 0
        self.agents: dict[Owner, Caller] = {}
        self.tokens: dict[Owner, str] = {}
        self.readers: dict[str, tuple[Caller, tuple[str, str]]] = {}
        self.admins: dict[str, Caller] = {}
        self.ids: dict[Owner, list[str]] = {}
        for t in self.tenants:
            for u in self.users:
                self.new_agent_key((t, u))
                self.ids[(t, u)] = []
            bound = ("u0", "u1")
            self.readers[t] = (self.caller(new_key(keys_file, t, "reader", bound, "suite")), bound)
            self.admins[t] = self.caller(new_key(keys_file, t, "admin", (), "suite"))

    def caller(self, token: str) -> Caller:
        return Caller(self.server.channel, token)

    def new_agent_key(self, owner: Owner) -> None:
        token = new_key(self.keys_file, owner[0], "agent", (owner[1],), "suite")
        self.tokens[owner] = token
        self.agents[owner] = self.caller(token)

    def text(self, owner: Owner, rng: random.Random, unique: bool = False) -> str:
        """A memory naming its owner. Each owner has few distinct texts, so that the
        embedder's cache answers most adds (and a repeat is DEDUPLICATED)."""
        mark = ""
        if unique:
            self.counter += 1
            mark = f"#{self.counter}"
        return f"[{owner[0]}/{owner[1]}{mark}] {owner[1]} {rng.choice(PHRASES)}"

    # Calls and their checks.

    async def ok(self, rpc: str, call: Any) -> Any:
        self.tally.calls += 1
        self.tally.by_rpc[rpc] += 1
        reply = await call
        self.tally.allowed += 1
        return reply

    async def refused(self, rpc: str, call: Any, code: grpc.StatusCode) -> None:
        self.tally.calls += 1
        self.tally.by_rpc[rpc] += 1
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        err = caught.value
        if rpc == "Import" and err.code() == grpc.StatusCode.INTERNAL:
            # grpcio's client reports its own INTERNAL when the server refuses a request
            # stream it is still sending (grpc/grpc#36066); the refusal happened all the same
            # (nothing is written: every owner's items are checked throughout the run).
            assert 'Failed "execute_batch"' in (err.debug_error_string() or ""), err
        else:
            assert err.code() == code, (rpc, err.details())
        if code == DENIED:
            self.tally.denied += 1
        else:
            self.tally.unauthenticated += 1

    def owned(self, owner: Owner, items: Any) -> None:
        for item in items:
            tags = TAG.findall(item.content)
            assert tags, item.content
            assert all(tag == owner for tag in tags), (owner, item.content)
            self.tally.items_checked += 1

    def owned_text(self, owner: Owner, text: str) -> None:
        tags = TAG.findall(text)
        assert all(tag == owner for tag in tags), (owner, text)
        self.tally.items_checked += len(tags)

    def foreign_ids(self, owner: Owner, rng: random.Random, n: int) -> list[str]:
        pool = [i for o, ids in self.ids.items() if o != owner for i in ids[-20:]]
        return rng.sample(pool, min(n, len(pool)))


def scopes(owner: Owner, rng: random.Random) -> pb.Scope:
    return scope(
        owner[1],
        agent_id="a",
        task_id=f"task{rng.randrange(2)}",
        session_id=f"s{rng.randrange(2)}",
    )


def any_request(user: str, rng: random.Random) -> tuple[str, Any]:
    """One request of a random RPC about `user` (for attempts on users not granted)."""
    sc = scope(user, agent_id="a", task_id="task0", session_id="s0")
    choices: list[tuple[str, Any]] = [
        ("Add", pb.AddRequest(scope=sc, tier=LT, content="planted")),
        ("AddBatch", pb.AddBatchRequest(items=[pb.AddRequest(scope=sc, tier=LT, content="x")])),
        ("Retrieve", pb.RetrieveRequest(scope=sc, query="tea")),
        ("Get", pb.GetRequest(scope=sc, tier=WK, keys=["k0"])),
        ("Delete", pb.DeleteRequest(scope=sc, tier=WK, keys=["k0"])),
        ("Prune", pb.PruneRequest(scope=sc, tiers=[WK], strategy=pb.PRUNE_STRATEGY_ALL)),
        ("Usage", pb.UsageRequest(scope=sc)),
        ("RenderContext", pb.RenderContextRequest(scope=sc, query="tea")),
        ("EndSession", pb.EndSessionRequest(scope=sc)),
        ("Export", pb.ExportRequest(scope=sc)),
        ("ListMemories", pb.ListMemoriesRequest(scope=sc)),
    ]
    return rng.choice(choices)


async def drain(stream: Any) -> list[Any]:
    return [message async for message in stream]


async def call_rpc(caller: Caller, rpc: str, request: Any) -> Any:
    if rpc == "Export":
        return await drain(caller.Export(request))
    return await getattr(caller, rpc)(request)


# One step of a tenant's worker: a few calls by one of its users, or an attack.


async def own_step(w: World, owner: Owner, rng: random.Random) -> None:
    me = w.agents[owner]
    sc = scopes(owner, rng)
    # One name for the request each branch builds, whatever its RPC.
    request: pb.AddRequest | pb.RetrieveRequest | pb.PruneRequest | pb.RenderContextRequest
    pick = rng.random()
    if pick < 0.14:
        reply = await w.ok(
            "Add", me.Add(pb.AddRequest(scope=sc, tier=LT, content=w.text(owner, rng)))
        )
        w.ids[owner].append(reply.memory_id)
    elif pick < 0.18:
        items = [pb.AddRequest(scope=sc, tier=LT, content=w.text(owner, rng)) for _ in range(2)]
        batch = await w.ok("AddBatch", me.AddBatch(pb.AddBatchRequest(items=items)))
        w.ids[owner].extend(r.memory_id for r in batch.results if r.memory_id)
    elif pick < 0.26:
        key = f"k{rng.randrange(5)}"
        await w.ok(
            "Add", me.Add(pb.AddRequest(scope=sc, tier=WK, key=key, content=w.text(owner, rng)))
        )
    elif pick < 0.34:
        request = pb.AddRequest(scope=sc, tier=ST, content=w.text(owner, rng), role=pb.ROLE_USER)
        await w.ok("Add", me.Add(request))
    elif pick < 0.37:
        key = f"p{rng.randrange(3)}"
        await w.ok(
            "Add", me.Add(pb.AddRequest(scope=sc, tier=PE, key=key, content=w.text(owner, rng)))
        )
    elif pick < 0.55:
        tiers = rng.choice([[], [LT], [WK, ST], [LT, PE]])
        request = pb.RetrieveRequest(
            scope=sc, query=rng.choice(QUERIES), tiers=tiers, min_score=0.0, top_k=10
        )
        w.owned(owner, (await w.ok("Retrieve", me.Retrieve(request))).items)
    elif pick < 0.63:
        own = w.ids[owner][-5:] or [str(uuid.uuid4())]
        foreign = w.foreign_ids(owner, rng, 3)
        w.tally.foreign_id_probes += len(foreign)
        reply = await w.ok("Get", me.Get(pb.GetRequest(scope=sc, tier=LT, ids=own + foreign)))
        w.owned(owner, reply.items)
        assert set(foreign) <= set(reply.missing)
    elif pick < 0.67:
        reply = await w.ok("Get", me.Get(pb.GetRequest(scope=sc, tier=WK, keys=["k0", "k1"])))
        w.owned(owner, reply.items)
    elif pick < 0.71 and w.foreign_ids(owner, rng, 1):
        foreign = w.foreign_ids(owner, rng, 3)
        w.tally.foreign_id_probes += len(foreign)
        reply = await w.ok("Delete", me.Delete(pb.DeleteRequest(scope=sc, tier=LT, ids=foreign)))
        assert reply.deleted_count == 0
    elif pick < 0.73 and w.ids[owner]:
        gone = w.ids[owner].pop(rng.randrange(len(w.ids[owner])))
        await w.ok("Delete", me.Delete(pb.DeleteRequest(scope=sc, tier=LT, ids=[gone])))
    elif pick < 0.76:
        request = pb.PruneRequest(scope=sc, tiers=[WK], strategy=pb.PRUNE_STRATEGY_ALL)
        await w.ok("Prune", me.Prune(request))
    elif pick < 0.80:
        tiers = rng.choice([[LT, PE], [WK, ST], []])
        messages = await w.ok("Export", drain(me.Export(pb.ExportRequest(scope=sc, tiers=tiers))))
        assert messages[0].header.user_id == owner[1]
        w.owned(owner, [m.item for m in messages if m.WhichOneof("payload") == "item"])
    elif pick < 0.82:
        await w.ok("Usage", me.Usage(pb.UsageRequest(scope=sc)))
    elif pick < 0.84:
        # With the step's scope: its task's working memory and its session's window too.
        request_ = pb.ListMemoriesRequest(scope=sc, page_size=20)
        w.owned(owner, (await w.ok("ListMemories", me.ListMemories(request_))).items)
    elif pick < 0.90:
        request = pb.RenderContextRequest(scope=sc, query=rng.choice(QUERIES), min_score=0.0)
        w.owned_text(owner, (await w.ok("RenderContext", me.RenderContext(request))).context)
    elif pick < 0.93:
        # Ending a session is this user's right: whatever it answers, it is not a refusal.
        w.tally.calls += 1
        w.tally.by_rpc["EndSession"] += 1
        try:
            await me.EndSession(pb.EndSessionRequest(scope=sc))
            w.tally.allowed += 1
        except grpc.aio.AioRpcError as err:
            assert err.code() not in (DENIED, UNAUTHENTICATED), err.details()
            w.tally.allowed += 1
    else:  # the hot tiers alone: what this task and session hold
        request = pb.RetrieveRequest(scope=sc, tiers=[WK, ST], query=rng.choice(QUERIES))
        w.owned(owner, (await w.ok("Retrieve", me.Retrieve(request))).items)


async def attack_step(w: World, tenant: str, users: list[str], rng: random.Random) -> None:
    owner = (tenant, rng.choice(users))
    me = w.agents[owner]
    pick = rng.random()
    if pick < 0.55:  # another user of the tenant, any RPC
        victim = rng.choice([u for u in w.users if u != owner[1]])
        rpc, request = any_request(victim, rng)
        await w.refused(rpc, call_rpc(me, rpc, request), DENIED)
    elif pick < 0.70:  # an agent erasing, importing or listing the tenant's users
        if rng.random() < 0.2:
            await w.refused("ListUsers", me.ListUsers(pb.ListUsersRequest()), DENIED)
        elif rng.random() < 0.5:
            erase = pb.PruneRequest(scope=scope(owner[1]), strategy=pb.PRUNE_STRATEGY_ALL)
            await w.refused("Prune", me.Prune(erase), DENIED)
        else:
            stream = [
                pb.ImportRequest(scope=scope(owner[1])),
                pb.ImportRequest(trailer=pb.ExportTrailer()),
            ]
            await w.refused("Import", me.Import(iter(stream)), DENIED)
    elif pick < 0.85:  # the reader: reads its users, writes nothing, nobody else
        reader, bound = w.readers[tenant]
        user = rng.choice(bound)
        if rng.random() < 0.1:  # it lists its own users, nobody else, in its tenant only
            listed = await w.ok("ListUsers", reader.ListUsers(pb.ListUsersRequest()))
            assert {u.user_id for u in listed.users} <= set(bound)
        elif rng.random() < 0.4:
            reply = await w.ok(
                "Retrieve",
                reader.Retrieve(pb.RetrieveRequest(scope=scope(user), query="tea", min_score=0.0)),
            )
            w.owned((tenant, user), reply.items)
        elif rng.random() < 0.5:
            request = pb.AddRequest(scope=scope(user), tier=LT, content="reader was here")
            await w.refused("Add", reader.Add(request), DENIED)
        else:
            other = rng.choice([u for u in w.users if u not in bound])
            rpc, request = any_request(other, rng)
            await w.refused(rpc, call_rpc(reader, rpc, request), DENIED)
    elif pick < 0.95:  # no credential, or a forged one
        request = pb.UsageRequest(scope=scope(owner[1]))
        token = w.tokens[owner]
        forged = token[:-6] + ("AAAAAA" if not token.endswith("AAAAAA") else "BBBBBB")
        if rng.random() < 0.5:
            await w.refused("Usage", w.server.stub.Usage(request), UNAUTHENTICATED)
        else:
            await w.refused("Usage", w.caller(forged).Usage(request), UNAUTHENTICATED)
    else:  # revoke this user's key: refused at once, then the user gets a new one
        old = w.agents[owner]
        KeysFile(w.keys_file).revoke(w.tokens[owner].split("_")[1], "now")
        w.tally.revocations += 1
        await w.refused("Usage", old.Usage(pb.UsageRequest(scope=scope(owner[1]))), UNAUTHENTICATED)
        w.new_agent_key(owner)


async def admin_step(w: World, tenant: str, users: list[str], rng: random.Random) -> None:
    admin = w.admins[tenant]
    owner = (tenant, rng.choice(users))
    if rng.random() < 0.7:  # import tagged memories for a user of its tenant
        content = w.text(owner, rng, unique=True)
        items = [pb.MemoryItem(id=str(uuid.uuid4()), tier=LT, content=content)]
        stream = [pb.ImportRequest(scope=scope(owner[1]))]
        stream += [pb.ImportRequest(item=i) for i in items]
        stream.append(pb.ImportRequest(trailer=pb.ExportTrailer(item_count=len(items))))
        reply = await w.ok("Import", admin.Import(iter(stream)))
        assert reply.imported_count == 1
        w.ids[owner].extend(i.id for i in items)
        w.tally.imports += 1
    elif rng.random() < 0.3:  # list the tenant's users: each one's memories are its own
        listed = await w.ok("ListUsers", admin.ListUsers(pb.ListUsersRequest(page_size=200)))
        for user in listed.users:
            assert user.user_id in w.users
            page = pb.ListMemoriesRequest(scope=scope(user.user_id), page_size=5)
            w.owned((tenant, user.user_id), (await admin.ListMemories(page)).items)
    else:  # erase the user; nothing of it is left in this tenant
        erase = pb.PruneRequest(scope=scope(owner[1]), strategy=pb.PRUNE_STRATEGY_ALL)
        await w.ok("Prune", admin.Prune(erase))
        w.ids[owner].clear()
        w.tally.erasures += 1
        left = await w.ok("Export", drain(admin.Export(pb.ExportRequest(scope=scope(owner[1])))))
        assert [m for m in left if m.WhichOneof("payload") == "item"] == []


async def worker(w: World, tenant: str, users: list[str], seed: int, calls: int) -> None:
    """Acts for `users` of `tenant` only (their keys, their erasures), so that what it
    expects of them is not changed under it by another worker."""
    rng = random.Random(seed)
    while w.tally.calls < calls:
        pick = rng.random()
        if pick < 0.72:
            await own_step(w, (tenant, rng.choice(users)), rng)
        elif pick < 0.985:
            await attack_step(w, tenant, users, rng)
        else:
            await admin_step(w, tenant, users, rng)


async def run_suite(
    start_server: ServerFactory, redis_server: RedisServer, tmp_path: Path, vectors: str
) -> None:
    """The suite on Redis and the `vectors` adapter (each adapter's test is in a module of
    its own, so that `pytest --dist loadfile` can run the two at once)."""
    keys_file = tmp_path / "keys.jsonl"
    keys_file.touch()
    stores = QDRANT_LOCAL if vectors == "qdrant" else {"vectors": {"backend": "edge"}}
    server = await start_server(
        redis_url=redis_server.url,
        **stores,
        auth={"keys_file": keys_file},
        quotas=SUITE_QUOTAS,
    )
    world = World(server, keys_file, uuid.uuid4().hex[:6])
    # Two workers per tenant, each with half its users: calls overlap as they would in use.
    # (More work too: an erasure waits only for the copies queued before it, not for an
    # empty write-behind queue; test_erasure_and_backups.py shows it deterministically.)
    halves = [world.users[: USERS // 2], world.users[USERS // 2 :]]
    await asyncio.gather(
        *(
            worker(world, tenant, users, seed=100 * n + h, calls=CALLS[vectors])
            for n, tenant in enumerate(world.tenants)
            for h, users in enumerate(halves)
        )
    )
    t = world.tally
    print(
        f"\nisolation suite ({vectors} + redis): {t.calls:,} calls ({t.allowed:,} allowed, "
        f"{t.denied:,} PERMISSION_DENIED, {t.unauthenticated:,} UNAUTHENTICATED), "
        f"{t.items_checked:,} items checked, {t.foreign_id_probes:,} foreign ids probed, "
        f"{t.revocations} revocations, {t.imports} imports, {t.erasures} erasures; "
        f"per RPC {dict(sorted(t.by_rpc.items()))}"
    )
    assert t.calls >= CALLS[vectors]
    service = pb.DESCRIPTOR.services_by_name["MemoryService"]
    assert {m.name for m in service.methods} <= set(t.by_rpc)
    assert t.denied > t.calls // 8 and t.unauthenticated > t.calls // 50
    assert t.revocations > 5 and t.items_checked > t.calls // 2


@pytest.mark.slow
async def test_ten_thousand_random_calls_never_cross_a_tenant_or_a_user(
    start_server: ServerFactory, redis_server: RedisServer, tmp_path: Path
) -> None:
    """On the embedded engine (qdrant-client's local mode: test_tenant_isolation_qdrant)."""
    await run_suite(start_server, redis_server, tmp_path, "edge")
