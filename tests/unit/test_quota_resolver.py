"""Quota profiles (RT-006): settings, environment JSON, and who gets which profile."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memoryd.core.lifecycle.quotas import QuotaProfiles
from memoryd.core.models import Scope
from memoryd.settings import (
    LongTermSettings,
    QuotaProfile,
    QuotaSettings,
    Settings,
    load_settings,
)

ANA = Scope(tenant="acme", user_id="ana")
BOB = Scope(tenant="acme", user_id="bob")
EVE = Scope(tenant="other", user_id="eve")


def test_the_built_in_profiles_carry_the_rt006_figures() -> None:
    profiles = QuotaSettings().profiles
    assert {n: p.long_term_max_memories for n, p in profiles.items()} == {
        "free": 100,
        "pro": 10_000,
        "enterprise": 100_000,
    }
    mb = 1024 * 1024
    assert [profiles[n].long_term_max_bytes for n in ("free", "pro", "enterprise")] == [
        10 * mb,
        100 * mb,
        1000 * mb,
    ]
    assert [profiles[n].entity_max_entities for n in ("free", "pro", "enterprise")] == [
        500,
        5_000,
        50_000,
    ]


def test_user_assignment_wins_over_tenant_which_wins_over_default() -> None:
    quotas = QuotaSettings(
        tenant_profiles={"acme": "enterprise"}, user_profiles={"acme/ana": "free"}
    )
    resolver = QuotaProfiles(quotas, LongTermSettings())
    assert resolver.profile_for(ANA).name == "free"
    assert resolver.profile_for(ANA).limits.long_term_max_memories == 100
    assert resolver.profile_for(BOB).name == "enterprise"
    other = resolver.profile_for(EVE)
    assert other.name == "default"
    assert other.limits.long_term_max_memories == 10_000


def test_the_default_profile_is_the_long_term_block() -> None:
    resolver = QuotaProfiles(QuotaSettings(), LongTermSettings(max_memories=20, max_bytes=500))
    limits = resolver.profile_for(EVE).limits
    assert (limits.long_term_max_memories, limits.long_term_max_bytes) == (20, 500)


def test_the_default_profile_can_be_a_named_one() -> None:
    resolver = QuotaProfiles(QuotaSettings(default_profile="free"), LongTermSettings())
    assert resolver.profile_for(EVE).name == "free"


def test_assignments_are_read_from_the_environment_as_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMORYD_QUOTAS__TENANT_PROFILES", '{"acme": "enterprise"}')
    monkeypatch.setenv("MEMORYD_QUOTAS__USER_PROFILES", '{"acme/ana": "free"}')
    monkeypatch.setenv("MEMORYD_QUOTAS__DEFAULT_PROFILE", "pro")
    quotas = load_settings().quotas
    assert quotas.tenant_profiles == {"acme": "enterprise"}
    assert quotas.user_profiles == {"acme/ana": "free"}
    assert quotas.default_profile == "pro"


def test_one_field_of_a_built_in_profile_can_be_changed_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMORYD_QUOTAS__PROFILES__FREE__LONG_TERM_MAX_MEMORIES", "50")
    profiles = load_settings().quotas.profiles
    assert profiles["free"].long_term_max_memories == 50
    assert profiles["free"].long_term_max_bytes == 10 * 1024 * 1024
    assert profiles["enterprise"].long_term_max_memories == 100_000


def test_a_custom_profile_can_be_added() -> None:
    quotas = QuotaSettings(
        profiles={"team": {"long_term_max_memories": 500}},  # type: ignore[dict-item]
        user_profiles={"acme/ana": "team"},
    )
    assert quotas.profiles["team"].long_term_max_memories == 500
    assert set(quotas.profiles) == {"free", "pro", "enterprise", "team"}


@pytest.mark.parametrize(
    "fields",
    [
        {"default_profile": "gold"},
        {"tenant_profiles": {"acme": "gold"}},
        {"user_profiles": {"acme/ana": "gold"}},
        {"user_profiles": {"ana": "free"}},
    ],
)
def test_unknown_profiles_and_malformed_keys_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        QuotaSettings(**fields)  # type: ignore[arg-type]


def test_the_default_profile_takes_the_long_term_block_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMORYD_LONG_TERM__MAX_MEMORIES", "250")
    resolved = QuotaProfiles.of(load_settings()).profile_for(Scope(tenant="default", user_id="u"))
    assert resolved.name == "default"
    assert resolved.limits.long_term_max_memories == 250


def test_a_profile_names_every_per_user_limit_of_every_tier() -> None:
    """The quota profile is the one home of per-user limits: those of the vector tiers that
    have quotas, and the rates. A field the profile may leave unset names the tier block
    setting it falls back to."""
    assert set(QuotaProfile.model_fields) == {
        "long_term_max_memories",
        "long_term_max_bytes",
        "episodic_max_episodes_per_agent",
        "structured_max_documents",
        "structured_max_bytes",
        "entity_max_entities",
        "entity_max_relations",
        "queries_per_minute",
        "writes_per_minute",
    }
    settings = Settings.explicit()
    for name, field in QuotaProfile.model_fields.items():
        if field.default is None and not name.endswith("_per_minute"):
            block, _, setting = name.partition("_max_")
            assert hasattr(getattr(settings, block), f"max_{setting}"), name


def test_a_profile_sets_the_structured_and_episodic_limits_and_the_rest_are_tier_defaults() -> None:
    settings = Settings.explicit(
        structured={"max_documents": 7},
        quotas={
            "profiles": {
                "team": {"structured_max_bytes": 999, "episodic_max_episodes_per_agent": 4}
            },
            "user_profiles": {"acme/ana": "team"},
        },
    )
    profiles = QuotaProfiles.of(settings)
    team = profiles.profile_for(ANA).limits
    assert (team.structured_max_documents, team.structured_max_bytes) == (7, 999)
    assert team.episodic_max_episodes_per_agent == 4
    assert team.long_term_max_memories == settings.long_term.max_memories
    default = profiles.profile_for(BOB).limits
    assert default.structured_max_bytes == settings.structured.max_bytes
    assert default.episodic_max_episodes_per_agent == settings.episodic.max_episodes_per_agent


def test_quota_limits_have_no_second_home_under_quotas() -> None:
    """`quotas.long_term` was a second place for the default profile's long-term limits:
    a setting naming it now refuses to start."""
    with pytest.raises(ValidationError):
        QuotaSettings(long_term={"max_memories": 5})  # type: ignore[call-arg]
