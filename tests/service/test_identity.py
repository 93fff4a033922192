"""Identity and tenancy through the server: API keys (hot-reloaded keys file), roles and
their grants, JWTs, the audit log, the loopback rule, and tenants kept apart in every store."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import jwt
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from memoryd.cli.backup import backup
from memoryd.cli.client_commands import run_client_command
from memoryd.cli.main import _parser as main_parser
from memoryd.cli.main import main
from memoryd.core.startup import StartupRefused
from memoryd.settings import Settings
from memoryd.stores.keys.file import KeysFile
from memoryd.transport.identity import check_exposure
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.clock import MovableClock
from tests.support.grants import Caller, bearer, error_info, new_key
from tests.support.redis_server import free_port
from tests.support.rpc import rpc_error, scope

LT, PE, WK, ST = pb.TIER_LONG_TERM, pb.TIER_PERSONA, pb.TIER_WORKING, pb.TIER_SHORT_TERM
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
DENIED = grpc.StatusCode.PERMISSION_DENIED
SERVICE = Path(__file__).resolve().parents[2] / "service"


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.jsonl"
    path.touch(mode=0o600)
    return path


@pytest.fixture
async def keyed(start_server: ServerFactory, keys_file: Path) -> RunningServer:
    return await start_server(auth={"keys_file": keys_file}, reflection=True)


def add(sc: pb.Scope, content: str, tier: pb.Tier.ValueType = LT, **kw: Any) -> pb.AddRequest:
    return pb.AddRequest(scope=sc, tier=tier, content=content, **kw)


async def contents(caller: Caller, user: str, tier: pb.Tier.ValueType = LT) -> list[str]:
    reply = await caller.Retrieve(
        pb.RetrieveRequest(scope=scope(user), tiers=[tier], top_k=50, min_score=0.0)
    )
    return sorted(i.content for i in reply.items)


async def test_a_call_without_credential_is_unauthenticated_but_health_and_reflection_are_open(
    keyed: RunningServer,
) -> None:
    err = await rpc_error(keyed.stub.Usage(pb.UsageRequest(scope=scope("alice"))))
    assert err.code() == UNAUTHENTICATED
    assert error_info(err).reason == "CREDENTIAL_MISSING"
    health = health_pb2_grpc.HealthStub(keyed.channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service="memoryd.v1.MemoryService"))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    reflect = reflection_pb2_grpc.ServerReflectionStub(keyed.channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    async for answer in reflect.ServerReflectionInfo(iter([request])):
        assert "memoryd.v1.MemoryService" in {s.name for s in answer.list_services_response.service}
        break


@pytest.mark.parametrize(
    "header",
    [
        "Bearer mdk_000000000000_" + "A" * 43,
        "Bearer not-a-key-at-all",
        "Bearer a.b.c",
        "Basic YWxpY2U6c2VjcmV0",
        "Bearer",
    ],
)
async def test_a_bad_credential_is_unauthenticated(keyed: RunningServer, header: str) -> None:
    call = keyed.stub.Usage(
        pb.UsageRequest(scope=scope("alice")), metadata=(("authorization", header),)
    )
    err = await rpc_error(call)
    assert err.code() == UNAUTHENTICATED
    assert error_info(err).reason == "CREDENTIAL_INVALID"


async def test_the_tenant_comes_from_the_key_so_one_user_id_in_two_tenants_is_two_users(
    keyed: RunningServer, keys_file: Path
) -> None:
    acme = Caller(keyed.channel, new_key(keys_file, "acme", "agent", ("alice",)))
    globex = Caller(keyed.channel, new_key(keys_file, "globex", "agent", ("alice",)))
    await acme.Add(add(scope("alice"), "acme alice likes tea"))
    await acme.Add(add(scope("alice"), "acme alice's name", tier=PE, key="name"))
    await globex.Add(add(scope("alice"), "globex alice likes coffee"))
    assert await contents(acme, "alice") == ["acme alice likes tea"]
    assert await contents(globex, "alice") == ["globex alice likes coffee"]
    assert await contents(globex, "alice", PE) == []
    usage = await globex.Usage(pb.UsageRequest(scope=scope("alice")))
    assert {t.tier: t.count for t in usage.tiers}[LT] == 1


async def test_another_user_is_denied_alike_whether_or_not_they_exist(
    keyed: RunningServer, keys_file: Path
) -> None:
    alice = Caller(keyed.channel, new_key(keys_file, "acme", "agent", ("alice",)))
    bob = Caller(keyed.channel, new_key(keys_file, "acme", "agent", ("bob",)))
    await bob.Add(add(scope("bob"), "bob's secret"))
    answers = []
    for victim in ("bob", "nobody-by-this-name"):
        for call in (
            alice.Retrieve(pb.RetrieveRequest(scope=scope(victim), query="secret")),
            alice.Add(add(scope(victim), "planted")),
            alice.Usage(pb.UsageRequest(scope=scope(victim))),
        ):
            err = await rpc_error(call)
            assert err.code() == DENIED
            info = error_info(err)
            assert info.reason == "USER_NOT_GRANTED"
            answers.append((err.details(), dict(info.metadata)))
    assert answers[:3] == answers[3:]
    assert await contents(bob, "bob") == ["bob's secret"]


async def test_a_batch_naming_a_user_outside_the_grants_is_refused_whole(
    keyed: RunningServer, keys_file: Path
) -> None:
    alice = Caller(keyed.channel, new_key(keys_file, "acme", "agent", ("alice",)))
    bob = Caller(keyed.channel, new_key(keys_file, "acme", "agent", ("bob",)))
    batch = pb.AddBatchRequest(
        items=[add(scope("alice"), "alice's own note"), add(scope("bob"), "planted in bob")]
    )
    err = await rpc_error(alice.AddBatch(batch))
    assert err.code() == DENIED and error_info(err).reason == "USER_NOT_GRANTED"
    assert await contents(alice, "alice") == [] and await contents(bob, "bob") == []
    done = await alice.AddBatch(pb.AddBatchRequest(items=[add(scope("alice"), "alice's note")]))
    assert done.succeeded_count == 1
    assert await contents(alice, "alice") == ["alice's note"]


async def test_roles_reader_agent_admin_have_their_grants(
    keyed: RunningServer, keys_file: Path
) -> None:
    reader = Caller(keyed.channel, new_key(keys_file, "acme", "reader", ("alice",)))
    agent = Caller(keyed.channel, new_key(keys_file, "acme", "agent"))
    admin = Caller(keyed.channel, new_key(keys_file, "acme", "admin"))
    await agent.Add(add(scope("alice"), "alice likes tea"))
    await agent.Add(add(scope("carol"), "carol likes jazz"))  # an unbound agent: any user

    assert await contents(reader, "alice") == ["alice likes tea"]
    await reader.Usage(pb.UsageRequest(scope=scope("alice")))
    await reader.RenderContext(pb.RenderContextRequest(scope=scope("alice"), query="tea"))
    export = [m async for m in reader.Export(pb.ExportRequest(scope=scope("alice")))]
    assert sum(m.WhichOneof("payload") == "item" for m in export) == 1
    for write in (
        reader.Add(add(scope("alice"), "x")),
        reader.Delete(pb.DeleteRequest(scope=scope("alice"), tier=LT, ids=["x"])),
        reader.Prune(
            pb.PruneRequest(scope=scope("alice"), tiers=[LT], strategy=pb.PRUNE_STRATEGY_EXPIRED)
        ),
    ):
        err = await rpc_error(write)
        assert (err.code(), error_info(err).reason) == (DENIED, "ROLE_NOT_GRANTED")

    erase = pb.PruneRequest(scope=scope("carol"), strategy=pb.PRUNE_STRATEGY_ALL)
    err = await rpc_error(agent.Prune(erase))
    assert (err.code(), error_info(err).metadata["action"]) == (DENIED, "erase")
    trailer = pb.ImportRequest(trailer=pb.ExportTrailer(item_count=0))
    err = await rpc_error(agent.Import(iter([pb.ImportRequest(scope=scope("carol")), trailer])))
    assert (err.code(), error_info(err).metadata["action"]) == (DENIED, "restore")
    # The agent may still end a task: Prune ALL naming the working tier.
    task = scope("carol", agent_id="a", task_id="t")
    await agent.Add(add(task, "scratch", tier=WK, key="k"))
    task_end = pb.PruneRequest(scope=task, tiers=[WK], strategy=pb.PRUNE_STRATEGY_ALL)
    assert (await agent.Prune(task_end)).deleted_count == 1

    assert (await admin.Prune(erase)).deleted_count == 1
    assert await contents(admin, "carol") == []
    dump = [m async for m in admin.Export(pb.ExportRequest(scope=scope("alice")))]
    stream = [pb.ImportRequest(scope=scope("dave"))]
    stream += [pb.ImportRequest(item=m.item) for m in dump if m.WhichOneof("payload") == "item"]
    stream += [pb.ImportRequest(trailer=m.trailer) for m in dump if m.HasField("trailer")]
    assert (await admin.Import(iter(stream))).imported_count == 1
    assert await contents(admin, "dave") == ["alice likes tea"]


async def test_pruning_every_tier_or_an_archive_is_an_audited_erasure_for_admins_only(
    keyed: RunningServer, keys_file: Path, tmp_path: Path
) -> None:
    agent = Caller(keyed.channel, new_key(keys_file, "acme", "agent"))
    admin_token = new_key(keys_file, "acme", "admin")
    admin = Caller(keyed.channel, admin_token)
    await agent.Add(add(scope("erin"), "erin likes tea"))
    everywhere = scope("erin", agent_id="a", task_id="t", session_id="s")
    every_tier = [t for t in pb.Tier.values() if t != pb.TIER_UNSPECIFIED]
    erase_every_tier = pb.PruneRequest(
        scope=everywhere, tiers=every_tier, strategy=pb.PRUNE_STRATEGY_ALL
    )
    erase_long_term_and_its_archive = pb.PruneRequest(
        scope=everywhere, tiers=[LT], strategy=pb.PRUNE_STRATEGY_ALL
    )
    for prune_all in (erase_every_tier, erase_long_term_and_its_archive):
        err = await rpc_error(agent.Prune(prune_all))
        assert (err.code(), error_info(err).metadata["action"]) == (DENIED, "erase")
    assert await contents(agent, "erin") == ["erin likes tea"]

    assert (await admin.Prune(erase_every_tier)).deleted_count == 1
    assert await contents(admin, "erin") == []
    text = (tmp_path / "data" / "audit" / "access.jsonl").read_text()
    *refusals, erased = [json.loads(x) for x in text.splitlines()]
    assert [r["reason"] for r in refusals] == ["ROLE_NOT_GRANTED"] * 2
    assert (erased["event"], erased["action"], erased["key_id"]) == (
        "admin_operation",
        "erase",
        admin_token.split("_")[1],
    )
    assert (erased["user_id"], erased["outcome"]) == ("erin", "OK")


async def test_an_admin_import_lands_in_its_own_tenant_only(
    keyed: RunningServer, keys_file: Path
) -> None:
    globex_admin = Caller(keyed.channel, new_key(keys_file, "globex", "admin"))
    acme_alice = Caller(keyed.channel, new_key(keys_file, "acme", "agent", ("alice",)))
    await acme_alice.Add(add(scope("alice"), "alice likes tea"))
    item = pb.MemoryItem(id=str(uuid.uuid4()), tier=LT, content="planted by globex")
    stream = [
        pb.ImportRequest(scope=scope("alice")),
        pb.ImportRequest(item=item),
        pb.ImportRequest(trailer=pb.ExportTrailer(item_count=1)),
    ]
    assert (await globex_admin.Import(iter(stream))).imported_count == 1
    assert await contents(acme_alice, "alice") == ["alice likes tea"]
    assert await contents(globex_admin, "alice") == ["planted by globex"]


async def test_keys_created_or_revoked_while_serving_apply_at_the_next_call(
    keyed: RunningServer, keys_file: Path
) -> None:
    token = new_key(keys_file, "acme", "agent", ("alice",))
    caller = Caller(keyed.channel, token)
    await caller.Add(add(scope("alice"), "alice likes tea"))
    key_id = token.split("_")[1]
    KeysFile(keys_file).revoke(key_id, "2025-01-01T00:00:00+00:00")
    err = await rpc_error(caller.Usage(pb.UsageRequest(scope=scope("alice"))))
    assert err.code() == UNAUTHENTICATED
    assert error_info(err).reason == "CREDENTIAL_INVALID"
    replacement = Caller(keyed.channel, new_key(keys_file, "acme", "agent", ("alice",)))
    assert await contents(replacement, "alice") == ["alice likes tea"]


async def test_refusals_and_admin_operations_are_audited_with_the_key_id_never_the_secret(
    keyed: RunningServer, keys_file: Path, tmp_path: Path
) -> None:
    agent_token = new_key(keys_file, "acme", "agent", ("alice",))
    admin_token = new_key(keys_file, "acme", "admin")
    agent, admin = Caller(keyed.channel, agent_token), Caller(keyed.channel, admin_token)
    await rpc_error(agent.Usage(pb.UsageRequest(scope=scope("bob"))))
    wrong = agent_token[:-3] + ("xyz" if not agent_token.endswith("xyz") else "abc")
    await rpc_error(Caller(keyed.channel, wrong).Usage(pb.UsageRequest(scope=scope("alice"))))
    await rpc_error(keyed.stub.Usage(pb.UsageRequest(scope=scope("alice"))))
    await admin.Prune(pb.PruneRequest(scope=scope("bob"), strategy=pb.PRUNE_STRATEGY_ALL))
    trailer = pb.ImportRequest(trailer=pb.ExportTrailer(item_count=0))
    await admin.Import(iter([pb.ImportRequest(scope=scope("carol")), trailer]))

    text = (tmp_path / "data" / "audit" / "access.jsonl").read_text()
    lines = [json.loads(x) for x in text.splitlines()]
    agent_id, admin_id = agent_token.split("_")[1], admin_token.split("_")[1]
    denied, forged, missing, erased, imported = lines
    assert (denied["event"], denied["status"], denied["reason"]) == (
        "auth_failure",
        "PERMISSION_DENIED",
        "USER_NOT_GRANTED",
    )
    assert (denied["key_id"], denied["tenant"], denied["user_id"]) == (agent_id, "acme", "bob")
    assert (forged["status"], forged["key_id"]) == ("UNAUTHENTICATED", agent_id)
    assert (missing["reason"], missing["key_id"]) == ("CREDENTIAL_MISSING", "")
    assert (erased["event"], erased["action"], erased["key_id"]) == (
        "admin_operation",
        "erase",
        admin_id,
    )
    assert (erased["user_id"], erased["outcome"]) == ("bob", "OK")
    assert (imported["action"], imported["user_id"], imported["key_id"]) == (
        "restore",
        "carol",
        admin_id,
    )
    for token in (agent_token, admin_token, wrong):
        assert token.split("_", 2)[2] not in text
    erasures = (tmp_path / "data" / "audit" / "erasures.jsonl").read_text()
    assert json.loads(erasures)["requested_by"] == f"key:{admin_id}"


async def test_erasing_a_user_in_one_tenant_leaves_that_user_id_in_another_whole(
    start_server: ServerFactory, keys_file: Path, tmp_path: Path
) -> None:
    clock = MovableClock(datetime(2024, 1, 15, tzinfo=UTC).timestamp())
    s = await start_server(clock=clock, auth={"keys_file": keys_file})
    tenants = {t: Caller(s.channel, new_key(keys_file, t, "admin")) for t in ("acme", "globex")}
    for name, caller in tenants.items():
        await caller.Add(add(scope("u1"), f"{name} archived memory"))
    clock.advance(400 * 86_400)
    for name, caller in tenants.items():
        await caller.Prune(
            pb.PruneRequest(
                scope=scope("u1"),
                tiers=[LT],
                strategy=pb.PRUNE_STRATEGY_ARCHIVE_OLDER_THAN,
                older_than_days=365,
            )
        )
        await caller.Add(add(scope("u1"), f"{name} live memory"))
        await caller.Add(add(scope("u1"), f"{name} persona", tier=PE, key="k"))
        await caller.Add(add(scope("u1", agent_id="a", task_id="t"), "w", tier=WK, key="k"))
        await caller.Add(add(scope("u1", session_id="s"), f"{name} said hi", tier=ST))
    await s.app.copier.drain()
    await backup(s.app.engine, s.app.memory, s.app.backups, clock(), 30)

    async def everything(caller: Caller) -> list[str]:
        request = pb.ExportRequest(scope=scope("u1"), include_archived=True)
        items = [m async for m in caller.Export(request)]
        return sorted(m.item.id for m in items if m.WhichOneof("payload") == "item")

    globex_before = await everything(tenants["globex"])
    assert len(globex_before) == 6  # archived, live, persona, working, message + its copy
    await tenants["acme"].Prune(pb.PruneRequest(scope=scope("u1"), strategy=pb.PRUNE_STRATEGY_ALL))

    assert await everything(tenants["acme"]) == []
    assert await everything(tenants["globex"]) == globex_before
    data = tmp_path / "data"
    assert not (data / "archive" / "acme").exists() or not list(
        (data / "archive" / "acme").rglob("*.gz")
    )
    assert list((data / "archive" / "globex" / "u1").rglob("*.gz"))
    day = datetime.fromtimestamp(clock(), tz=UTC).strftime("%Y-%m-%d")
    assert not (data / "backups" / day / "acme" / "u1.jsonl.gz").exists()
    assert (data / "backups" / day / "globex" / "u1.jsonl.gz").exists()


async def test_jwt_bearer_tokens_through_the_server(start_server: ServerFactory) -> None:
    secret = "a-test-secret-of-at-least-32-bytes!!"
    s = await start_server(
        auth={"jwt": {"hs256_secret": secret, "issuer": "idp", "audience": "memoryd"}}
    )

    def token(**over: Any) -> str:
        claims: dict[str, Any] = {
            "iss": "idp",
            "aud": "memoryd",
            "sub": "alice",
            "tenant": "acme",
            "role": "agent",
        }
        claims["exp"] = int(time.time()) + 300
        return jwt.encode({**claims, **over}, secret, algorithm="HS256")

    alice = Caller(s.channel, token())
    await alice.Add(add(scope("alice"), "alice likes tea"))
    assert await contents(alice, "alice") == ["alice likes tea"]
    err = await rpc_error(alice.Usage(pb.UsageRequest(scope=scope("bob"))))
    assert err.code() == DENIED
    for bad, reason in (
        (token(exp=int(time.time()) - 5), "CREDENTIAL_EXPIRED"),
        (token(aud="other"), "CREDENTIAL_INVALID"),
        (jwt.encode({"tenant": "acme"}, "x" * 32, algorithm="HS256"), "CREDENTIAL_INVALID"),
    ):
        err = await rpc_error(Caller(s.channel, bad).Usage(pb.UsageRequest(scope=scope("alice"))))
        assert (err.code(), error_info(err).reason) == (UNAUTHENTICATED, reason)


async def test_without_credentials_only_loopback_is_served_unless_allowed(
    start_server: ServerFactory, keys_file: Path, tmp_path: Path
) -> None:
    with pytest.raises(StartupRefused, match="MEMORYD_AUTH__ALLOW_UNAUTHENTICATED=true"):
        check_exposure(Settings(listen="0.0.0.0:0"))  # what the server checks first
    open_ = await start_server(listen="0.0.0.0:0", auth={"allow_unauthenticated": True})
    await open_.server.stop(grace_s=0)
    keyed = await start_server(
        listen="0.0.0.0:0", auth={"keys_file": keys_file}, data_dir=tmp_path / "keyed"
    )
    err = await rpc_error(keyed.stub.Usage(pb.UsageRequest(scope=scope("alice"))))
    assert err.code() == UNAUTHENTICATED


async def test_a_missing_keys_file_stops_the_start_up(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    with pytest.raises(StartupRefused, match="memoryd keys create"):
        await start_server(auth={"keys_file": tmp_path / "absent.jsonl"})


def _memoryd(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {
        **os.environ,
        "PYTHONPATH": str(SERVICE),
        "MEMORYD_METRICS__LISTEN": "127.0.0.1:0",  # never the default port another test holds
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *argv],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
        check=False,
    )


def test_serve_refuses_a_non_loopback_listen_without_credentials_in_one_line(
    tmp_path: Path,
) -> None:
    env = {
        "MEMORYD_LISTEN": f"0.0.0.0:{free_port()}",
        "MEMORYD_DATA_DIR": str(tmp_path / "data"),
    }
    done = _memoryd("serve", env=env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "not a loopback address" in lines[0]
    assert "MEMORYD_AUTH__ALLOW_UNAUTHENTICATED=true" in lines[0]


def test_memoryd_keys_create_prints_the_key_alone_on_stdout(tmp_path: Path) -> None:
    path = tmp_path / "keys.jsonl"
    made = _memoryd(
        "keys", "create", "--keys-file", str(path), "--tenant", "acme", "--role", "agent",
        "--user", "alice", env={"MEMORYD_DATA_DIR": str(tmp_path / "data")},
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    [token] = made.stdout.splitlines()
    assert token.startswith("mdk_") and token.split("_")[1] in made.stderr
    assert token.split("_", 2)[2] not in path.read_text()


def test_memoryd_keys_create_list_revoke(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.jsonl"
    monkeypatch.setenv("MEMORYD_DATA_DIR", str(tmp_path / "data"))

    def keys(*argv: str) -> tuple[int, str, str]:
        rc = main(["keys", *argv])
        out, err = capsys.readouterr()
        return rc, out, err

    rc, out, err = keys(
        "create", "--keys-file", str(path), "--tenant", "acme", "--role", "agent",
        "--user", "alice", "--user", "bob", "--profile", "free", "--name", "travel bot",
    )  # fmt: skip
    assert rc == 0, err
    token = out.splitlines()[-1]
    assert out.strip() == token  # alone on its line
    key_id = token.split("_")[1]
    assert token.startswith("mdk_") and key_id in err
    assert token not in path.read_text() and token.split("_", 2)[2] not in path.read_text()

    rc, out, _ = keys("list", "--keys-file", str(path))
    [_, row] = out.splitlines()
    assert key_id in row and "alice,bob" in row and "active" in row and "travel bot" in row
    assert token.split("_", 2)[2] not in out

    monkeypatch.setenv("MEMORYD_AUTH__KEYS_FILE", str(path))
    rc, out, _ = keys("revoke", key_id)
    assert rc == 0 and key_id in out
    assert "revoked" in keys("list")[1]
    assert keys("revoke", "000000000000")[0] == 1

    rc, out, err = keys(
        "create", "--keys-file", str(path), "--tenant", "acme", "--role", "admin",
        "--user", "alice",
    )  # fmt: skip
    assert (rc, out) == (2, "") and "every user" in err
    rc, out, err = keys("create", "--tenant", "acme", "--role", "agent", "--profile", "gold")
    assert (rc, out) == (2, "") and "unknown quota profile" in err
    audit = [json.loads(x) for x in (tmp_path / "data/audit/access.jsonl").read_text().splitlines()]
    assert [(a["event"], a["key_id"]) for a in audit] == [
        ("key_created", key_id),
        ("key_revoked", key_id),
    ]


async def test_client_commands_send_the_api_key_from_the_option_or_the_environment(
    keyed: RunningServer, keys_file: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    token = new_key(keys_file, "acme", "agent", ("alice",))
    await Caller(keyed.channel, token).Add(add(scope("alice"), "alice likes tea"))
    target = f"127.0.0.1:{keyed.port}"

    def usage(*extra: str) -> int | None:
        args = main_parser().parse_args(["usage", "--target", target, "--user", "alice", *extra])
        return run_client_command(args)

    assert await asyncio.to_thread(usage) == 1
    assert "UNAUTHENTICATED" in capsys.readouterr().err
    assert await asyncio.to_thread(usage, "--api-key", token) == 0
    assert "long_term" in capsys.readouterr().out
    monkeypatch.setenv("MEMORYD_API_KEY", token)
    assert await asyncio.to_thread(usage) == 0
    assert bearer(token)[0][1].endswith(token)
