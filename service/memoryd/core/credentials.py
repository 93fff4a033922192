"""The three credentials a caller may present, each turned into a `Principal`:

* an API key (`authorization: Bearer mdk_<id>_<secret>`), checked against the keys file;
* a JWT (`authorization: Bearer <jwt>`), checked with PyJWT against an HS256 secret, a PEM
  public key or a JWKS file, its issuer and audience;
* a client certificate (mutual TLS), already verified against the client CA by the TLS
  handshake; its subject names tenant (O), role (OU) and user (CN) by default.

Each raises `Unauthenticated` for a credential that does not hold; no secret or token is
ever put in a message, a log line or the audit log. The `Authenticator` holds those
configured (the composition root builds it) and picks the one a call presents.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from cryptography.x509.oid import NameOID

from memoryd.core.access import InvalidGrant, anonymous, make_principal
from memoryd.core.errors import Unauthenticated
from memoryd.core.models import Principal
from memoryd.settings import JwtSettings, TlsSettings
from memoryd.stores.keys.port import TOKEN_PREFIX, KeysFileError, KeyStore, key_id_of, token_hash

log = logging.getLogger(__name__)

INVALID = "CREDENTIAL_INVALID"
EXPIRED = "CREDENTIAL_EXPIRED"

# Compared against when the key id is unknown, so that both paths cost the same.
_NO_HASH = token_hash("mdk_000000000000_unknown")


def _invalid(message: str, *, key_id: str = "", detail: str = "") -> Unauthenticated:
    return Unauthenticated(INVALID, message, key_id=key_id, detail=detail)


class ApiKeys:
    """API keys of the keys file, re-read whenever it changes (so revocation is immediate)."""

    def __init__(self, keys: KeyStore) -> None:
        self._keys = keys
        self._reported: str | None = None

    def check_readable(self) -> None:
        """Raises KeysFileError when the file is missing or malformed (start-up refuses)."""
        self._keys.current()

    def verify(self, token: str) -> Principal:
        key_id = key_id_of(token) or ""
        try:
            keys = self._keys.current()
            self._reported = None
        except KeysFileError as exc:
            # Fail closed: a file we cannot read may hold a revocation.
            if str(exc) != self._reported:
                self._reported = str(exc)
                log.error("API keys refused until the keys file is fixed: %s", exc)
            raise _invalid("invalid API key", key_id=key_id, detail="keys file unusable") from None
        record = keys.get(key_id)
        expected = record.hash if record is not None else _NO_HASH
        if not hmac.compare_digest(expected.encode(), token_hash(token).encode()) or not record:
            raise _invalid("invalid API key", key_id=key_id, detail="unknown key or wrong secret")
        if record.revoked:
            raise _invalid("invalid API key", key_id=key_id, detail="revoked key")
        try:
            return make_principal(
                tenant=record.tenant,
                role=record.role,
                users=record.users,
                subject=f"key:{record.id}",
                credential="api_key",
                key_id=record.id,
                profile=record.profile,
            )
        except InvalidGrant as exc:
            raise _invalid("invalid API key", key_id=key_id, detail=str(exc)) from None


def _algorithms_of(key: Any) -> list[str]:
    """The signature algorithms a public key can verify (never HS*: no algorithm confusion)."""
    if isinstance(key, rsa.RSAPublicKey):
        return ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"]
    if isinstance(key, ec.EllipticCurvePublicKey):
        return {256: ["ES256"], 384: ["ES384"], 521: ["ES512"]}.get(key.curve.key_size, [])
    if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return ["EdDSA"]
    raise ValueError(f"unsupported public key type {type(key).__name__}")


class _JwksFile:
    """A JWKS file, re-read when it changes (key rotation without a restart)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._signature: tuple[int, int, int] | None = None
        self._set: jwt.PyJWKSet | None = None

    def key(self, kid: str | None) -> jwt.PyJWK:
        st = os.stat(self._path)
        signature = (st.st_ino, st.st_size, st.st_mtime_ns)
        if signature != self._signature or self._set is None:
            self._set = jwt.PyJWKSet.from_json(self._path.read_text(encoding="utf-8"))
            self._signature = signature
        keys = self._set.keys
        if kid is None:
            if len(keys) != 1:
                raise KeyError("the token has no kid and the key set holds several keys")
            return keys[0]
        return self._set[kid]


