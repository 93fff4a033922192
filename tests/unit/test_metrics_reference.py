"""The metric definitions are the one list: the registry holds exactly them, and the
committed reference page is made from them."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from memoryd.telemetry.metrics import ALLOWED_LABELS, SPECS, Metrics, reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "metrics.md"


def test_the_reference_page_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == reference(), "regenerate: make docs"


def test_the_registry_holds_exactly_the_documented_metrics() -> None:
    registry = CollectorRegistry()
    Metrics(registry)
    exported = {(m.name, m.type) for m in registry.collect()}
    documented = {(s.name.removesuffix("_total"), s.kind) for s in SPECS}
    assert exported == documented


def test_labels_come_from_closed_sets_never_users_keys_or_content() -> None:
    for spec in SPECS:
        assert set(spec.labels) <= ALLOWED_LABELS, spec.name
    assert not {"user", "user_id", "key", "content", "query", "tenant", "session_id"} & (
        ALLOWED_LABELS
    )


def test_the_rt005_retention_metrics_keep_their_names_and_labels() -> None:
    by_name = {s.name: s for s in SPECS}
    assert by_name["memory_archived_total"].labels == ("memory_type",)
    assert by_name["memory_deleted_total"].labels == ("memory_type", "reason")
    assert by_name["memory_storage_bytes"].labels == ("memory_type",)
    assert (by_name["memory_age_days"].kind, by_name["memory_age_days"].labels) == (
        "histogram",
        ("memory_type",),
    )
