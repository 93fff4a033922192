"""Settings: defaults, MEMORYD_ environment variables (nested with __), an optional TOML file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from memoryd.settings import InvalidSettings, Settings, load_settings


def use_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toml: str) -> None:
    """A config file holding `toml`, named by MEMORYD_CONFIG."""
    config = tmp_path / "memoryd.toml"
    config.write_text(toml)
    monkeypatch.setenv("MEMORYD_CONFIG", str(config))


def test_defaults_are_the_embedded_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MEMORYD_LISTEN", "MEMORYD_REDIS_URL", "MEMORYD_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings()
    assert settings.listen == "127.0.0.1:50051"
    assert settings.redis_url is None
    assert settings.vectors.backend == "edge" and settings.embedder.provider == "minilm-onnx"
    assert (settings.working.max_entries, settings.working.max_bytes) == (100, 10_240)
    assert settings.short_term.ttl_seconds == 3600
    assert settings.retrieval.min_score == 0.3


def test_environment_variables_with_nested_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_LISTEN", "0.0.0.0:6000")
    monkeypatch.setenv("MEMORYD_REDIS_URL", "redis://cache:6379/1")
    monkeypatch.setenv("MEMORYD_WORKING__MAX_ENTRIES", "7")
    settings = load_settings()
    assert settings.listen == "0.0.0.0:6000"
    assert settings.redis_url == "redis://cache:6379/1"
    assert settings.working.max_entries == 7


def test_a_toml_file_is_read_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_config_file(
        tmp_path, monkeypatch, 'listen = "127.0.0.1:7000"\n[short_term]\nttl_seconds = 60\n'
    )
    monkeypatch.setenv("MEMORYD_LISTEN", "127.0.0.1:7001")
    settings = load_settings()
    assert settings.short_term.ttl_seconds == 60
    assert settings.listen == "127.0.0.1:7001"


@pytest.mark.parametrize("provider", ["mpnet-onnx", "mpnet"])
def test_an_mpnet_embedder_brings_the_ranking_tuned_for_it(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMORYD_CONFIG", raising=False)
    monkeypatch.setenv("MEMORYD_EMBEDDER__PROVIDER", provider)
    retrieval = load_settings().retrieval
    assert (retrieval.min_score, retrieval.fusion_keyword_weight) == (0.32, 0.3)
    assert retrieval.own_weight == 0.5
    assert retrieval.diversity == 0.3  # the rest stays the default


def test_a_ranking_value_the_operator_sets_wins_over_the_embedders_even_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_config_file(
        tmp_path, monkeypatch, '[embedder]\nprovider = "mpnet-onnx"\n[retrieval]\nmin_score = 0.3\n'
    )
    monkeypatch.setenv("MEMORYD_RETRIEVAL__FUSION_KEYWORD_WEIGHT", "0.55")
    retrieval = load_settings().retrieval
    assert (retrieval.min_score, retrieval.fusion_keyword_weight) == (0.3, 0.55)
    minilm = Settings.explicit(retrieval={"diversity": 0.2}).retrieval
    assert (minilm.min_score, minilm.fusion_keyword_weight) == (0.3, 0.5)


@pytest.mark.parametrize(
    ("provider", "calls", "backlog"),
    [("minilm-onnx", 2, 16), ("mpnet-onnx", 2, 16), ("openai", 4, 1), ("minilm", 1, 1)],
)
def test_the_embedding_batcher_follows_the_provider_unless_set(
    provider: str, calls: int, backlog: int
) -> None:
    embedder = Settings.explicit(embedder={"provider": provider}).embedder
    assert (embedder.batch_concurrency, embedder.batch_parallel_backlog) == (calls, backlog)
    chosen = {"provider": provider, "batch_concurrency": 1, "batch_parallel_backlog": 3}
    embedder = Settings.explicit(embedder=chosen).embedder
    assert (embedder.batch_concurrency, embedder.batch_parallel_backlog) == (1, 3)


def test_a_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidSettings, match="config file not found"):
        load_settings(tmp_path / "nope.toml")


def test_invalid_values_are_refused() -> None:
    with pytest.raises(ValidationError):
        Settings(working={"max_entries": 0})


def test_episodic_structured_and_retention_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = Settings()
    assert (defaults.episodic.ttl_days, defaults.episodic.max_episodes_per_agent) == (90, 1000)
    assert defaults.episodic.max_steps == 50
    assert (defaults.structured.max_documents, defaults.structured.max_bytes) == (
        5000,
        50 * 1024 * 1024,
    )
    retention = defaults.retention
    assert (
        retention.long_term_archive_after_days,
        retention.structured_archive_after_days,
        retention.episodic_archive_after_days,
    ) == (365, 180, 90)
    monkeypatch.setenv("MEMORYD_EPISODIC__TTL_DAYS", "30")
    monkeypatch.setenv("MEMORYD_STRUCTURED__MAX_DOCUMENTS", "10")
    monkeypatch.setenv("MEMORYD_RETENTION__EPISODIC_ARCHIVE_AFTER_DAYS", "45")
    settings = load_settings()
    assert settings.episodic.ttl_days == 30 and settings.structured.max_documents == 10
    assert settings.retention.episodic_archive_after_days == 45


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No MEMORYD_* variable of the environment the tests run in."""
    for name in [n for n in os.environ if n.upper().startswith("MEMORYD_")]:
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize(
    ("toml", "named", "nearest"),
    [
        ('lisen = "127.0.0.1:7000"\n', "lisen", "listen"),
        ("[working]\nmax_entrie = 5\n", "working.max_entrie", "working.max_entries"),
        (
            "[quotas.profiles.free]\nqueries_per_minut = 5\n",
            "quotas.profiles.free.queries_per_minut",
            "quotas.profiles.free.queries_per_minute",
        ),
    ],
)
def test_a_misspelt_key_in_the_file_refuses_naming_the_nearest_setting(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, toml: str, named: str, nearest: str
) -> None:
    config = tmp_path / "memoryd.toml"
    config.write_text(toml)
    with pytest.raises(InvalidSettings) as refused:
        load_settings(config)
    message = str(refused.value)
    assert f"{named} in {config} is not a setting" in message
    assert f"did you mean {nearest}?" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("variable", "nearest"),
    [
        ("MEMORYD_LISEN", "MEMORYD_LISTEN"),
        ("MEMORYD_LOGLEVEL", "MEMORYD_LOG_LEVEL"),
        ("MEMORYD_WORKING__MAX_ENTRIE", "MEMORYD_WORKING__MAX_ENTRIES"),
        ("MEMORYD_VECTOR__BACKEND", "MEMORYD_VECTORS__BACKEND"),
        ("MEMORYD_RETRIEVAL_MODE", "MEMORYD_RETRIEVAL__MODE"),
    ],
)
def test_a_misspelt_variable_refuses_naming_the_nearest_setting(
    clean_env: pytest.MonkeyPatch, variable: str, nearest: str
) -> None:
    clean_env.setenv(variable, "1")
    with pytest.raises(InvalidSettings) as refused:
        load_settings()
    assert str(refused.value) == f"{variable} is not a setting of memoryd; did you mean {nearest}?"


