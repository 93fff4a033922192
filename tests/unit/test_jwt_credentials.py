"""JWT credentials (PyJWT): an HS256 secret, a PEM public key or a JWKS file; issuer and
audience required when configured; tenant, role and user from configurable claims."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from memoryd.core.credentials import JwtVerifier
from memoryd.core.errors import Unauthenticated
from memoryd.core.models import AccessRole
from memoryd.settings import JwtSettings

SECRET = "a-test-secret-of-at-least-32-bytes!!"
ISSUER = "https://idp.example"
AUDIENCE = "memoryd"


def claims(**over: Any) -> dict[str, Any]:
    base = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "tenant": "acme",
        "role": "agent",
        "exp": int(time.time()) + 300,
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def hs_verifier(**over: Any) -> JwtVerifier:
    return JwtVerifier(
        JwtSettings(hs256_secret=SECRET, issuer=ISSUER, audience=AUDIENCE, **over)  # type: ignore[arg-type]
    )


def refused(verifier: JwtVerifier, token: str) -> Unauthenticated:
    with pytest.raises(Unauthenticated) as caught:
        verifier.verify(token)
    return caught.value


def test_a_good_token_names_tenant_role_and_the_bound_user() -> None:
    who = hs_verifier().verify(jwt.encode(claims(), SECRET, algorithm="HS256"))
    assert (who.tenant, who.role, who.users) == ("acme", AccessRole.AGENT, frozenset({"alice"}))
    assert (who.credential, who.subject) == ("jwt", "jwt:alice")


def test_an_expired_token_is_refused_as_expired() -> None:
    token = jwt.encode(claims(exp=int(time.time()) - 10), SECRET, algorithm="HS256")
    assert refused(hs_verifier(), token).reason == "CREDENTIAL_EXPIRED"


def test_a_token_for_another_audience_is_refused() -> None:
    token = jwt.encode(claims(aud="another-service"), SECRET, algorithm="HS256")
    err = refused(hs_verifier(), token)
    assert err.reason == "CREDENTIAL_INVALID" and "audience" in err.detail.lower()


def test_a_token_signed_with_another_key_is_refused() -> None:
    token = jwt.encode(claims(), "another-secret-of-at-least-32-bytes!!", algorithm="HS256")
    err = refused(hs_verifier(), token)
    assert err.reason == "CREDENTIAL_INVALID" and "signature" in err.detail.lower()


def test_another_issuer_a_missing_exp_and_alg_none_are_refused() -> None:
    verifier = hs_verifier()
    refused(verifier, jwt.encode(claims(iss="https://evil.example"), SECRET, algorithm="HS256"))
    refused(verifier, jwt.encode(claims(exp=None), SECRET, algorithm="HS256"))
    # PyJWT takes "" as the absent key that alg "none" requires.
    refused(verifier, jwt.encode(claims(), "", algorithm="none"))


def test_claims_that_grant_nothing_usable_are_refused() -> None:
    verifier = hs_verifier()
    refused(verifier, jwt.encode(claims(tenant=None), SECRET, algorithm="HS256"))
    refused(verifier, jwt.encode(claims(role="owner"), SECRET, algorithm="HS256"))


def test_claim_names_are_configurable_and_a_list_binds_several_users() -> None:
    verifier = hs_verifier(
        tenant_claim="org", role_claim="memoryd_role", user_claim="users", profile_claim="plan"
    )
    token = jwt.encode(
        claims(org="globex", memoryd_role="reader", users=["u1", "u2"], plan="free"),
        SECRET,
        algorithm="HS256",
    )
    who = verifier.verify(token)
    assert (who.tenant, who.role, who.users, who.profile) == (
        "globex",
        AccessRole.READER,
        frozenset({"u1", "u2"}),
        "free",
    )


def test_a_list_in_sub_binds_several_users_as_the_docs_allow() -> None:
    token = jwt.encode(claims(sub=["alice", "bob"]), SECRET, algorithm="HS256")
    who = hs_verifier().verify(token)
    assert who.users == frozenset({"alice", "bob"}) and who.subject == "jwt:alice,bob"


@pytest.mark.parametrize(
    "bad",
    [
        {"tenant": ["acme", "globex"]},
        {"tenant": {"name": "acme"}},
        {"tenant": 7},
        {"role": ["admin"]},
        {"plan": ["free"]},
        {"sub": []},
        {"sub": ["alice", 7]},
        {"sub": {"id": "alice"}},
    ],
)
def test_a_claim_of_the_wrong_shape_is_refused_never_turned_into_a_name(
    bad: dict[str, Any],
) -> None:
    verifier = hs_verifier(profile_claim="plan")
    err = refused(
        verifier, jwt.encode(claims(**{"plan": "free", **bad}), SECRET, algorithm="HS256")
    )
    [claim] = bad
    assert err.reason == "CREDENTIAL_INVALID" and repr(claim) in err.detail


def test_an_admin_token_acts_for_every_user_of_its_tenant() -> None:
    who = hs_verifier().verify(jwt.encode(claims(role="admin"), SECRET, algorithm="HS256"))
    assert who.role is AccessRole.ADMIN and who.users == frozenset()


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def test_rs256_with_a_pem_public_key_and_no_algorithm_confusion(tmp_path: Path) -> None:
    key = _rsa()
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (tmp_path / "pub.pem").write_bytes(pem)
    verifier = JwtVerifier(
        JwtSettings(public_key_file=tmp_path / "pub.pem", issuer=ISSUER, audience=AUDIENCE)
    )
    assert verifier.verify(jwt.encode(claims(), key, algorithm="RS256")).tenant == "acme"
    refused(verifier, jwt.encode(claims(), _rsa(), algorithm="RS256"))
    # HS256 "signed" with the public key as the secret must not pass.
    refused(verifier, _hs256_with_raw_key(pem))


def _hs256_with_raw_key(secret: bytes) -> str:
    """A token MACed with `secret` by hand (PyJWT itself refuses a PEM as an HMAC key)."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims()).encode())
    mac = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(mac)}"


def test_es256_from_a_jwks_file_chosen_by_kid_and_rotated_without_restart(tmp_path: Path) -> None:
    def jwk(key: ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
        entry: dict[str, Any] = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
        return {**entry, "kid": kid, "alg": "ES256", "use": "sig"}

    old, new = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk(old, "k-old")]}))
    verifier = JwtVerifier(JwtSettings(jwks_file=jwks, issuer=ISSUER, audience=AUDIENCE))
    old_token = jwt.encode(claims(), old, algorithm="ES256", headers={"kid": "k-old"})
    assert verifier.verify(old_token).key_id == "k-old"
    new_token = jwt.encode(claims(), new, algorithm="ES256", headers={"kid": "k-new"})
    refused(verifier, new_token)
    jwks.write_text(json.dumps({"keys": [jwk(new, "k-new")]}))
    assert verifier.verify(new_token).key_id == "k-new"
    refused(verifier, old_token)


def test_exactly_one_key_source_is_configured() -> None:
    with pytest.raises(ValueError):
        JwtVerifier(JwtSettings(hs256_secret=SECRET, jwks_file=Path("x.json")))  # type: ignore[arg-type]
