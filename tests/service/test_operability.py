"""What an operator meets: a start-up refused in one line naming the setting, a backup
that goes on past a user it cannot back up, and client output piped into a reader that
stops early."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memoryd.cli.backup import backup
from memoryd.cli.main import main
from memoryd.core.memory.payload import content_hash, to_payload
from memoryd.core.models import Kind, MemoryRecord, Scope, Tier
from memoryd.stores.vectors.port import VectorPoint
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import ServerFactory
from tests.support.grants import new_key
from tests.support.rpc import scope

SERVICE_DIR = Path(__file__).resolve().parents[2] / "service"


def corrupt_memory(vectors: object, user_id: str) -> None:
    """A stored memory no version of memoryd can read back (an unknown kind)."""
    owner = Scope(tenant="default", user_id=user_id)
    record = MemoryRecord(id=str(uuid.uuid4()), tier=Tier.LONG_TERM, content="x", kind=Kind.NOTE)
    payload = to_payload(record, owner, content_hash(owner, Tier.LONG_TERM, "", "x"), 1024)
    payload["kind"] = "no-such-kind"
    dim = vectors.dim  # type: ignore[attr-defined]
    vectors.upsert([VectorPoint(record.id, [1.0] + [0.0] * (dim - 1), None, payload)])  # type: ignore[attr-defined]


async def test_a_backup_goes_on_past_a_user_it_cannot_back_up(
    start_server: ServerFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    s = await start_server()
    # Users are backed up in name order: the broken one comes first.
    broken, fine, also_fine = "user-a-broken", "user-b-fine", "user-c-fine"
    corrupt_memory(s.app.vectors, broken)
    for user in (fine, also_fine):
        await s.stub.Add(pb.AddRequest(scope=scope(user), tier=pb.TIER_LONG_TERM, content="ok"))

    report = await backup(s.app.engine, s.app.memory, s.app.backups, 1_700_000_000.0, 30)

    assert report.failed == [f"default/{broken}"]
    assert (report.users, report.items) == (2, 2)
    day = tmp_path / "data" / "backups" / "2023-11-14" / "default"
    assert sorted(p.name for p in day.iterdir()) == [f"{fine}.jsonl.gz", f"{also_fine}.jsonl.gz"]

    await s.server.stop(grace_s=0)  # the command runs with the server stopped
    monkeypatch.setenv("MEMORYD_DATA_DIR", str(tmp_path / "data"))
    assert await asyncio.to_thread(main, ["backup", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "1 users could not be backed up" in err and f"default/{broken}" in err


async def test_output_piped_into_a_reader_that_stops_early_ends_quietly(
    start_server: ServerFactory, user_id: str
) -> None:
    """`memoryd usage --user u | head -3`: the reader has gone before memoryd writes."""
    s = await start_server()
    await s.stub.Add(pb.AddRequest(scope=scope(user_id), tier=pb.TIER_LONG_TERM, content="hi"))
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to the pipe now fails: EPIPE
    env = {**os.environ, "PYTHONPATH": str(SERVICE_DIR)}
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "memoryd",
            "usage",
            "--user",
            user_id,
            "--target",
            f"127.0.0.1:{s.port}",
            stdout=write_end,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
    finally:
        os.close(write_end)
    _, stderr = await proc.communicate()
    assert proc.returncode == 0
    assert stderr.decode() == ""


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another program listens on."""
    with socket.create_server(("127.0.0.1", 0)) as other:
        yield other.getsockname()[1]


