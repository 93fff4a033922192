"""The generated reference documents match the code, and every setting explains itself."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_docs"] = module
    spec.loader.exec_module(module)
    return module


def test_reference_documents_are_current() -> None:
    assert _gen_docs().stale() == [], "run `make docs` and commit docs/reference/"


def test_every_setting_has_a_description() -> None:
    from memoryd.settings import Settings

    undocumented = [
        env for env, _, _, meaning in _gen_docs()._rows(Settings, "MEMORYD_") if not meaning
    ]
    assert undocumented == []


def test_every_rpc_is_documented_with_its_purpose() -> None:
    text = (ROOT / "docs" / "reference" / "rpcs.md").read_text()
    for row in [line for line in text.splitlines() if line.startswith("| `")]:
        assert not row.rstrip().endswith("|  |"), row


def test_errors_reference_lists_every_reason() -> None:
    text = (ROOT / "docs" / "reference" / "errors.md").read_text(encoding="utf-8")
    for reason in ("INVALID_ARGUMENT", "QUOTA_EXCEEDED", "STORE_UNAVAILABLE", "UNIMPLEMENTED"):
        assert f"| `{reason}` |" in text
