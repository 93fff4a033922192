"""The cold archive store contract: gzip JSONL partitions per tenant/user/tier/month."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memoryd.stores.archive.jsonl_store import JsonlArchiveStore, escape_part
from memoryd.stores.archive.port import ArchiveStore

Opener = Callable[[], ArchiveStore]

JAN_2024 = datetime(2024, 1, 15, 12, tzinfo=UTC).timestamp()
MAR_2024 = datetime(2024, 3, 31, 23, 59, tzinfo=UTC).timestamp()


def rec(n: int, created_at: float = JAN_2024, **extra: object) -> dict[str, object]:
    return {"id": f"m{n}", "created_at": created_at, "content": f"memory {n}", **extra}


@pytest.fixture
def open_store(tmp_path: Path) -> Opener:
    """Opens the same archive again on each call, as a restarted process would."""
    return lambda: JsonlArchiveStore(tmp_path / "archive")


def test_appended_records_come_back_in_order(open_store: Opener) -> None:
    store = open_store()
    assert store.append("t", "alice", "long_term", [rec(1), rec(2)]) == 2
    store.append("t", "alice", "long_term", [rec(3)])
    assert [r["id"] for r in store.iter_records("t", "alice", "long_term")] == ["m1", "m2", "m3"]
    assert store.count("t", "alice") == 3


def test_records_survive_reopening_with_every_field(open_store: Opener) -> None:
    record = rec(1, metadata={"k": "v"}, content="café ☕ " * 300, deleted=False)
    open_store().append("t", "alice", "long_term", [record])
    assert list(open_store().iter_records("t", "alice")) == [record]


def test_users_tenants_and_tiers_are_apart(open_store: Opener) -> None:
    store = open_store()
    store.append("t", "alice", "long_term", [rec(1)])
    store.append("t", "alice", "structured", [rec(2)])
    store.append("t", "bob", "long_term", [rec(3)])
    store.append("other", "alice", "long_term", [rec(4)])
    assert [r["id"] for r in store.iter_records("t", "alice", "long_term")] == ["m1"]
    assert {r["id"] for r in store.iter_records("t", "alice")} == {"m1", "m2"}
    assert store.count("t", "alice", "structured") == 1
    assert store.count("t", "bob") == 1 and store.count("other", "alice") == 1
    assert store.count("t", "nobody") == 0
    assert list(store.iter_records("t", "nobody", "long_term")) == []


def test_partitions_by_created_month_utc(tmp_path: Path, open_store: Opener) -> None:
    store = open_store()
    store.append("t", "alice", "long_term", [rec(1, JAN_2024), rec(2, MAR_2024), rec(3, JAN_2024)])
    tier_dir = tmp_path / "archive" / "t" / "alice" / "long_term"
    assert sorted(p.name for p in tier_dir.iterdir()) == ["2024-01.jsonl.gz", "2024-03.jsonl.gz"]
    with gzip.open(tier_dir / "2024-01.jsonl.gz", "rt", encoding="utf-8") as f:
        assert [json.loads(line)["id"] for line in f] == ["m1", "m3"]
    # Oldest partition first.
    assert [r["id"] for r in store.iter_records("t", "alice")] == ["m1", "m3", "m2"]


def test_each_append_is_a_separate_gzip_member_read_as_one(
    tmp_path: Path, open_store: Opener
) -> None:
    store = open_store()
    for n in range(3):
        store.append("t", "alice", "long_term", [rec(n)])
    path = tmp_path / "archive" / "t" / "alice" / "long_term" / "2024-01.jsonl.gz"
    assert path.read_bytes().count(b"\x1f\x8b\x08") >= 3
    assert [r["id"] for r in store.iter_records("t", "alice")] == ["m0", "m1", "m2"]


def test_a_member_cut_short_keeps_what_precedes_it(tmp_path: Path, open_store: Opener) -> None:
    store = open_store()
    store.append("t", "alice", "long_term", [rec(1)])
    path = tmp_path / "archive" / "t" / "alice" / "long_term" / "2024-01.jsonl.gz"
    member = gzip.compress(b'{"id":"m2","created_at":0,"content":"' + b"x" * 5000 + b'"}\n')
    torn = member[: len(member) // 2]
    with path.open("ab") as f:
        f.write(torn)
    assert [r["id"] for r in open_store().iter_records("t", "alice")] == ["m1"]


@pytest.mark.parametrize("hostile", ["..", ".", "../../etc", "a/b", "a\\b", "%2E%2E", "\x00", "é"])
def test_ids_never_escape_the_archive_directory(
    tmp_path: Path, open_store: Opener, hostile: str
) -> None:
    store = open_store()
    store.append(hostile, hostile, hostile, [rec(1)])
    root = (tmp_path / "archive").resolve()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and all(root in p.resolve().parents for p in files)
    assert [r["id"] for r in store.iter_records(hostile, hostile, hostile)] == ["m1"]
    assert store.count(hostile, "other") == 0


def test_escaping_is_collision_free_and_bounded() -> None:
    names = ["a/b", "a%2Fb", "a_b", "a-b", "A", "a", "..", "%2E%2E"]
    escaped = [escape_part(n) for n in names]
    assert len(set(escaped)) == len(names)
    assert all(e not in (".", "..") and "/" not in e for e in escaped)
    long = [escape_part("é" * 128), escape_part("é" * 127 + "e")]
    assert all(len(e.encode()) <= 255 for e in long) and long[0] != long[1]


def test_delete_user_erases_only_that_user(open_store: Opener) -> None:
    store = open_store()
    store.append("t", "alice", "long_term", [rec(1), rec(2, MAR_2024)])
    store.append("t", "alice", "structured", [rec(3)])
    store.append("t", "bob", "long_term", [rec(4)])
    assert store.delete_user("t", "alice", "long_term") == 2
    assert store.count("t", "alice", "long_term") == 0
    assert store.count("t", "alice", "structured") == 1
    assert store.delete_user("t", "alice") == 1
    assert store.count("t", "alice") == 0
    assert store.count("t", "bob") == 1
    assert store.delete_user("t", "nobody") == 0
    store.append("t", "alice", "long_term", [rec(5)])
    assert [r["id"] for r in open_store().iter_records("t", "alice")] == ["m5"]
