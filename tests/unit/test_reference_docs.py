"""Generated reference pages are committed; they must match the code they come from."""

from __future__ import annotations

from pathlib import Path

from memoryd.transport.status_map import reference_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_errors_reference_is_up_to_date() -> None:
    page = ROOT / "docs" / "reference" / "errors.md"
    assert page.read_text(encoding="utf-8") == reference_markdown(), (
        "docs/reference/errors.md is stale: run `PYTHONPATH=service python "
        "scripts/gen_reference.py`"
    )


def test_errors_reference_lists_every_reason() -> None:
    text = (ROOT / "docs" / "reference" / "errors.md").read_text(encoding="utf-8")
    for reason in ("INVALID_ARGUMENT", "QUOTA_EXCEEDED", "STORE_UNAVAILABLE", "UNIMPLEMENTED"):
        assert f"| `{reason}` |" in text
