"""`memoryd keys create|list|revoke`: API keys in the keys file (MEMORYD_AUTH__KEYS_FILE or
--keys-file). The file holds hashes and grants only; `create` prints the key once, alone
on the last line of stdout (its description goes to stderr), and it cannot be shown again.
A running server applies every change at its next call. Creations and revocations go to
the audit log (<data_dir>/audit/access.jsonl) with the key id.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memoryd.core.access import InvalidGrant, make_principal
from memoryd.core.models import AccessRole
from memoryd.settings import DEFAULT_PROFILE, Settings
from memoryd.stores.audit.jsonl_log import JsonlAuditLog
from memoryd.stores.audit.port import AuditLogError
from memoryd.stores.keys.file import KeysFile
from memoryd.stores.keys.port import KeyRecord, KeysFileError


def add_keys_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    keys = subparsers.add_parser("keys", help="create, list and revoke API keys")
    actions = keys.add_subparsers(dest="keys_command", required=True)

    def file_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--keys-file", type=Path, help="the keys file (default: MEMORYD_AUTH__KEYS_FILE)"
        )

    create = actions.add_parser("create", help="create a key; prints it once")
    file_option(create)
    create.add_argument("--tenant", required=True, help="the one tenant the key belongs to")
    create.add_argument(
        "--role", required=True, choices=[r.value for r in AccessRole], help="what it may do"
    )
    create.add_argument(
        "--user",
        dest="users",
        action="append",
        default=[],
        metavar="USER",
        help="a user the key may act for (repeatable; none: every user of the tenant; "
        "not with admin, which acts for every user)",
    )
    create.add_argument(
        "--rate-profile",
        dest="profile",
        metavar="PROFILE",
        help="the quota profile whose rate limits (queries and writes per minute) the key "
        "gets; storage quotas stay the user's (`memoryd usage` shows that quota profile). "
        "Default: the user's quota profile",
    )
    # Accepted, unlisted: `--profile` reads as "the key's quota profile", which it is not.
    create.add_argument("--profile", dest="profile", help=argparse.SUPPRESS)
    create.add_argument("--name", default="", help="a note on whom the key is for")

    listing = actions.add_parser("list", help="list keys (never their secrets)")
    file_option(listing)
    listing.add_argument("--tenant", help="only this tenant's keys")

    revoke = actions.add_parser("revoke", help="revoke a key at once")
    file_option(revoke)
    revoke.add_argument("key_id", help="the id shown by `memoryd keys list`")


def _now() -> str:
    return datetime.now(tz=UTC).isoformat(timespec="seconds")


def audit_local(settings: Settings, command: str, entry: dict[str, Any]) -> None:
    """An admin operation run on the server host (no credential: the operator's access to
    the data directory is the grant) goes to the same audit log as the server's."""
    log = JsonlAuditLog(settings.data_dir / "audit" / "access.jsonl")
    try:
        log.append({"time": _now(), **entry, "requested_by": f"memoryd {command} (local)"})
    except AuditLogError as exc:
        print(f"memoryd {command}: warning: audit log not written: {exc}", file=sys.stderr)


def run_keys_command(args: argparse.Namespace, settings: Settings) -> int:
    path: Path | None = args.keys_file or settings.auth.keys_file
    if path is None:
        print("memoryd keys: give --keys-file or set MEMORYD_AUTH__KEYS_FILE", file=sys.stderr)
        return 2
    keys = KeysFile(path)
    try:
        if args.keys_command == "create":
            return _create(keys, args, settings)
        if args.keys_command == "list":
            return _list(keys, args.tenant)
        return _revoke(keys, args.key_id, settings)
    except (KeysFileError, OSError) as exc:
        print(f"memoryd keys: {exc}", file=sys.stderr)
        return 1


def _create(keys: KeysFile, args: argparse.Namespace, settings: Settings) -> int:
    if args.role == AccessRole.ADMIN.value and args.users:
        print(
            "memoryd keys: an admin key acts for every user of its tenant: no --user",
            file=sys.stderr,
        )
        return 2
    known = set(settings.quotas.profiles) | {DEFAULT_PROFILE}
    if args.profile and args.profile not in known:
        print(
            f"memoryd keys: unknown quota profile {args.profile!r} for --rate-profile; "
            f"one of {', '.join(sorted(known))}",
            file=sys.stderr,
        )
        return 2
    try:  # the same checks the server makes on every call
        make_principal(
            tenant=args.tenant, role=args.role, users=args.users, subject="", credential="api_key"
        )
    except InvalidGrant as exc:
        print(f"memoryd keys: {exc}", file=sys.stderr)
        return 2
    record, token = keys.create(
        tenant=args.tenant,
        role=args.role,
        users=args.users,
        profile=args.profile,
        name=args.name,
        created_at=_now(),
    )
    audit_local(settings, "keys", {"event": "key_created", "key_id": record.id, **_grants(record)})
    print(f"created key {record.id}: {_describe(record)}", file=sys.stderr)
    print("the key follows; it is shown only now:", file=sys.stderr)
    sys.stderr.flush()
    print(token)
    return 0


def _grants(record: KeyRecord) -> dict[str, Any]:
    return {
        "tenant": record.tenant,
        "role": record.role,
        "users": list(record.users),
        "profile": record.profile,
    }


def _describe(record: KeyRecord) -> str:
    users = ", ".join(record.users) if record.users else "every user"
    text = f"tenant {record.tenant}, role {record.role}, {users}"
    if record.profile:
        text += f", rate limits of quota profile {record.profile}"
    if record.name:
        text += f" ({record.name})"
    return text


def _list(keys: KeysFile, tenant: str | None) -> int:
    rows = [("id", "tenant", "role", "users", "rate_profile", "created", "status", "name")]
    for r in keys.records():
        if tenant and r.tenant != tenant:
            continue
        status = f"revoked {r.revoked_at}" if r.revoked else "active"
        users = ",".join(r.users) or "*"
        rows.append((r.id, r.tenant, r.role, users, r.profile or "-", r.created_at, status, r.name))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _revoke(keys: KeysFile, key_id: str, settings: Settings) -> int:
    try:
        record = keys.revoke(key_id, _now())
    except KeyError:
        print(f"memoryd keys: no key {key_id!r} in {keys.path}", file=sys.stderr)
        return 1
    audit_local(settings, "keys", {"event": "key_revoked", "key_id": record.id, **_grants(record)})
    print(f"revoked key {record.id} ({_describe(record)}) at {record.revoked_at}")
    return 0
