"""The hot store contract: every adapter (in-process, Redis) behaves the same."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from memoryd.stores.hot.port import (
    EntryLimitReached,
    HotStore,
    SessionKey,
    SessionMessage,
    TaskKey,
    WorkingEntry,
)


def a_task(user: str = "") -> TaskKey:
    return TaskKey("default", user or uuid.uuid4().hex, "agent", "task-1")


def a_session(user: str = "") -> SessionKey:
    return SessionKey("default", user or uuid.uuid4().hex, "session-1")


def entry(key: str, content: str = "value", created: float = 1.0) -> WorkingEntry:
    return WorkingEntry(
        key=key,
        id=f"id-{key}",
        content=content,
        size=len(key) + len(content),
        metadata={"m": "1"},
        created_at=created,
        updated_at=created,
    )


def message(n: int, content: str = "", size: int | None = None) -> SessionMessage:
    text = content or f"message {n}"
    return SessionMessage(
        id=f"m{n}", content=text, role="user", created_at=float(n), size=size or len(text)
    )


async def test_entries_round_trip_with_their_fields(hot_store: HotStore) -> None:
    task = a_task()
    outcome = await hot_store.put_entry(task, entry("city", "Paris"), 100, 10_000)
    assert outcome.replaced is False and outcome.count == 1 and outcome.evicted_keys == []
    [got] = await hot_store.get_entries(task, ["city", "missing"])
    assert (got.key, got.id, got.content, got.metadata) == ("city", "id-city", "Paris", {"m": "1"})


async def test_replacing_a_key_keeps_its_creation_time(hot_store: HotStore) -> None:
    task = a_task()
    await hot_store.put_entry(task, entry("city", "Paris", created=1.0), 100, 10_000)
    outcome = await hot_store.put_entry(task, entry("city", "Rome", created=5.0), 100, 10_000)
    assert outcome.replaced is True and outcome.count == 1
    [got] = await hot_store.get_entries(task, ["city"])
    assert got.content == "Rome" and got.created_at == 1.0


async def test_a_new_key_past_the_entry_limit_is_refused_and_nothing_written(
    hot_store: HotStore,
) -> None:
    task = a_task()
    for i in range(3):
        await hot_store.put_entry(task, entry(f"k{i}"), 3, 10_000)
    with pytest.raises(EntryLimitReached):
        await hot_store.put_entry(task, entry("k3"), 3, 10_000)
    assert {e.key for e in await hot_store.list_entries(task)} == {"k0", "k1", "k2"}
    # Replacing an existing key at the limit is fine.
    assert (await hot_store.put_entry(task, entry("k1", "new"), 3, 10_000)).replaced


async def test_the_least_recently_used_entries_are_evicted_past_the_size(
    hot_store: HotStore,
) -> None:
    task = a_task()
    for key in ("a", "b", "c"):  # each entry is 1 + 9 = 10 bytes
        await hot_store.put_entry(task, entry(key, "x" * 9), 100, 30)
    await hot_store.get_entries(task, ["a"])  # "a" is now more recent than "b"
    outcome = await hot_store.put_entry(task, entry("d", "x" * 9), 100, 30)
    assert outcome.evicted_keys == ["b"]
    assert {e.key for e in await hot_store.list_entries(task)} == {"a", "c", "d"}


async def test_eviction_frees_as_much_as_a_large_entry_needs(hot_store: HotStore) -> None:
    task = a_task()
    for key in ("a", "b", "c"):
        await hot_store.put_entry(task, entry(key, "x" * 9), 100, 30)
    outcome = await hot_store.put_entry(task, entry("big", "x" * 17), 100, 30)
    assert outcome.evicted_keys == ["a", "b"]
    assert [e.key for e in await hot_store.list_entries(task)] == ["big", "c"]


async def test_room_freed_by_a_replacement_or_a_delete_is_used_before_evicting(
    hot_store: HotStore,
) -> None:
    task = a_task()
    for key in ("a", "b", "c"):  # 10 bytes each: the task is full at 30
        await hot_store.put_entry(task, entry(key, "x" * 9), 100, 30)
    shrunk = await hot_store.put_entry(task, entry("a", "x"), 100, 30)  # 2 bytes now
    assert shrunk.evicted_keys == [] and shrunk.replaced
    await hot_store.delete_entries(task, ["b", "b", "missing"])
    # 2 + 10 in the task: an 18-byte entry fits beside them, a 19-byte one does not.
    fits = await hot_store.put_entry(task, entry("d", "x" * 17), 100, 30)
    assert fits.evicted_keys == []
    grown = await hot_store.put_entry(task, entry("d", "x" * 18), 100, 30)
    assert grown.evicted_keys == ["c"] and grown.replaced  # "a" was written since
    assert sorted(e.key for e in await hot_store.list_entries(task)) == ["a", "d"]


async def test_list_is_most_recently_used_first(hot_store: HotStore) -> None:
    task = a_task()
    for key in ("a", "b", "c"):
        await hot_store.put_entry(task, entry(key), 100, 10_000)
    await hot_store.get_entries(task, ["a"])
    assert [e.key for e in await hot_store.list_entries(task)] == ["a", "c", "b"]


async def test_delete_and_clear_count_what_went(hot_store: HotStore) -> None:
    task = a_task()
    for key in ("a", "b", "c"):
        await hot_store.put_entry(task, entry(key), 100, 10_000)
    assert await hot_store.delete_entries(task, ["a", "zzz"]) == 1
    assert await hot_store.clear_task(task) == 2
    assert await hot_store.list_entries(task) == []
    assert await hot_store.clear_task(task) == 0


async def test_scopes_are_isolated(hot_store: HotStore) -> None:
    mine, theirs = a_task("alice"), a_task("bob")
    await hot_store.put_entry(mine, entry("secret"), 100, 10_000)
    assert await hot_store.get_entries(theirs, ["secret"]) == []
    other_task = TaskKey("default", "alice", "agent", "task-2")
    assert await hot_store.list_entries(other_task) == []
    other_tenant = TaskKey("acme", "alice", "agent", "task-1")
    assert await hot_store.list_entries(other_tenant) == []


async def test_ids_with_separators_cannot_collide(hot_store: HotStore) -> None:
    await hot_store.put_entry(TaskKey("t", "a:b", "c", "d"), entry("k"), 100, 10_000)
    assert await hot_store.list_entries(TaskKey("t", "a", "b:c", "d")) == []


async def test_concurrent_writers_never_pass_the_entry_limit(hot_store: HotStore) -> None:
    task = a_task()

    async def put(i: int) -> bool:
        try:
            await hot_store.put_entry(task, entry(f"k{i}"), 10, 10_000)
            return True
        except EntryLimitReached:
            return False

    results = await asyncio.gather(*(put(i) for i in range(30)))
    assert sum(results) == 10
    assert len(await hot_store.list_entries(task)) == 10


async def test_messages_come_back_oldest_first(hot_store: HotStore) -> None:
    session = a_session()
    for n in range(3):
        await hot_store.append_message(session, message(n), 100, 10_000, 60)
    assert [m.id for m in await hot_store.list_messages(session)] == ["m0", "m1", "m2"]


async def test_only_the_newest_messages_are_kept(hot_store: HotStore) -> None:
    session = a_session()
    outcome = None
    for n in range(105):
        outcome = await hot_store.append_message(session, message(n), 100, 1_000_000, 60)
    assert outcome is not None and outcome.count == 100 and outcome.dropped == 1
    messages = await hot_store.list_messages(session)
    assert len(messages) == 100 and messages[0].id == "m5" and messages[-1].id == "m104"


async def test_oldest_messages_are_dropped_past_the_byte_limit(hot_store: HotStore) -> None:
    session = a_session()
    for n in range(5):
        await hot_store.append_message(session, message(n, "x" * 40), 100, 100, 60)
    assert [m.id for m in await hot_store.list_messages(session)] == ["m3", "m4"]


async def test_deleting_messages_by_id(hot_store: HotStore) -> None:
    session = a_session()
    for n in range(3):
        await hot_store.append_message(session, message(n, "x" * 40), 100, 120, 60)
    assert await hot_store.delete_messages(session, ["m1", "nope"]) == 1
    assert [m.id for m in await hot_store.list_messages(session)] == ["m0", "m2"]
    # The byte total followed the delete: two more 40-byte messages fit without a drop.
    outcome = await hot_store.append_message(session, message(3, "x" * 40), 100, 120, 60)
    assert outcome.dropped == 0


async def test_a_session_expires_after_its_ttl(hot_store: HotStore) -> None:
    session = a_session()
    await hot_store.append_message(session, message(0), 100, 10_000, 1)
    assert len(await hot_store.list_messages(session)) == 1
    await asyncio.sleep(2.1)
    assert await hot_store.list_messages(session) == []


async def test_clearing_a_session(hot_store: HotStore) -> None:
    session = a_session()
    for n in range(2):
        await hot_store.append_message(session, message(n), 100, 10_000, 60)
    assert await hot_store.clear_session(session) == 2
    assert await hot_store.list_messages(session) == []


async def test_ping_answers(hot_store: HotStore) -> None:
    assert await hot_store.ping() is True


async def test_a_users_tasks_are_listed_and_nobody_elses(hot_store: HotStore) -> None:
    user = uuid.uuid4().hex
    first = TaskKey("default", user, "agent", "task-1")
    odd = TaskKey("default", user, "", "task:with/odd*chars")
    await hot_store.put_entry(first, entry("a"), 100, 10_000)
    await hot_store.put_entry(odd, entry("b"), 100, 10_000)
    await hot_store.put_entry(
        TaskKey("default", uuid.uuid4().hex, "agent", "x"), entry("c"), 100, 10_000
    )
    await hot_store.put_entry(TaskKey("other-tenant", user, "agent", "y"), entry("d"), 100, 10_000)
    assert set(await hot_store.list_tasks("default", user)) == {first, odd}


async def test_a_cleared_task_is_no_longer_listed(hot_store: HotStore) -> None:
    task = a_task()
    await hot_store.put_entry(task, entry("a"), 100, 10_000)
    await hot_store.clear_task(task)
    assert await hot_store.list_tasks(task.tenant, task.user_id) == []


async def test_a_users_sessions_are_listed_and_nobody_elses(hot_store: HotStore) -> None:
    user = uuid.uuid4().hex
    first = SessionKey("default", user, "s1")
    odd = SessionKey("default", user, "s:2*?[x]")
    for session in (first, odd, SessionKey("default", uuid.uuid4().hex, "s1")):
        await hot_store.append_message(session, message(1), 100, 10_000, 60)
    assert set(await hot_store.list_sessions("default", user)) == {first, odd}


async def test_a_cleared_session_is_no_longer_listed(hot_store: HotStore) -> None:
    session = a_session()
    await hot_store.append_message(session, message(1), 100, 10_000, 60)
    await hot_store.clear_session(session)
    assert await hot_store.list_sessions(session.tenant, session.user_id) == []
