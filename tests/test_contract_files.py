"""The contract: buf lint is clean and the committed stubs match the proto."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_buf_lint_is_clean() -> None:
    buf = Path(sys.executable).parent / "buf"
    result = subprocess.run([str(buf), "lint"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("fresh", "committed"),
    [
        ("server/memoryd/v1", "service/memoryd/v1"),
        # The client distribution's copy (docs/adr/0200-one-generation-two-packages.md).
        ("client/memoryd_client/v1", "clients/python/memoryd_client/v1"),
    ],
)
def test_committed_stubs_are_not_stale(tmp_path: Path, fresh: str, committed: str) -> None:
    subprocess.run(
        ["bash", "scripts/gen_stubs.sh", str(tmp_path / "server"), str(tmp_path / "client")],
        cwd=ROOT,
        check=True,
        capture_output=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    names = sorted(p.name for p in (tmp_path / fresh).iterdir() if p.is_file())
    kept = sorted(p.name for p in (ROOT / committed).iterdir() if p.is_file())
    assert names == kept, f"{committed} holds {kept}, a fresh generation {names}: run `make gen`"
    _, mismatch, errors = filecmp.cmpfiles(tmp_path / fresh, ROOT / committed, names, shallow=False)
    assert not mismatch and not errors, f"stale stubs {mismatch + errors}: run `make gen`"
