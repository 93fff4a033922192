"""Grants: what each role may do, for which users. No store is consulted, so a refusal
cannot tell whether another user exists."""

from __future__ import annotations

import pytest

from memoryd.core.access import (
    ADMIN_ACTIONS,
    Action,
    InvalidGrant,
    anonymous,
    authorize,
    make_principal,
)
from memoryd.core.errors import PermissionDenied
from memoryd.core.models import AccessRole, Principal
from memoryd.transport.identity import ACTIONS, action_of, is_loopback
from memoryd.v1 import memory_pb2 as pb


def principal(role: str, users: tuple[str, ...] = ()) -> Principal:
    return make_principal(
        tenant="acme", role=role, users=users, subject="t", credential="api_key", key_id="k1"
    )


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        ("reader", {Action.READ, Action.LIST}),
        ("agent", {Action.READ, Action.WRITE}),
        ("admin", {Action.READ, Action.WRITE, Action.LIST, Action.ERASE, Action.RESTORE}),
    ],
)
def test_each_role_has_exactly_its_grants(role: str, allowed: set[Action]) -> None:
    who = principal(role)
    for action in Action:
        if action in allowed:
            authorize(who, action, "alice")
        else:
            with pytest.raises(PermissionDenied) as caught:
                authorize(who, action, "alice")
            assert caught.value.reason == "ROLE_NOT_GRANTED"


def test_erasing_and_restoring_are_the_admin_only_actions() -> None:
    assert {Action.ERASE, Action.RESTORE} == ADMIN_ACTIONS


def test_a_bound_credential_reaches_its_users_only_and_says_the_same_for_every_other() -> None:
    who = principal("agent", ("alice", "bob"))
    authorize(who, Action.WRITE, "alice")
    authorize(who, Action.READ, "bob")
    answers = []
    for other in ("carol", "nobody-ever-created", "alice2"):
        with pytest.raises(PermissionDenied) as caught:
            authorize(who, Action.READ, other)
        assert caught.value.reason == "USER_NOT_GRANTED"
        answers.append((str(caught.value), caught.value.metadata))
    assert len(set(map(str, answers))) == 1


def test_an_unbound_agent_reaches_every_user_of_its_tenant() -> None:
    authorize(principal("agent"), Action.WRITE, "anyone")


def test_admin_credentials_are_never_bound_to_users() -> None:
    admin = make_principal(
        tenant="acme", role="admin", users=["alice"], subject="t", credential="jwt"
    )
    assert admin.users == frozenset()
    authorize(admin, Action.ERASE, "bob")


def test_claims_that_make_no_principal_are_refused() -> None:
    for bad in (
        {"tenant": "", "role": "agent"},
        {"tenant": "acme", "role": "owner"},
        {"tenant": "ac\nme", "role": "agent"},
    ):
        with pytest.raises(InvalidGrant):
            make_principal(**bad, subject="t", credential="jwt")  # type: ignore[arg-type]


def test_with_auth_off_every_caller_is_the_default_tenant_with_every_grant() -> None:
    who = anonymous("default")
    assert (who.tenant, who.role, who.authenticated) == ("default", AccessRole.ADMIN, False)
    for action in Action:
        authorize(who, action, "anyone")


def test_every_rpc_of_the_service_has_an_action() -> None:
    service = pb.DESCRIPTOR.services_by_name["MemoryService"]
    assert {m.name for m in service.methods} <= set(ACTIONS)


def test_prune_all_erases_with_no_tier_or_on_an_archived_tier_and_else_writes() -> None:
    def prune_all(*tiers: pb.Tier.ValueType) -> pb.PruneRequest:
        return pb.PruneRequest(strategy=pb.PRUNE_STRATEGY_ALL, tiers=tiers)

    every_tier = [t for t in pb.Tier.values() if t != pb.TIER_UNSPECIFIED]
    assert action_of("Prune", prune_all()) is Action.ERASE
    assert action_of("Prune", prune_all(*every_tier)) is Action.ERASE
    for archived in (pb.TIER_LONG_TERM, pb.TIER_EPISODIC, pb.TIER_STRUCTURED):
        assert action_of("Prune", prune_all(pb.TIER_WORKING, archived)) is Action.ERASE
    assert action_of("Prune", prune_all(pb.TIER_WORKING)) is Action.WRITE  # a task ends
    assert action_of("Prune", prune_all(pb.TIER_SHORT_TERM, pb.TIER_PERSONA)) is Action.WRITE
    oldest = pb.PruneRequest(strategy=pb.PRUNE_STRATEGY_OLDEST_PERCENT, tiers=every_tier)
    assert action_of("Prune", oldest) is Action.WRITE
    assert action_of("Import", None) is Action.RESTORE
    assert action_of("SomethingNew", None) is None


@pytest.mark.parametrize(
    ("listen", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("localhost:50051", True),
        ("[::1]:50051", True),
        ("unix:/tmp/memoryd.sock", True),
        ("0.0.0.0:50051", False),
        ("[::]:50051", False),
        ("10.1.2.3:50051", False),
        ("memoryd.internal:50051", False),
    ],
)
def test_what_counts_as_loopback(listen: str, loopback: bool) -> None:
    assert is_loopback(listen) is loopback
