"""What an operator meets: a backup that goes on past a user it cannot back up, and
client output piped into a reader that stops early."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path

import pytest

from conftest import ServerFactory
from memoryd.cli.backup import backup
from memoryd.cli.main import main
from memoryd.core.memory.payload import content_hash, to_payload
from memoryd.core.models import Kind, MemoryRecord, Scope, Tier
from memoryd.stores.vectors.port import VectorPoint
from memoryd.v1 import memory_pb2 as pb
from rpc import scope

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
    assert s.app.memory is not None and s.app.backups is not None
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
