"""Settings: defaults, MEMORYD_ environment variables (nested with __), an optional TOML file."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from memoryd.settings import Settings, load_settings


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
    config = tmp_path / "memoryd.toml"
    config.write_text('listen = "127.0.0.1:7000"\n[short_term]\nttl_seconds = 60\n')
    monkeypatch.setenv("MEMORYD_CONFIG", str(config))
    monkeypatch.setenv("MEMORYD_LISTEN", "127.0.0.1:7001")
    settings = load_settings()
    assert settings.short_term.ttl_seconds == 60
    assert settings.listen == "127.0.0.1:7001"


def test_a_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
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
