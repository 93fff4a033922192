"""Who may do what: the grants of each role, checked on every call before any store is read.

The transport proves a credential (API key, JWT, client certificate) and turns it into a
`Principal`: one tenant, one role, and the users it may act for. The tenant of every scope
comes from the principal; the user a request names must be one the principal grants.
Nothing here looks at stored data, so a refusal cannot tell whether another user exists.

| role   | may                                                                   |
|--------|-----------------------------------------------------------------------|
| reader | READ: Retrieve, Get, RenderContext, Export, Usage, ListMemories; LIST: ListUsers |
| agent  | READ and WRITE: also Add, Delete, Prune (not an erasure), EndSession           |
| admin  | everything: also LIST, ERASE and RESTORE (Import)                              |

ERASE is Prune ALL with no tier named (the whole user), or naming a tier that keeps a cold
archive (the tier and its archive): transport/identity.py `action_of` tells them apart.

agent and reader credentials may be bound to users (then only those); admin ones act for
every user of their tenant.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

from memoryd.core.errors import PermissionDenied, echo
from memoryd.core.models import AccessRole, Principal


class Action(StrEnum):
    READ = "read"
    WRITE = "write"
    # Erasing a user everywhere (tiers, archive, backups), or a tier with its cold archive.
    ERASE = "erase"
    # Writing a whole export back (Import); backup/restore are its local counterparts.
    RESTORE = "restore"
    # Listing the tenant's users (operators: reader and admin; an agent acts for users,
    # it has no business enumerating them).
    LIST = "list"


GRANTS: Mapping[AccessRole, frozenset[Action]] = {
    AccessRole.READER: frozenset({Action.READ, Action.LIST}),
    AccessRole.AGENT: frozenset({Action.READ, Action.WRITE}),
    AccessRole.ADMIN: frozenset(Action),
}

# Actions only an admin may take: each one goes to the audit log.
ADMIN_ACTIONS: frozenset[Action] = (
    GRANTS[AccessRole.ADMIN] - GRANTS[AccessRole.AGENT] - GRANTS[AccessRole.READER]
)


class InvalidGrant(ValueError):
    """A credential's claims do not make a principal (unknown role, no tenant, ...)."""


def parse_role(value: object) -> AccessRole:
    try:
        return AccessRole(str(value).strip().lower())
    except ValueError:
        roles = ", ".join(r.value for r in AccessRole)
        raise InvalidGrant(f"role {echo(str(value))!r} is not one of {roles}") from None


def _check_name(what: str, value: str) -> str:
    if not value or not value.strip() or any(ord(c) < 32 for c in value):
        raise InvalidGrant(f"{what} {echo(value)!r} is empty or has control characters")
    return value


def make_principal(
    *,
    tenant: str,
    role: AccessRole | str,
    users: Iterable[str] = (),
    subject: str,
    credential: str,
    key_id: str = "",
    profile: str | None = None,
) -> Principal:
    """The principal of a proven credential; raises InvalidGrant when its claims are unusable.

    An admin acts for every user of its tenant, so users given with one are ignored."""
    access = role if isinstance(role, AccessRole) else parse_role(role)
    bound = frozenset(_check_name("user", u) for u in users)
    return Principal(
        tenant=_check_name("tenant", tenant),
        subject=subject,
        role=access,
        users=frozenset() if access is AccessRole.ADMIN else bound,
        credential=credential,
        key_id=key_id,
        profile=profile or None,
    )


def anonymous(tenant: str) -> Principal:
    """Every caller when no credential is configured: one tenant, every grant, no limits."""
    return Principal(tenant=tenant)


def authorize(principal: Principal, action: Action, user_id: str) -> None:
    """Refuse (PERMISSION_DENIED) an action or a user outside the principal's grants.

    An empty user_id passes here: every request needs one, and validation refuses it."""
    if action not in GRANTS[principal.role]:
        raise PermissionDenied(
            "ROLE_NOT_GRANTED",
            f"a credential of role {principal.role.value} may not {action.value}",
            {"role": principal.role.value, "action": action.value},
        )
    if principal.users and user_id and user_id not in principal.users:
        # Same answer for every user not granted, existing or not.
        raise PermissionDenied(
            "USER_NOT_GRANTED",
            "this credential does not grant access to the user_id asked for",
            {"role": principal.role.value, "action": action.value},
        )
