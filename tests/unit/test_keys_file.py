"""The API keys file: hashes and grants only, append-only, re-read on change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memoryd.core.credentials import ApiKeys
from memoryd.core.errors import Unauthenticated
from memoryd.core.models import AccessRole
from memoryd.stores.keys.file import KeysFile
from memoryd.stores.keys.port import KeysFileError, key_id_of, token_hash

NOW = "2025-01-01T00:00:00+00:00"


def test_a_new_key_is_random_256_bit_and_only_its_hash_is_stored(tmp_path: Path) -> None:
    keys = KeysFile(tmp_path / "keys.jsonl")
    record, token = keys.create(tenant="acme", role="agent", users=["alice"], created_at=NOW)
    _, again = keys.create(tenant="acme", role="agent", created_at=NOW)
    assert token != again
    assert key_id_of(token) == record.id
    secret = token.split("_", 2)[2]
    assert len(secret) >= 43  # 32 random bytes, base64url
    text = (tmp_path / "keys.jsonl").read_text()
    assert secret not in text and token not in text
    assert json.loads(text.splitlines()[0])["hash"] == token_hash(token)
    assert (tmp_path / "keys.jsonl").stat().st_mode & 0o777 == 0o600


def test_a_key_proves_its_grants(tmp_path: Path) -> None:
    keys = KeysFile(tmp_path / "keys.jsonl")
    _, token = keys.create(
        tenant="acme", role="reader", users=["alice", "bob"], profile="free", created_at=NOW
    )
    who = ApiKeys(KeysFile(tmp_path / "keys.jsonl")).verify(token)
    assert (who.tenant, who.role, who.users) == (
        "acme",
        AccessRole.READER,
        frozenset({"alice", "bob"}),
    )
    assert (who.credential, who.profile) == ("api_key", "free")
    assert who.key_id == key_id_of(token)


@pytest.mark.parametrize(
    "forged",
    [
        "mdk_000000000000_" + "A" * 43,  # unknown id
        "nonsense",
        "",
    ],
)
def test_unknown_or_malformed_keys_are_refused(tmp_path: Path, forged: str) -> None:
    keys = KeysFile(tmp_path / "keys.jsonl")
    keys.create(tenant="acme", role="agent", created_at=NOW)
    with pytest.raises(Unauthenticated) as caught:
        ApiKeys(keys).verify(forged)
    assert caught.value.reason == "CREDENTIAL_INVALID"


def test_a_known_id_with_a_wrong_secret_is_refused_naming_the_id_for_the_audit_only(
    tmp_path: Path,
) -> None:
    keys = KeysFile(tmp_path / "keys.jsonl")
    record, token = keys.create(tenant="acme", role="agent", created_at=NOW)
    wrong = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    with pytest.raises(Unauthenticated) as caught:
        ApiKeys(keys).verify(wrong)
    assert caught.value.key_id == record.id
    assert str(caught.value) == "invalid API key"


def test_the_reader_sees_new_and_revoked_keys_at_its_next_call(tmp_path: Path) -> None:
    path = tmp_path / "keys.jsonl"
    writer = KeysFile(path)
    _, first = writer.create(tenant="acme", role="agent", created_at=NOW)
    server = ApiKeys(KeysFile(path))
    server.verify(first)
    record, second = writer.create(tenant="acme", role="agent", created_at=NOW)
    assert server.verify(second).key_id == record.id
    writer.revoke(record.id, NOW)
    with pytest.raises(Unauthenticated) as caught:
        server.verify(second)
    assert caught.value.detail == "revoked key"
    server.verify(first)


def test_revoking_an_unknown_key_is_an_error_and_twice_changes_nothing(tmp_path: Path) -> None:
    keys = KeysFile(tmp_path / "keys.jsonl")
    with pytest.raises(KeyError):
        keys.revoke("abcdef123456", NOW)
    record, _ = keys.create(tenant="acme", role="agent", created_at=NOW)
    keys.revoke(record.id, NOW)
    lines = (tmp_path / "keys.jsonl").read_text().splitlines()
    assert keys.revoke(record.id, "later").revoked_at == NOW
    assert (tmp_path / "keys.jsonl").read_text().splitlines() == lines


def test_a_line_still_being_written_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "keys.jsonl"
    keys = KeysFile(path)
    _, token = keys.create(tenant="acme", role="agent", created_at=NOW)
    with path.open("a") as f:
        f.write('{"type":"revocation","id":')
    assert ApiKeys(KeysFile(path)).verify(token).tenant == "acme"


def test_a_malformed_file_makes_every_key_fail_until_fixed(tmp_path: Path) -> None:
    path = tmp_path / "keys.jsonl"
    keys = KeysFile(path)
    _, token = keys.create(tenant="acme", role="agent", created_at=NOW)
    server = ApiKeys(KeysFile(path))
    server.verify(token)
    good = path.read_text()
    path.write_text(good + "this is not json\n")
    with pytest.raises(Unauthenticated):
        server.verify(token)  # it may have been a revocation: fail closed
    with pytest.raises(KeysFileError):
        server.check_readable()
    path.write_text(good)
    assert server.verify(token).tenant == "acme"


def test_a_missing_file_fails_closed(tmp_path: Path) -> None:
    with pytest.raises(KeysFileError):
        ApiKeys(KeysFile(tmp_path / "absent.jsonl")).check_readable()
