"""The user-directory contract, the same for every adapter (in-process, Redis, Redis
Cluster): a tenant's users come back in id order, page after page, filtered by prefix,
with their latest activity, and never another tenant's."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from memoryd.stores import usage
from memoryd.stores.usage.port import SeenUser, UserDirectory
from tests.conftest import redis_settings


@pytest.fixture(params=sorted(usage.DIRECTORY_ADAPTERS))
async def directory(request: pytest.FixtureRequest) -> AsyncIterator[UserDirectory]:
    store = usage.DIRECTORY_ADAPTERS[request.param](redis_settings(request, request.param))
    yield store
    await store.close()


@pytest.fixture
def tenant() -> str:
    return f"acme-{uuid.uuid4().hex[:8]}"


async def test_users_come_back_in_id_order_page_after_page(
    directory: UserDirectory, tenant: str
) -> None:
    for i in (3, 1, 4, 0, 2):
        await directory.note(tenant, f"user-{i}", 100.0 + i)
    first = await directory.page(tenant, limit=2)
    assert [u.user_id for u in first] == ["user-0", "user-1"]
    second = await directory.page(tenant, after=first[-1].user_id, limit=2)
    assert [u.user_id for u in second] == ["user-2", "user-3"]
    last = await directory.page(tenant, after=second[-1].user_id, limit=2)
    assert last == [SeenUser("user-4", 104.0)]
    assert await directory.page(tenant, after="user-4", limit=2) == []


async def test_a_prefix_selects_the_users_whose_id_starts_with_it(
    directory: UserDirectory, tenant: str
) -> None:
    for user in ("alice", "alfred", "bob", "al", "älvar"):
        await directory.note(tenant, user, 1.0)
    found = await directory.page(tenant, prefix="al", limit=10)
    assert [u.user_id for u in found] == ["al", "alfred", "alice"]
    paged = await directory.page(tenant, prefix="al", after="alfred", limit=10)
    assert [u.user_id for u in paged] == ["alice"]
    assert [u.user_id for u in await directory.page(tenant, prefix="ä", limit=10)] == ["älvar"]


async def test_the_last_activity_only_moves_forward(directory: UserDirectory, tenant: str) -> None:
    await directory.note(tenant, "u", 200.5)
    await directory.note(tenant, "u", 100.0)  # a late write from a slower replica
    assert await directory.page(tenant, limit=5) == [SeenUser("u", 200.5)]
    await directory.note(tenant, "u", 300.25)
    assert await directory.page(tenant, limit=5) == [SeenUser("u", 300.25)]


async def test_a_removed_user_is_no_longer_listed(directory: UserDirectory, tenant: str) -> None:
    await directory.note(tenant, "gone", 1.0)
    await directory.note(tenant, "kept", 1.0)
    await directory.remove(tenant, "gone")
    await directory.remove(tenant, "never-there")
    assert [u.user_id for u in await directory.page(tenant, limit=5)] == ["kept"]


async def test_tenants_never_see_each_others_users(directory: UserDirectory, tenant: str) -> None:
    other = f"{tenant}-other"
    await directory.note(tenant, "mine", 1.0)
    await directory.note(other, "theirs", 1.0)
    assert [u.user_id for u in await directory.page(tenant, limit=5)] == ["mine"]
    assert [u.user_id for u in await directory.page(other, limit=5)] == ["theirs"]