def test_variables_of_the_clients_tools_and_tests_are_no_misspelt_settings(
    clean_env: pytest.MonkeyPatch,
) -> None:
    """They share the prefix (the rule is in docs/operations.md): a server started from a
    shell that set them for a client, or from the test suite, starts."""
    for name in ("CONFIG", "TARGET", "USER_ID", "AGENT_ID", "PYTHON", "FUZZ_SEED"):
        clean_env.setenv(f"MEMORYD_{name}", "x")
    clean_env.delenv("MEMORYD_CONFIG")
    clean_env.setenv("MEMORYD_CRASH_ROUNDS", "3")
    clean_env.setenv("MEMORYD_SOME_TOOL_OF_YOURS", "x")  # close to no setting
    clean_env.setenv("MEMORYD_QUOTAS__TENANT_PROFILES__ACME", "pro")  # a map's key
    assert load_settings().quotas.tenant_profiles == {"acme": "pro"}


def test_a_map_setting_that_is_not_json_is_refused_naming_the_variable(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("MEMORYD_QUOTAS__USER_PROFILES", "acme/alice=pro")
    with pytest.raises(InvalidSettings, match=r"^MEMORYD_QUOTAS__USER_PROFILES must be JSON"):
        load_settings()


@pytest.mark.parametrize(
    ("listen", "refusal"),
    [
        ("127.0.0.1:99999", "port 99999 is out of range"),
        ("127.0.0.1:-1", "port -1 is out of range"),
        ("garbage", "must be host:port"),
        (":50051", "must be host:port"),
        ("127.0.0.1:", "must be host:port"),
    ],
)
def test_listen_must_be_a_host_and_a_port_in_range(
    clean_env: pytest.MonkeyPatch, listen: str, refusal: str
) -> None:
    for variable in ("MEMORYD_LISTEN", "MEMORYD_METRICS__LISTEN"):
        clean_env.setenv(variable, listen)
        with pytest.raises(InvalidSettings) as refused:
            load_settings()
        assert f"({variable}): {refusal}" in str(refused.value)
        clean_env.delenv(variable)


def test_listen_accepts_names_v6_any_free_port_and_unix_sockets() -> None:
    for listen in ("localhost:1", "[::1]:65535", "0.0.0.0:0", "unix:/run/memoryd.sock"):
        assert Settings.explicit(listen=listen).listen == listen
    assert Settings.explicit(metrics={"listen": ""}).metrics.listen == ""


def test_a_redis_url_must_be_a_redis_url(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("MEMORYD_REDIS_URL", "garbage")
    with pytest.raises(InvalidSettings, match=r"\(MEMORYD_REDIS_URL\): must be a redis://"):
        load_settings()


def test_an_invalid_value_names_the_setting_and_its_variable(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("MEMORYD_QUOTAS__DEFAULT_PROFILE", "gold")
    with pytest.raises(InvalidSettings) as refused:
        load_settings()
    assert str(refused.value) == (
        "setting quotas.default_profile (MEMORYD_QUOTAS__DEFAULT_PROFILE): unknown quota "
        "profile 'gold' (known: default, enterprise, free, pro)"
    )


def test_a_secret_is_never_shown_in_a_refusal(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "memoryd.toml"
    config.write_text("[embedder]\nopenai_api_key = 31415926535\n")  # a number, no string
    with pytest.raises(InvalidSettings) as refused:
        load_settings(config)
    assert "embedder.openai_api_key" in str(refused.value)
    assert "31415926535" not in str(refused.value) and "withheld" in str(refused.value)


def test_explicit_settings_read_no_environment_and_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_config_file(tmp_path, monkeypatch, 'listen = "127.0.0.1:7000"\n')
    monkeypatch.setenv("MEMORYD_LISTEN", "127.0.0.1:7001")
    monkeypatch.setenv("MEMORYD_WORKING__MAX_ENTRIES", "7")
    settings = Settings.explicit(data_dir=tmp_path)
    assert settings.listen == "127.0.0.1:50051" and settings.working.max_entries == 100
    assert settings.data_dir == tmp_path
    with pytest.raises(ValidationError, match="max_entrie"):
        Settings.explicit(working={"max_entrie": 5})
