"""Settings of identity, TLS and rate limits, as the environment gives them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from memoryd.core.lifecycle.quotas import QuotaProfiles
from memoryd.core.models import Scope
from memoryd.settings import LongTermSettings, Settings, load_settings
from memoryd.transport.identity import credentials_configured


def test_auth_and_tls_come_from_memoryd_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_AUTH__KEYS_FILE", "/etc/memoryd/keys.jsonl")
    monkeypatch.setenv("MEMORYD_AUTH__ALLOW_UNAUTHENTICATED", "true")
    monkeypatch.setenv("MEMORYD_AUTH__JWT__AUDIENCE", "memoryd")
    monkeypatch.setenv("MEMORYD_AUTH__JWT__ALGORITHMS", '["ES256"]')
    monkeypatch.setenv("MEMORYD_TLS__CERT_FILE", "/tls/server.crt")
    monkeypatch.setenv("MEMORYD_TLS__KEY_FILE", "/tls/server.key")
    monkeypatch.setenv("MEMORYD_TLS__CLIENT_CA_FILE", "/tls/ca.crt")
    monkeypatch.setenv("MEMORYD_API_KEY", "mdk_abc")
    s = load_settings()
    assert s.auth.keys_file == Path("/etc/memoryd/keys.jsonl")
    assert s.auth.allow_unauthenticated and s.auth.jwt.audience == "memoryd"
    assert s.auth.jwt.algorithms == ["ES256"] and not s.auth.jwt.enabled
    assert s.tls.client_ca_file == Path("/tls/ca.crt")
    assert s.api_key is not None and s.api_key.get_secret_value() == "mdk_abc"
    assert "mdk_abc" not in repr(s)
    assert credentials_configured(s)


def test_by_default_no_credential_is_configured() -> None:
    s = Settings()
    assert not credentials_configured(s)
    assert (s.auth.default_tenant, s.auth.allow_unauthenticated) == ("default", False)


def test_a_tls_key_without_its_certificate_is_refused() -> None:
    with pytest.raises(ValidationError):
        Settings(tls={"key_file": "/tls/server.key"})
    with pytest.raises(ValidationError):
        Settings(tls={"client_ca_file": "/tls/ca.crt"})


def test_profiles_carry_rate_limits_and_the_default_profile_has_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMORYD_QUOTAS__PROFILES__PRO__QUERIES_PER_MINUTE", "120")
    quotas = load_settings().quotas
    assert (
        quotas.profiles["free"].queries_per_minute,
        quotas.profiles["free"].writes_per_minute,
    ) == (10, 60)
    assert quotas.profiles["pro"].queries_per_minute == 120
    assert quotas.profiles["pro"].long_term_max_memories == 10_000  # the rest of pro stays
    default = QuotaProfiles(quotas, LongTermSettings()).profile_for(Scope("t", "u")).limits
    assert (default.queries_per_minute, default.writes_per_minute) == (None, None)