class JwtVerifier:
    def __init__(self, cfg: JwtSettings) -> None:
        sources = [cfg.hs256_secret, cfg.public_key_file, cfg.jwks_file]
        if sum(1 for s in sources if s) != 1:
            raise ValueError(
                "auth.jwt: configure exactly one of hs256_secret, public_key_file, jwks_file"
            )
        self._cfg = cfg
        self._jwks = _JwksFile(cfg.jwks_file) if cfg.jwks_file else None
        self._key: Any = None
        self._algorithms: list[str] = list(cfg.algorithms)
        if cfg.hs256_secret is not None:
            self._key = cfg.hs256_secret.get_secret_value()
            self._algorithms = self._algorithms or ["HS256"]
        elif cfg.public_key_file is not None:
            self._key = load_pem_public_key(cfg.public_key_file.read_bytes())
            self._algorithms = self._algorithms or _algorithms_of(self._key)
        elif cfg.jwks_file is not None:
            # Read now so that a bad file stops the start-up; later reads follow its changes.
            jwt.PyJWKSet.from_json(cfg.jwks_file.read_text(encoding="utf-8"))

    def _key_for(self, token: str) -> tuple[Any, Sequence[str]]:
        if self._jwks is None:
            return self._key, self._algorithms
        kid = jwt.get_unverified_header(token).get("kid")
        found = self._jwks.key(kid)
        return found.key, self._algorithms or [found.algorithm_name]

    def verify(self, token: str) -> Principal:
        cfg = self._cfg
        kid = ""
        try:
            kid = str(jwt.get_unverified_header(token).get("kid") or "")
            key, algorithms = self._key_for(token)
            required = ["exp", *(["iss"] if cfg.issuer else []), *(["aud"] if cfg.audience else [])]
            claims = jwt.decode(
                token,
                key,
                algorithms=list(algorithms),
                audience=cfg.audience,
                issuer=cfg.issuer,
                leeway=cfg.leeway_seconds,
                # PyJWT refuses a `sub` that is not a string; ours may list users (checked
                # below with the other claims).
                options={"require": required, "verify_sub": False},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated(EXPIRED, "token expired", key_id=kid) from None
        except (jwt.PyJWTError, KeyError, OSError, ValueError) as exc:
            # PyJWT's messages name the failed check (audience, signature, ...), not the token.
            raise _invalid("invalid token", key_id=kid, detail=f"jwt: {exc}") from None
        try:
            return make_principal(
                tenant=_text_claim(claims, cfg.tenant_claim),
                role=_text_claim(claims, cfg.role_claim),
                users=_names_claim(claims, cfg.user_claim),
                subject="jwt:" + ",".join(_names_claim(claims, "sub")),
                credential="jwt",
                key_id=kid or _text_claim(claims, "jti"),
                profile=_text_claim(claims, cfg.profile_claim) if cfg.profile_claim else None,
            )
        except InvalidGrant as exc:
            raise _invalid("invalid token", key_id=kid, detail=f"jwt claims: {exc}") from None


def _text_claim(claims: Mapping[str, Any], name: str) -> str:
    """A claim that names one thing (tenant, role, profile): a string, or absent. Anything
    else is refused, never turned into a name ("['acme', 'globex']" is no tenant)."""
    value = claims.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidGrant(f"claim {name!r} must be a string, not {type(value).__name__}")
    return value


def _names_claim(claims: Mapping[str, Any], name: str) -> list[str]:
    """A claim that may name several users (`sub` by default): a string, a non-empty list
    of strings, or absent."""
    value = claims.get(name)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    raise InvalidGrant(f"claim {name!r} must be a string or a non-empty list of strings")


_ATTRIBUTES = {
    "CN": NameOID.COMMON_NAME,
    "O": NameOID.ORGANIZATION_NAME,
    "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
    "L": NameOID.LOCALITY_NAME,
    "ST": NameOID.STATE_OR_PROVINCE_NAME,
    "C": NameOID.COUNTRY_NAME,
    "UID": NameOID.USER_ID,
    "serialNumber": NameOID.SERIAL_NUMBER,
    "emailAddress": NameOID.EMAIL_ADDRESS,
    "DC": NameOID.DOMAIN_COMPONENT,
}


def attribute_oid(name: str) -> x509.ObjectIdentifier:
    try:
        return _ATTRIBUTES[name]
    except KeyError:
        known = ", ".join(_ATTRIBUTES)
        raise ValueError(f"tls: unknown subject attribute {name!r}; one of {known}") from None


class ClientCertificates:
    """A client certificate the TLS handshake verified, read from the call's auth context."""

    def __init__(self, cfg: TlsSettings) -> None:
        self._tenant = attribute_oid(cfg.tenant_attribute)
        self._role = attribute_oid(cfg.role_attribute)
        self._user = attribute_oid(cfg.user_attribute)

    @staticmethod
    def pem_of(auth_context: Mapping[str, Iterable[bytes]]) -> bytes | None:
        return next(iter(auth_context.get("x509_pem_cert") or ()), None)

    def verify(self, pem: bytes) -> Principal:
        cert = x509.load_pem_x509_certificate(pem)
        fingerprint = "cert:" + hashlib.sha256(cert.tbs_certificate_bytes).hexdigest()[:16]
        subject = cert.subject

        def values(oid: x509.ObjectIdentifier) -> list[str]:
            return [str(a.value) for a in subject.get_attributes_for_oid(oid)]

        tenants, roles = values(self._tenant), values(self._role)
        if len(tenants) != 1 or len(roles) != 1:
            raise _invalid(
                "the client certificate names no single tenant and role",
                key_id=fingerprint,
                detail=f"certificate {subject.rfc4514_string()}",
            )
        try:
            return make_principal(
                tenant=tenants[0],
                role=roles[0],
                users=values(self._user),
                subject=f"cert:{subject.rfc4514_string()}",
                credential="mtls",
                key_id=fingerprint,
            )
        except InvalidGrant as exc:
            raise _invalid(
                "the client certificate grants nothing usable", key_id=fingerprint, detail=str(exc)
            ) from None


MISSING = "CREDENTIAL_MISSING"


class Authenticator:
    """Turns a call's credential into its principal (or raises Unauthenticated)."""

    def __init__(
        self,
        *,
        default_tenant: str = "default",
        keys: ApiKeys | None = None,
        tokens: JwtVerifier | None = None,
        certs: ClientCertificates | None = None,
    ) -> None:
        self._anonymous = anonymous(default_tenant)
        self._keys = keys
        self._tokens = tokens
        self.certs = certs

    @property
    def configured(self) -> bool:
        return bool(self._keys or self._tokens or self.certs)

    def authenticate(
        self, metadata: Sequence[tuple[str, str | bytes]], client_cert: bytes | None = None
    ) -> Principal:
        if not self.configured:
            return self._anonymous
        header = next((v for k, v in metadata if k == "authorization"), None)
        if header is not None:
            return self._bearer(header if isinstance(header, str) else header.decode("latin-1"))
        if client_cert is not None and self.certs is not None:
            return self.certs.verify(client_cert)
        raise Unauthenticated(
            MISSING, "this call needs a credential: `authorization: Bearer <API key or JWT>`"
        )

    def _bearer(self, header: str) -> Principal:
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated(
                "CREDENTIAL_INVALID", "authorization must be `Bearer <credential>`"
            )
        if token.startswith(TOKEN_PREFIX) and self._keys is not None:
            return self._keys.verify(token)
        if token.count(".") == 2 and self._tokens is not None:
            return self._tokens.verify(token)
        raise Unauthenticated("CREDENTIAL_INVALID", "invalid credential")