def serve_env(**variables: str) -> dict[str, str]:
    """`memoryd serve`'s environment: this checkout's code, no MEMORYD_* of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("MEMORYD_")}
    root = SERVICE_DIR.parent
    env["PYTHONPATH"] = os.pathsep.join(str(root / d) for d in ("service", "clients/python"))
    # Metrics on a free port unless a case names one: two refused starts on two workers
    # must not meet on the default port (the later one was refused for it instead).
    return {
        **env,
        "MEMORYD_LISTEN": "127.0.0.1:0",
        "MEMORYD_METRICS__LISTEN": "127.0.0.1:0",
        **variables,
    }


Case = Callable[[Path, int], dict[str, str]]
# Each: the variables of a start that must be refused, and what its one line must name.
REFUSED_STARTS: dict[str, tuple[Case, tuple[str, ...]]] = {
    "a negative limit": (
        lambda tmp, port: {"MEMORYD_LIMITS__MAX_CONTENT_BYTES": "-5"},
        ("MEMORYD_LIMITS__MAX_CONTENT_BYTES",),
    ),
    "an unknown log level": (
        lambda tmp, port: {"MEMORYD_LOG_LEVEL": "LOUD"},
        ("MEMORYD_LOG_LEVEL",),
    ),
    "an unknown quota profile": (
        lambda tmp, port: {"MEMORYD_QUOTAS__DEFAULT_PROFILE": "gold"},
        ("MEMORYD_QUOTAS__DEFAULT_PROFILE", "gold"),
    ),
    "user profiles that are not JSON": (
        lambda tmp, port: {"MEMORYD_QUOTAS__USER_PROFILES": "acme/alice=pro"},
        ("MEMORYD_QUOTAS__USER_PROFILES",),
    ),
    "a data directory that cannot be written": (
        lambda tmp, port: {"MEMORYD_DATA_DIR": str(tmp / "a-file" / "data")},
        ("MEMORYD_DATA_DIR",),
    ),
    "a redis url that is none": (
        lambda tmp, port: {"MEMORYD_REDIS_URL": "garbage"},
        ("MEMORYD_REDIS_URL",),
    ),
    "a metrics address that is none": (
        lambda tmp, port: {"MEMORYD_METRICS__LISTEN": "garbage"},
        ("MEMORYD_METRICS__LISTEN",),
    ),
    "a metrics port in use": (
        lambda tmp, port: {"MEMORYD_METRICS__LISTEN": f"127.0.0.1:{port}"},
        ("MEMORYD_METRICS__LISTEN", "port {port} is in use"),
    ),
    "a listen address that is none, with keys": (
        lambda tmp, port: {"MEMORYD_LISTEN": "garbage", "MEMORYD_AUTH__KEYS_FILE": str(tmp / "k")},
        ("MEMORYD_LISTEN",),
    ),
    "a port past 65535": (
        lambda tmp, port: {"MEMORYD_LISTEN": "127.0.0.1:99999"},
        ("MEMORYD_LISTEN", "99999"),
    ),
    "a negative port": (
        lambda tmp, port: {"MEMORYD_LISTEN": "127.0.0.1:-1"},
        ("MEMORYD_LISTEN", "-1"),
    ),
    "a misspelt variable": (
        lambda tmp, port: {"MEMORYD_LISEN": "127.0.0.1:1"},
        ("MEMORYD_LISEN", "did you mean MEMORYD_LISTEN?"),
    ),
    "a misspelt key in the config file": (
        lambda tmp, port: {"MEMORYD_CONFIG": str(tmp / "misspelt.toml")},
        ("working.max_entrie", "did you mean working.max_entries?"),
    ),
}


@pytest.mark.parametrize("case", REFUSED_STARTS)
def test_a_start_up_that_cannot_work_is_refused_in_one_line_naming_the_setting(
    case: str, tmp_path: Path, busy_port: int
) -> None:
    (tmp_path / "a-file").write_text("")
    (tmp_path / "misspelt.toml").write_text("[working]\nmax_entrie = 5\n")
    new_key(tmp_path / "k", "acme", "admin")
    variables, named = REFUSED_STARTS[case]
    env = serve_env(
        **{"MEMORYD_DATA_DIR": str(tmp_path / "data"), **variables(tmp_path, busy_port)}
    )
    done = subprocess.run(
        [sys.executable, "-m", "memoryd", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, done.stderr
    assert "start-up refused" in lines[0]
    for name in named:
        assert name.format(port=busy_port) in lines[0]
